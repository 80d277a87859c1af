"""What attention costs, measured: counted FLOPs of the attention module and a block against their closed
forms, wall time of the attention module and its parts in interleaved sweeps, and the bytes autograd saves for
backward on the explicit and fused paths against hand-derived formulas.

Recipes (each a module-level `run(cfg, ctx) -> metrics`): `run_flop_counts`, `run_time_sweep` (the claim
`attention_complexity`) and `run_saved_bytes` (the claim `flash_memory`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tfclaims.measure.attention_units import ITEMSIZE, fill_batch, hand_bytes, lse_rows, unit_config
from tfclaims.measure.counters import count_flops, saved_bytes
from tfclaims.measure.counting import (
    attention_flops,
    attention_projection_flops,
    attention_score_flops,
    block_flops,
    ffn_flops,
    lm_forward_flops,
)
from tfclaims.measure.hardware import last_level_cache
from tfclaims.measure.memory import cuda_call_peak
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import Attention, build_mask
from tfclaims.nn.blocks import Block
from tfclaims.nn.config import PRESETS, ModelConfig
from tfclaims.nn.models import LM

# ---------------------------------------------------------------------------------------------- FLOPs and
# time
AA_SUFFIX = "|aa"  # the second name under which the A/A callable is timed


def dense_part(blk: Block, x: torch.Tensor) -> torch.Tensor:
    """Everything in a block except QK^T/softmax/PV: norms, the four projections, the FFN. x: (B, n, d)."""
    u = blk.norm1(x)
    a = blk.attn
    a.wq(u), a.wk(u), a.wv(u)
    y = x + a.wo(u)  # W_o applied to a (B, n, h*dk) tensor of the same size as the attention output
    return y + blk.ffn(blk.norm2(y))


def count_point(n: int, d: int, h: int, backend: str, causal: bool, every_unit: bool) -> list[dict]:
    """Counted vs closed-form FLOPs of the attention module (and of the block, its score and dense parts)."""
    c = unit_config(d, h, n, backend, causal)
    blk = Block(c)
    x = torch.empty(1, n, d)
    counted = {"attention": count_flops(lambda: blk.attn(x))}
    if every_unit:
        q = torch.empty(1, h, n, c.dk)
        counted["block"] = count_flops(lambda: blk(x))
        counted["scores"] = count_flops(lambda: F.scaled_dot_product_attention(q, q, q))
        counted["dense"] = count_flops(lambda: dense_part(blk, x))
    closed = {
        "attention": attention_flops(c, n),
        "block": block_flops(c, n),
        "scores": attention_score_flops(c, n),
        "dense": attention_projection_flops(c, n) + ffn_flops(c, n),
    }
    return [
        {
            "n": n,
            "d": d,
            "h": h,
            "backend": backend,
            "causal": causal,
            "unit": u,
            "counted": counted[u],
            "closed_form": closed[u],
        }
        for u in counted
    ]


def run_flop_counts(cfg: dict, ctx=None) -> dict:
    """Counted FLOPs on the meta device (the same operations dispatch; nothing is computed).

    cfg: ns, ds, hs (the count grid, points with d % h == 0), heads_n, heads_d, heads_hs (the heads sweep's
    points), gpt2 (also count GPT-2 small's whole forward)."""
    rows = []
    points = [(n, d, h) for n in cfg["ns"] for d in cfg["ds"] for h in cfg["hs"] if d % h == 0]
    points += [(cfg["heads_n"], cfg["heads_d"], h) for h in cfg["heads_hs"]]
    lm = []
    with torch.device("meta"), torch.no_grad():
        for n, d, h in points:
            # every unit of the SDPA block (counted on the MATH kernel); the attention module alone for the
            # other
            # backend and for causal masking, to show that neither changes the count
            for backend, causal in (("sdpa", False), ("explicit", False), ("sdpa", True), ("explicit", True)):
                rows += count_point(n, d, h, backend, causal, every_unit=backend == "sdpa" and not causal)
        if cfg["gpt2"]:
            c = PRESETS["gpt2-small"]
            model = LM(c)
            idx = torch.zeros(1, c.max_seq_len, dtype=torch.long)
            lm.append(
                {
                    "model": "gpt2-small",
                    "n": c.max_seq_len,
                    "counted": count_flops(lambda: model(idx)),
                    "closed_form": lm_forward_flops(c, c.max_seq_len),
                }
            )
    return {"rows": rows, "lm": lm}


def unit_fns(d: int, h: int, n: int, device, batch: int = 1) -> dict:
    """The timed units at one size: callables on fresh modules and inputs (`batch` sequences, non-causal)."""
    c = unit_config(d, h, n)
    with torch.device(device):
        blocks = {be: Block(c.replace(attn_backend=be)).eval() for be in ("explicit", "sdpa")}
        x = torch.randn(batch, n, d)
        q, k, v = (torch.randn(batch, h, n, c.dk) for _ in range(3))
    return {
        "attention_explicit": lambda: blocks["explicit"].attn(x),
        "attention_sdpa": lambda: blocks["sdpa"].attn(x),
        "block_sdpa": lambda: blocks["sdpa"](x),
        "scores_explicit": lambda: blocks["explicit"].attn._explicit(q, k, v, None),
        "scores_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, scale=c.scale),
        "dense": lambda: dense_part(blocks["sdpa"], x),
    }


def time_key(unit: str, d: int, h: int, n: int) -> str:
    return f"{unit}|{d}|{h}|{n}"


def _per_sequence(timing: dict, batch: int) -> dict:
    """A `time_interleaved` record with its seconds divided by the sequences a call ran."""
    if batch == 1:
        return timing
    scaled = {k: timing[k] / batch for k in ("median", "q25", "q75")}
    return {**timing, **scaled, "times": [s / batch for s in timing["times"]]}


def run_time_sweep(cfg: dict, ctx) -> dict:
    """One sweep: every (unit, size) timed round by round in one `time_interleaved` call, so a change in
    background load lands on all sizes alike instead of bending a fitted exponent.

    cfg: points [[d, h, n], ...], units, warmup, repeats, threads, fill_rows (see `fill_batch`), and aa =
    [unit, d, h, n]: that unit's very callable is timed a second time under another name (the A/A pair: what
    timing noise alone gives). Times are seconds per sequence (a call's time over its batch)."""
    dev = ctx.device
    fns, batch = {}, {}
    for d, h, n in cfg["points"]:
        batch[d, h, n] = fill_batch(h, n, cfg.get("fill_rows", 0))
        for unit, fn in unit_fns(d, h, n, dev, batch[d, h, n]).items():
            if unit in cfg["units"]:
                fns[time_key(unit, d, h, n)] = fn
    aa_key = time_key(*cfg["aa"])
    fns[aa_key + AA_SUFFIX] = fns[aa_key]
    with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
        t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
    t = {k: _per_sequence(v, batch[tuple(int(x) for x in k.split("|")[1:4])]) for k, v in t.items()}
    points = [
        {
            "d": d,
            "h": h,
            "n": n,
            "batch": batch[d, h, n],
            "times": {u: t[time_key(u, d, h, n)] for u in cfg["units"]},
        }
        for d, h, n in cfg["points"]
    ]
    unit, d, h, n = cfg["aa"]
    aa = {"unit": unit, "d": d, "h": h, "n": n, "a": t[aa_key], "b": t[aa_key + AA_SUFFIX]}
    return {"points": points, "aa": aa, "threads": n_threads, "last_level_cache": last_level_cache(dev)}


# ---------------------------------------------------------------------------------------------- saved bytes
def saved_inventory(fn, exclude=()) -> list[dict]:
    """Every distinct storage autograd saves while fn runs: shape, dtype, bytes (storages of `exclude` left
    out)."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, dict] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip and s.data_ptr() not in seen:
            seen[s.data_ptr()] = {
                "shape": list(t.shape),
                "dtype": str(t.dtype).replace("torch.", ""),
                "bytes": s.nbytes(),
            }
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return list(seen.values())


def cuda_peak(fn) -> int:
    """Peak CUDA bytes allocated by forward + backward of fn beyond what was allocated before it."""
    return cuda_call_peak(lambda: fn().float().square().sum().backward())


def run_saved_bytes(cfg: dict, ctx) -> dict:
    """Bytes saved for backward by every variant at one n (batch 1), with the hand formula beside each; the
    full inventory of saved storages where cfg['inventory']; the largest gradient difference between the fused
    and explicit causal paths where cfg['grad_check']; CUDA peak memory on a GPU."""
    n, h, dk, dev = cfg["n"], cfg["heads"], cfg["head_dim"], ctx.device
    B, d, dt = 1, h * dk, getattr(torch, cfg.get("dtype", "float32"))
    c = ModelConfig(d_model=d, n_heads=h, max_seq_len=n, causal=True)
    with torch.device(dev):
        core = Attention(c.replace(attn_backend="explicit")).to(dt)
        mods = {
            "explicit": Attention(c.replace(attn_backend="explicit")).to(dt),
            "sdpa": Attention(c.replace(attn_backend="sdpa")).to(dt),
        }
        mods["sdpa"].load_state_dict(mods["explicit"].state_dict())
        q, k, v = (torch.randn(B, h, n, dk, dtype=dt, requires_grad=True) for _ in range(3))
        x = torch.randn(B, n, d, dtype=dt)
        mask = build_mask(n, n, causal=True, device=dev)  # (1, 1, n, n) bool

    def math_sdpa():
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v)

    fns = {
        "explicit": lambda: core._explicit(q, k, v, None),
        "explicit_causal": lambda: core._explicit(q, k, v, mask),
        "math": math_sdpa,
        "fused": lambda: F.scaled_dot_product_attention(q, k, v),
        "fused_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "fused_mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "module_explicit": lambda: mods["explicit"](x),
        "module_sdpa": lambda: mods["sdpa"](x),
    }
    params = tuple(p for m in (core, *mods.values()) for p in m.parameters())
    res = {}
    for name, fn in fns.items():
        inv = saved_inventory(fn, exclude=params)
        elems = [t["bytes"] // ITEMSIZE[t["dtype"]] for t in inv]
        node = type(fn().grad_fn).__name__  # which SDPA kernel ran (e.g. flash, memory-efficient, cuDNN)
        kernel = node if "ScaledDotProduct" in node else ""  # the decomposed paths end in a view
        if name == "module_sdpa":  # its output comes from W_o; inside, the causal fused kernel runs
            kernel = res["fused_causal"]["kernel"]
        rows = B * h * lse_rows(n, kernel)
        row = {
            "bytes": saved_bytes(fn, exclude=params),
            "inventory_bytes": sum(t["bytes"] for t in inv),
            "hand": hand_bytes(name, B, h, n, dk, itemsize=q.element_size(), kernel=kernel),
            "kernel": kernel,
            "n2_storages": sum(e >= B * h * n * n for e in elems),
            "row_storages": sum(e == rows for e in elems),
        }
        if cfg["inventory"]:
            row["inventory"] = inv
        if dev.type == "cuda" and torch.cuda.is_available():
            row["cuda_peak_bytes"] = cuda_peak(fn)
            for t in (q, k, v, *params):
                t.grad = None
        res[name] = row
    grads = None
    if cfg["grad_check"]:
        ge = torch.autograd.grad(fns["explicit_causal"]().square().sum(), (q, k, v))
        gf = torch.autograd.grad(fns["fused_causal"]().square().sum(), (q, k, v))
        grads = max(float((a - b).abs().max()) for a, b in zip(ge, gf))
    return {"variants": res, "max_grad_diff_fused_vs_explicit": grads}
