"""Run recipes of `notes_code`.

`run_snippets`: every restated snippet (`nn.notes_code`) run as written, in float32 on the run's device
(whether it ran, and the exception it raised, as data); then, with only what stops it running changed ("runs"
mode) and in float64, measured against the library: attention against `Attention`'s explicit path and
PyTorch's SDPA (the snippet's own weights copied in), masks against `build_mask`, positions against
`sinusoidal_table`, the FFN against `FFN`; the same input given twice; and the parameters it builds while it
runs (built in forward, so never in .parameters() and never trained).

`train_arm`: the small LM with post-LN blocks (the notes' modules add the input and normalise after the
attention) whose attention sublayer is, in every block, the fix or one of the notes' defects (`ARM_DEFECTS`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from tfclaims.nn.attention import Attention, build_mask
from tfclaims.nn.blocks import FFN
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.norms import LayerNorm
from tfclaims.nn.positions import sinusoidal_table
from tfclaims.train.small_lm import train_small

from .grid import ARMS
from .notes_code import (
    AnnotatedMHA,
    LayerNormPerCall,
    LinearPerCall,
    NoteSettings,
    NotesMHA,
    NotesPositionalEncoding,
    attention_000,
    attention_002,
    attention_004,
    decoder_mask_004,
    merge_heads,
    notes_ffn,
    notes_sinusoid_table,
    pad_mask_004,
)

PE_BLOCKS = 50  # the positional table's error is reported per block of positions, for the figure
# arm -> (output projection built per call, LayerNorm after the attention built per call, no projection)
ARM_DEFECTS = {
    "fixed": (False, False, False),
    "bert": (True, True, False),
    "attention_ln": (False, True, False),
    "no_wo": (False, False, True),
}


@contextmanager
def created_parameters():
    """Collects (owner class, name, Parameter) of every parameter any module registers while active: those a
    module builds inside its forward are not among its .parameters()."""
    made: list[tuple[str, str, nn.Parameter]] = []
    handle = nn.modules.module.register_module_parameter_registration_hook(
        lambda module, name, param: made.append((type(module).__name__, name, param))
    )
    try:
        yield made
    finally:
        handle.remove()


def _attempt(fn: Callable) -> tuple[bool, str | None]:
    """(ran, None) or (False, 'ExceptionType: message')."""
    try:
        fn()
    except Exception as e:  # the snippets' failures are the data
        return False, f"{type(e).__name__}: {e}"
    return True, None


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative max error: max|out − ref| / max|ref|."""
    return ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _taken(made, owner: str) -> dict[str, torch.Tensor]:
    """The parameters built during a call by modules of class `owner`, by name."""
    return {name: p.detach() for cls, name, p in made if cls == owner}


def _library_mha(x, pad, heads: int, weights, norm) -> dict[str, torch.Tensor]:
    """The library's causal self-attention of x (B, T, d) with `heads` heads and the given (weight, bias) of
    the q, k, v and output projections, on both backends; with `norm` (weight, bias), the library's LayerNorm
    of output + input after it (the attention half of a post-LN block)."""
    B, T, d = x.shape
    out = {}
    for backend in ("explicit", "sdpa"):
        cfg = ModelConfig(
            vocab_size=96,
            d_model=d,
            n_heads=heads,
            max_seq_len=T,
            bias=weights[0][1] is not None,
            attn_backend=backend,
        )
        att = Attention(cfg).to(device=x.device, dtype=x.dtype)
        with torch.no_grad():
            for lin, (w, b) in zip((att.wq, att.wk, att.wv, att.wo), weights):
                lin.weight.copy_(w)
                if b is not None:
                    lin.bias.copy_(b)
            y = att(x, pad_mask=pad)
            if norm is not None:
                ln = LayerNorm(d).to(device=x.device, dtype=x.dtype)
                ln.weight.copy_(norm[0])
                ln.bias.copy_(norm[1])
                y = ln(y + x)
        out[backend] = y
    return out


def _row(snippet: str, ran: tuple[bool, str | None], **readings) -> dict:
    """One snippet's row: whether it ran as written (and its exception), then its readings (None: not
    applicable to this snippet)."""
    keys = ("err_ref", "err_sdpa", "repeat_diff", "unregistered", "registered", "mismatch", "pe_err",
            "pe_err64")  # fmt: skip
    return {"snippet": snippet, "runs": ran[0], "exception": ran[1], **dict.fromkeys(keys), **readings}


def _mha_row(snippet, build, call, weights, x, device, *, written: str, mode: str) -> dict:
    """A multi-head attention snippet: `build(mode)` -> module, `call(module, x)` -> output; as written in
    float32, then in `mode` in float64: the library's output with the weights `weights(module, made)` gives
    ((q, k, v, output projections), norm or None), the same input again, the parameters built per call."""
    ran = _attempt(lambda: call(build(written).to(device).eval(), x.float()))
    m = build(mode).to(device=device, dtype=torch.float64).eval()
    with torch.no_grad():
        with created_parameters() as made:
            y = call(m, x)
        again = call(m, x)
        ref = weights(m, made)
    return _row(
        snippet,
        ran,
        err_ref=_rel(y, ref["explicit"]),
        err_sdpa=_rel(y, ref["sdpa"]),
        repeat_diff=(y - again).abs().max().item(),
        unregistered=sum(p.numel() for _, _, p in made),
        unregistered_names=[f"{cls}.{name} {tuple(p.shape)}" for cls, name, p in made],
        registered=sum(p.numel() for p in m.parameters()),
    )


