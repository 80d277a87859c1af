"""The declared rule of `prenorm_effective_depth`, fed synthetic probe records. The staged grid grows as the
runner grows it (each placement's sweep chooses its rate on the selection seeds); the probe readings of each
run are written per block so that the deeper half's means are known in advance."""

import numpy as np
import pytest

from tfclaims.harness.registry import load

from rules import analyse, decisions, grown, sub, verdicts

EXP = load("prenorm_effective_depth")
P = EXP.profiles["quick"]
UNIGRAM = 3.3
JITTER = (0.011, -0.007, 0.004, -0.009)  # per seed: the null pair's spread comes from it
COUNTED = ("updates", "decay", "delete", "shallower")
GAIN = {"pre": 0.0, "post": 0.2}  # the notes' picture: the twin of half the blocks costs Post-LN, not Pre-LN


def blocks(L: int, late_update: float, early_update: float, delete: float, cosine: float, s: int) -> dict:
    """Per-block readings whose deeper-half means are late_update, delete and cosine (the shallower half at
    early_update), with a seed-dependent wobble."""
    w = JITTER[s]
    half = (L + 1) // 2
    up = [early_update * (1 + w)] * half + [late_update * (1 + w)] * (L - half)
    return {
        "relative_update": up,
        "cosine": [cosine - abs(w)] * L,
        "ablation": {"loss": 2.0, "deleted": [delete + w] * L, "swapped": [delete / 2 + w] * (L - 1)},
    }


PRE_SHALLOW = dict(late_update=0.1, early_update=0.5, delete=0.01, cosine=0.99)  # the notes' picture
POST_DEEP = dict(late_update=0.4, early_update=0.4, delete=0.3, cosine=0.9)


