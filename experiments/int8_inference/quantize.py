"""Post-training quantisation of a model's Linear layers: torch's dynamic INT8 (`int8_dynamic`), a fake
quantiser of the same symmetric rule at any bit width (`fake_quantize_linears`), and what a quantised copy
holds (`linear_bytes`, `coverage`, `step_error`).

torch's dynamic quantisation (`torch.ao.quantization.quantize_dynamic`) swaps each `nn.Linear` for a module
that stores the weight as int8 with one scale per tensor (or per output row) and zero point 0, keeps the bias
in float32, and at each call quantises its input to uint8 over that input's own range, multiplies in integers
and rescales the int32 sums to float32. Everything else (embeddings, norms, attention scores, softmax) stays
float32. The module is deprecated in favour of torchao but runs in torch 2.13: its warnings are caught and
returned.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings

import torch
from torch import nn


@contextlib.contextmanager
def caught_warnings():
    """Collect the warnings raised inside (torch.ao's deprecation notices) instead of printing them: yields a
    list that receives the first line of each distinct message."""
    seen: list[str] = []
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        yield seen
    for w in ws:
        line = f"{w.category.__name__}: {str(w.message).strip().splitlines()[0]}"
        if line not in seen:
            seen.append(line)


def engine() -> dict:
    """Which quantised kernels run: torch's quantised engine (`x86` by default on Intel and AMD CPUs), the
    engines this build supports, the CPU's vector extension and the torch version."""
    return {
        "engine": torch.backends.quantized.engine,
        "supported_engines": list(torch.backends.quantized.supported_engines),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def int8_dynamic(model: nn.Module, per_channel: bool = False) -> nn.Module:
    """A CPU copy of `model` with every nn.Linear dynamically quantised to int8 weights: one scale per tensor
    (torch's default qconfig, as in its BERT tutorial) or one per output row (`per_channel`)."""
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    src = copy.deepcopy(model).cpu().eval()
    return quantize_dynamic(src, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True)


def fake_quantize(w: torch.Tensor, bits: int) -> torch.Tensor:
    """w rounded to a symmetric grid of 2^bits levels, one scale per tensor, back in float: torch's
    per-tensor symmetric weight rule (scale = max|w| ÷ ((q_max − q_min)/2), codes in [−2^(bits−1),
    2^(bits−1) − 1], round half to even of w times the scale's inverse)."""
    q_min, q_max = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    scale = torch.clamp(w.abs().max() / ((q_max - q_min) / 2), min=torch.finfo(torch.float32).eps)
    return torch.round(w * (1.0 / scale)).clamp(q_min, q_max) * scale


@torch.no_grad()
def fake_quantize_linears(model: nn.Module, bits: int) -> nn.Module:
    """A CPU copy of `model` whose Linear weights are `fake_quantize`d (activations stay float32). A weight
    tied to an embedding is untied first, so that the embedding stays float32, as in `int8_dynamic`."""
    out = copy.deepcopy(model).cpu().eval()
    for m in out.modules():
        if isinstance(m, nn.Linear):
            m.weight = nn.Parameter(fake_quantize(m.weight.detach().clone(), bits), requires_grad=False)
    return out


def _quantised(q: nn.Module) -> dict[str, nn.Module]:
    from torch.ao.nn.quantized.dynamic import Linear as QLinear

    return {name: m for name, m in q.named_modules() if isinstance(m, QLinear)}


def _serialized(obj) -> int:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.tell()


def state_bytes(model: nn.Module) -> int:
    """Bytes of the model's state_dict as torch.save writes it (a tied tensor once)."""
    return _serialized(model.state_dict())


def linear_bytes(model: nn.Module) -> int:
    """Bytes torch.save writes for the state of the Linear layers alone (float or quantised)."""
    lin = (nn.Linear, *(type(m) for m in _quantised(model).values()))
    return _serialized({n: m.state_dict() for n, m in model.named_modules() if isinstance(m, lin)})


def coverage(model: nn.Module, q: nn.Module) -> dict:
    """What the quantised copy `q` changed: Linear layers quantised and left in float, and the float tensors
    outside them (embeddings, norms) that differ from `model`'s."""
    ref = model.state_dict()
    quantised = _quantised(q)
    left = [n for n, m in q.named_modules() if type(m) is nn.Linear]
    changed = [
        k for k, v in q.state_dict().items() if torch.is_tensor(v) and k in ref and not torch.equal(v, ref[k])
    ]
    return {"quantised": len(quantised), "float_linear_left": len(left), "changed": len(changed)}


@torch.no_grad()
def step_error(model: nn.Module, q: nn.Module) -> float:
    """The largest |w − dequantised w| over every quantised weight, in units of its quantisation step: at most
    1/2 when each weight is rounded to the nearest level."""
    ref = dict(model.named_modules())
    worst = 0.0
    for name, m in _quantised(q).items():
        qw = m.weight()
        if qw.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            step = torch.tensor(qw.q_scale())
        else:  # one scale per output row
            step = qw.q_per_channel_scales().float()[:, None]
        w = ref[name].weight.detach().cpu().float()
        worst = max(worst, float(((w - qw.dequantize()).abs() / step).max()))
    return worst