def _output_and_norm(m: nn.Module, made) -> tuple:
    """The notes module's output projection and LayerNorm parameters: its registered ones, or those it built
    inside forward (recorded in `made`)."""
    out = (
        (m.out.weight, m.out.bias)
        if isinstance(m.out, nn.Linear)
        else tuple(_taken(made, "Linear").get(k) for k in ("weight", "bias"))
    )
    norm = (
        (m.norm.weight, m.norm.bias)
        if isinstance(m.norm, nn.LayerNorm)
        else tuple(_taken(made, "LayerNorm")[k] for k in ("weight", "bias"))
    )
    return out, norm


def _attention_rows(cfg: dict, ids, q, k, v, x, *, device) -> list[dict]:
    """The scaled dot-product functions (000, 002 with and without a mask, 004) and the multi-head modules
    (000, 001, 004 §attention, 004 Bert question 2) against the library."""
    B, h, T, dk = q.shape
    pad = ids != 0
    keep = build_mask(T, T, causal=True, pad_mask=pad, device=device)  # (B, 1, T, T), True = may attend
    lib = Attention(ModelConfig(vocab_size=96, d_model=h * dk, n_heads=h, max_seq_len=T)).to(device).double()
    ref, sdpa = lib._explicit(q, k, v, keep), F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    plain = lib._explicit(q, k, v, None), F.scaled_dot_product_attention(q, k, v)
    f32 = [t.float() for t in (q, k, v)]
    notes_mask = decoder_mask_004(ids.cpu()).to(device)  # (B, T, T), True = masked
    heads_mask = notes_mask.unsqueeze(1).repeat(1, h, 1, 1)

    def fn_row(snippet, call, refs=(ref, sdpa)):  # call(tensors, mode) -> output
        out = call((q, k, v), "runs")
        return _row(
            snippet,
            _attempt(lambda: call(f32, "as_written")),
            err_ref=_rel(out, refs[0]),
            err_sdpa=_rel(out, refs[1]),
        )

    rows = [
        _row("library", (True, None), err_sdpa=_rel(ref, sdpa)),
        fn_row("000-attention", lambda t, mode: attention_000(*t, keep, mode=mode)[0]),
        fn_row("002-attention", lambda t, mode: attention_002(*t, keep, mode=mode)),
        fn_row("002-attention-unmasked", lambda t, mode: attention_002(*t, mode=mode), plain),
        fn_row("004-attention", lambda t, mode: attention_004(*t, heads_mask.clone(), dk)[0]),
    ]
    d, keep3 = h * dk, keep[:, 0].expand(B, T, T)

    def annotated(m, made):
        return _library_mha(x, pad, h, [(lin.weight, lin.bias) for lin in m.linears], None)

    def notes(m, made):
        out, norm = _output_and_norm(m, made)
        qkv = [(w.weight, w.bias) for w in (m.W_Q, m.W_K, m.W_V)]
        return _library_mha(x, pad, h, [*qkv, out], norm)

    s = NoteSettings(d, h, dk)
    common = dict(x=x, device=device, written="as_written")
    rows += [
        _mha_row(
            "000-mha",
            lambda mode: AnnotatedMHA(h, d, mode),
            lambda m, t: m(t, t, t, keep3),
            annotated,
            mode="runs",
            **common,
        ),
        _mha_row(
            "001-mha",
            lambda mode: AnnotatedMHA(h, d, "fixed"),
            lambda m, t: m(t, t, t, keep3),
            annotated,
            mode="fixed",
            **common,
        ),
        _mha_row(
            "004-mha",
            lambda mode: NotesMHA(s, "attention", mode),
            lambda m, t: m(t, t, t, notes_mask),
            notes,
            mode="runs",
            **common,
        ),
        _mha_row(
            "004-bert-mha",
            lambda mode: NotesMHA(s, "bert", mode),
            lambda m, t: m(t, t, t, notes_mask),
            notes,
            mode="runs",
            **common,
        ),
    ]
    return rows