def records(pre=PRE_SHALLOW, post=POST_DEEP, learned=True, p=P, pre_learned=None, post_shift=0.0, gain=GAIN):
    """gain[placement]: how much higher the shallower, wider twin ends than its L-block stack."""
    first = {p["scales"][0][1], p["scales"][0][1] // 2}

    def metrics(c: dict) -> dict:
        s = c["seed"] % 1000 % 4
        wide = c.get("shape") == "wide"
        best = p["rates"][-1] if c["n_layers"] in first else p["rates"][-1] / 2
        v = 2.0 + JITTER[s] + 0.05 * np.log2(c["lr"] / best) ** 2 + (gain[c["placement"]] if wide else 0.0)
        ok = learned if c["placement"] == "post" or pre_learned is None else pre_learned
        v += post_shift if c["placement"] == "post" else 0.0
        if not ok:
            v = UNIGRAM + 0.02 * (s % 2)
        m = {
            "final_val": v,
            "best_val": v,
            "val_loss": [4.4, v + 0.2, v],
            "eval_steps": [0, 6, 12],
            "unigram_xent": UNIGRAM,
            "diverged_at": None,
            **blocks(c["n_layers"], **(pre if c["placement"] == "pre" else post), s=s),
        }
        return m

    return grown(EXP, p, metrics)


def test_prenorm_rule_supported_when_pre_ln_blocks_matter_less_at_every_depth(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    assert all(verdicts(v)[k] == "supported" for k in COUNTED)
    assert all(sub(v, k).counts for k in COUNTED) and not sub(v, "swap").counts
    assert verdicts(v)["quality"] == "supported"  # both placements end at the same loss here
    assert not sub(v, "similar").counts and not sub(v, "decay-vs-post").counts
    assert set(decisions(v, "shallower").values()) == {"a_better"}


def test_prenorm_rule_refuted_when_post_ln_blocks_matter_less(tmp_path):
    swapped = dict(late_update=0.1, early_update=0.5, delete=0.01, cosine=0.99)
    growing = dict(late_update=0.6, early_update=0.3, delete=0.3, cosine=0.9)
    v = analyse(EXP, records(pre=growing, post=swapped, gain={"pre": 0.2, "post": 0.0}), P, tmp_path)
    assert verdicts(v)["updates"] == verdicts(v)["delete"] == verdicts(v)["shallower"] == "refuted"
    assert verdicts(v)["decay"] == "refuted"  # Pre-LN's deeper half changes the stream more
    assert v.verdict == "refuted"


def test_prenorm_rule_not_supported_when_pre_ln_blocks_act_like_post_ln_ones(tmp_path):
    p = {**P, "scales": [[32, 4], [32, 8]]}
    v = analyse(EXP, records(p=p), p, tmp_path)
    assert v.verdict == "supported"
    flat = dict(late_update=0.4, early_update=0.4, delete=0.3, cosine=0.9)
    v = analyse(EXP, records(pre=flat, post=POST_DEEP, p=p, gain={"pre": 0.2, "post": 0.2}), p, tmp_path)
    assert verdicts(v)["delete"] in ("inconclusive", "refuted") and v.verdict != "supported"
    assert verdicts(v)["shallower"] != "supported"


def test_prenorm_rule_depth_gain_alone_moves_the_shallower_part(tmp_path):
    """Same probe readings, the twins' losses swapped between the placements: only `shallower` flips."""
    v = analyse(EXP, records(gain={"pre": 0.3, "post": 0.0}), P, tmp_path)
    assert verdicts(v)["shallower"] == "refuted" and verdicts(v)["delete"] == "supported"
    assert v.verdict == "mixed"


def test_prenorm_rule_differences_inside_the_null_pairs_floor_decide_nothing(tmp_path):
    close = dict(late_update=0.4, early_update=0.4, delete=0.3, cosine=0.9)
    v = analyse(EXP, records(pre=close, post=POST_DEEP, gain={"pre": 0.2, "post": 0.2}), P, tmp_path)
    assert all(verdicts(v)[k] != "supported" for k in COUNTED) and v.verdict != "supported"


def test_prenorm_rule_a_placement_that_did_not_learn_is_excluded(tmp_path):
    v = analyse(EXP, records(learned=False, pre_learned=False), P, tmp_path)
    assert v.verdict == "inconclusive"
    assert all(verdicts(v)[k] == "inconclusive" for k in COUNTED)


def test_prenorm_rule_text_names_the_deeper_half_and_the_sweep(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    text = EXP.rule_text(P)
    assert "deeper half" in text and "selection seeds" in text and "Pre-LN rerun" in text
    assert decisions(v, "delete")  # one comparison per depth
    assert set(decisions(v, "delete")) == {f"delete/d{d}-L{L}" for d, L in P["scales"]}


@pytest.mark.parametrize("L", [2, 3, 4, 5, 8])
def test_prenorm_deeper_half_readouts_read_the_last_blocks(L):
    from experiments.prenorm_effective_depth import analysis as view

    m = {"diverged_at": None, **blocks(L, 0.1, 0.5, 0.02, 0.95, s=0)}
    m["relative_update"] = [float(i) for i in range(1, L + 1)]
    half = (L + 1) // 2
    assert view.LATE_UPDATE.fn(m) == pytest.approx(np.mean(range(half + 1, L + 1)))
    # the decay leaves out block 1 (it reads the embeddings): no shallower half left below L = 4
    want = np.log(np.mean(range(half + 1, L + 1)) / np.mean(range(2, L // 2 + 1))) if L >= 4 else None
    assert view.DECAY.fn(m) == (pytest.approx(want) if want is not None else None)
    m["relative_update"][0] = 1e6  # block 1's reading moves nothing
    assert view.DECAY.fn(m) == (pytest.approx(want) if want is not None else None)
    assert view.LATE_DELETE.fn({**m, "diverged_at": 7}) is None  # a diverged run has no reading


def test_prenorm_quality_gap_caveat_reads_the_fresh_seeds_final_losses(tmp_path):
    v = analyse(EXP, records(post_shift=0.25), P, tmp_path)
    gaps = v.evidence["quality_gap"]
    assert set(gaps) == {f"d{d}-L{L}" for d, L in P["scales"]}
    assert all(g == pytest.approx(0.25) for g in gaps.values())
    assert any(all(f"d{d}-L{L} +0.250" in c for d, L in P["scales"]) for c in v.caveats)
    assert verdicts(v)["quality"] == "refuted"  # 0.25 nats/char is outside ±0.05
    same = analyse(EXP, records(), P, tmp_path).evidence["quality_gap"]
    assert all(g == pytest.approx(0.0, abs=1e-12) for g in same.values())


@pytest.mark.parametrize("d, L", [(64, 4), (64, 8), (32, 6), (256, 12)])
def test_prenorm_wider_twin_matches_the_stacks_non_embedding_parameters(d, L):
    """The closed form `block_params` against the parameters torch counts in the built blocks, and the twin
    (L/2 blocks, `wide_width`, a multiple of the heads) within 7% of the stack (3% at the default's d = 64),
    at about √2 d."""
    from tfclaims.nn.models import LM
    from tfclaims.train.profiles import model_config

    from experiments.prenorm_effective_depth.grid import block_params, wide_scale

    def blocks_counted(d_model, n_layers):
        cfg = {"d_model": d_model, "n_layers": n_layers, "n_heads": 4, "seq_len": 16}
        lm = LM(model_config(cfg, 85, placement="pre", tie_weights=False))
        return sum(p.numel() for b in lm.stack.blocks for p in b.parameters())

    assert blocks_counted(d, L) == L * block_params(d)
    w = wide_scale({"d_model": d, "n_layers": L}, 4)
    assert w["n_layers"] == L // 2 and w["d_model"] % 4 == 0
    rel = 0.03 if d >= 64 else 0.07  # the heads' multiple is a coarser step at small widths
    assert blocks_counted(w["d_model"], w["n_layers"]) == pytest.approx(blocks_counted(d, L), rel=rel)
    assert w["d_model"] == pytest.approx(d * 2**0.5, rel=0.05)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_prenorm_recipe_trains_an_untied_head_for_both_placements(monkeypatch, placement):
    import torch

    import tfclaims.train.small_lm as small_lm
    from tfclaims.harness.experiment import RunContext
    from tfclaims.nn.models import LM
    from tfclaims.train.profiles import model_config

    from experiments.prenorm_effective_depth.recipes import train_probe

    seen = {}

    def fake_train(cfg, ctx, *, model_kw=None, desc=""):
        seen.update(model_kw)
        return {"diverged_at": 3}, None  # a diverged run is returned unprobed

    monkeypatch.setattr(small_lm, "train_small", fake_train)
    cfg = {"placement": placement, "seed": 0, "d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 16}
    assert train_probe(cfg, RunContext(device=torch.device("cpu"), progress=False)) == {"diverged_at": 3}
    assert seen == {"placement": placement, "tie_weights": False}
    lm = LM(model_config(cfg, 85, **seen))
    assert lm.head.weight is not lm.stack.tok.weight and lm.cfg.placement == placement


def test_prenorm_names_the_fresh_seeds_that_did_not_learn(tmp_path):
    v = analyse(EXP, records(learned=False, pre_learned=True), P, tmp_path)
    (line,) = [c for c in v.caveats if c.startswith("Fresh seeds that did not learn")]
    n = len(P["seeds"])
    assert all(f"{n} of {n} Post-LN seeds at d{d}-L{L}" in line for d, L in P["scales"])
    assert "Pre-LN seeds" not in line and f"unigram level {UNIGRAM:.2f}" in line
    assert not any(c.startswith("Fresh seeds") for c in analyse(EXP, records(), P, tmp_path).caveats)
