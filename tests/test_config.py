import pytest

from tfclaims.nn.config import ConfigError, ModelConfig, TrainConfig


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"d_model": 100, "n_heads": 3}, "divisible by n_heads"),
        ({"n_heads": 8, "n_kv_heads": 3}, "divisible by n_kv_heads"),
        ({"d_model": 0}, "positive integer"),
        ({"n_layers": -1}, "positive integer"),
        ({"norm": "group"}, "norm must be one of"),
        ({"placement": "sandwich"}, "placement must be one of"),
        ({"ffn": "tanh"}, "ffn must be one of"),
        ({"attn_scale": 0.0}, "attn_scale must be positive"),
        ({"n_experts": 4, "moe_top_k": 5}, "moe_top_k"),
        ({"pos": "rope", "d_model": 24, "n_heads": 8}, "even head_dim"),
    ],
)
def test_invalid_model_configs_raise_one_clear_error(kwargs, msg):
    with pytest.raises(ConfigError, match=msg):
        ModelConfig(**kwargs)


def test_derived_fields():
    c = ModelConfig(d_model=128, n_heads=8, n_kv_heads=2)
    assert (c.dk, c.kv_heads, c.ff, c.use_final_norm) == (16, 2, 512, True)
    assert ModelConfig(d_model=4096, n_heads=32, ffn="swiglu").ff == 11008  # LLaMA-7B's rule
    assert ModelConfig(placement="post").use_final_norm is False
    assert abs(c.scale - 0.25) < 1e-12 and ModelConfig(attn_scale=1.0).scale == 1.0


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        ModelConfig().d_model = 3


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"warmup": 300, "steps": 200}, "warmup"),
        ({"lr": 0}, "lr"),
        ({"schedule": "step"}, "schedule"),
        ({"grad_clip": 0}, "grad_clip"),
    ],
)
def test_invalid_train_configs(kwargs, msg):
    with pytest.raises(ConfigError, match=msg):
        TrainConfig(**kwargs)