def _other_rows(cfg: dict, ids, q, x, device) -> tuple[list[dict], dict]:
    """Masks, positional encodings, the FFN and the head merge; and the positional tables' error per block of
    positions (for the figure)."""
    B, T, d = x.shape
    pad = ids != 0
    want_pad = ~build_mask(T, T, causal=False, pad_mask=pad).expand(B, 1, T, T)[:, 0].cpu()
    want_dec = ~build_mask(T, T, causal=True, pad_mask=pad).expand(B, 1, T, T)[:, 0].cpu()
    c = ids.cpu()
    rows = [
        _row(
            "004-pad-mask",
            _attempt(lambda: pad_mask_004(c, c)),
            mismatch=int((pad_mask_004(c, c) != want_pad).sum()),
        ),
        _row(
            "004-decoder-mask",
            _attempt(lambda: decoder_mask_004(c)),
            mismatch=int((decoder_mask_004(c) != want_dec).sum()),
        ),
    ]
    L = cfg["pe_len"]
    table = sinusoidal_table(L, d).to(device)  # the library's (float32, computed in float64)
    err64 = (notes_sinusoid_table(d, L, torch.float64).to(device) - table.double()).abs()  # (L, d)
    x32 = x.float()
    for snippet, first in (("004-pe", False), ("001-pe", True)):
        pe = NotesPositionalEncoding(d, L, batch_first=first).to(device).eval()
        laid = x32 if first else x32.transpose(0, 1)  # 004 adds to (T, B, d)
        ran = _attempt(lambda pe=pe, laid=laid: pe(laid))
        y = pe(laid) if first else pe(laid).transpose(0, 1)
        err32 = (pe.pe.reshape(L, d) - table).abs()
        fwd = (y - (x32 + table[:T])).abs().max().item()  # the layout: each position gets its row
        rows.append(_row(snippet, ran, pe_err=max(err32.max().item(), fwd), pe_err64=err64.max().item()))
    blocks = torch.arange(L, device=device) * PE_BLOCKS // L
    per = [
        (int(i), err32[blocks == i].max().item(), err64[blocks == i].max().item()) for i in range(PE_BLOCKS)
    ]
    profile = {
        "last_position": [(i + 1) * L // PE_BLOCKS - 1 for i, _, _ in per],
        "float32": [e for _, e, _ in per],
        "float64": [e for _, _, e in per],
    }
    ffn, lib = notes_ffn(d).to(device).double(), FFN(d, 4 * d, "relu").to(device).double()
    with torch.no_grad(), created_parameters() as made:
        lib.w1.load_state_dict(ffn[0].state_dict())
        lib.w2.load_state_dict(ffn[2].state_dict())
        err = _rel(ffn(x), lib(x))
    rows.append(
        _row(
            "ffn",
            _attempt(lambda: notes_ffn(d)(x32.cpu())),
            err_ref=err,
            registered=sum(p.numel() for p in ffn.parameters()),
            unregistered=sum(p.numel() for _, _, p in made),
        )
    )
    B, h, T, dk = q.shape
    merged = q.transpose(1, 2).reshape(B, T, h * dk)
    rows += [
        _row("001-view-bare", _attempt(lambda: merge_heads(q, contiguous=False))),
        _row(
            "001-view-contiguous",
            _attempt(lambda: merge_heads(q, contiguous=True)),
            err_ref=_rel(merge_heads(q, contiguous=True), merged),
        ),
    ]
    return rows, profile


def run_snippets(cfg: dict, ctx) -> dict:
    """Every snippet on inputs drawn from the run's seed: token ids (B, T) whose last row ends in `snip_pads`
    pads (id 0), q, k, v (B, h, T, dk) and x (B, T, h·dk), N(0, 1) in float64."""
    g = torch.Generator().manual_seed(cfg["seed"])
    B, T, h, dk = cfg["snip_batch"], cfg["snip_len"], cfg["snip_heads"], cfg["snip_head_dim"]
    ids = torch.randint(1, 96, (B, T), generator=g)
    ids[-1, T - cfg["snip_pads"] :] = 0
    q, k, v = (torch.randn(B, h, T, dk, generator=g, dtype=torch.float64) for _ in range(3))
    x = torch.randn(B, T, h * dk, generator=g, dtype=torch.float64)
    dev = ctx.device
    ids, q, k, v, x = (t.to(dev) for t in (ids, q, k, v, x))
    rows = _attention_rows(cfg, ids, q, k, v, x, device=dev)
    more, profile = _other_rows(cfg, ids, q, x, dev)
    shared = AnnotatedMHA(h, h * dk, "runs").linears
    same_init = all(torch.equal(shared[0].weight, lin.weight) for lin in shared[1:])
    return {"rows": rows + more, "pe_profile": profile, "runs_mode_equal_init": same_init}


# ---------------------------------------------------------------- training
def apply_arm(model: nn.Module, arm: str) -> None:
    """Make the attention sublayer of every block of the library LM as `arm` says (`ARM_DEFECTS`)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(ARMS)}")
    per_call_out, per_call_norm, no_out = ARM_DEFECTS[arm]
    for block in model.stack.blocks:
        wo = block.attn.wo
        if per_call_out:
            block.attn.wo = LinearPerCall(wo.in_features, wo.out_features)
        if no_out:
            block.attn.wo = nn.Identity()
        if per_call_norm:  # post-LN: norm1 normalises output + input after the attention
            block.norm1 = LayerNormPerCall(wo.out_features)


def train_arm(cfg: dict, ctx) -> dict:
    """The small LM with post-LN blocks whose attention sublayer is `cfg['arm']`'s; its metrics."""
    res, _ = train_small(
        cfg,
        ctx,
        model_kw={"placement": "post"},
        prepare=lambda m: apply_arm(m, cfg["arm"]),
        desc=f"{cfg['arm']} lr {cfg['lr']:g} seed {cfg['seed']}",
    )
    return res
