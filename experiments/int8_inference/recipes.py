"""Run recipes of `int8_inference`: train one small LM and read it in float32 and in quantised copies on the
same held-out windows (`run_quality`); time a forward pass in float32 and INT8 (`run_timing`).

Quantised kernels run on the CPU only: the trained model is moved there (it may have trained on a GPU) and
every copy, the float32 reference included, is read on the CPU, so that the arms differ by their quantisation
alone."""

from __future__ import annotations

import torch

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, lm_loss

from .grid import AA, CHANNEL, FP32, INT8, weight_variant
from .quantize import (
    caught_warnings,
    coverage,
    engine,
    fake_quantize_linears,
    int8_dynamic,
    linear_bytes,
    state_bytes,
    step_error,
)

PROBE_SEED = 4321  # the probe's held-out windows: apart from the training loop's validation windows


@torch.no_grad()
def score(model, batches) -> dict:
    """Mean next-character loss (nats) and top-1 accuracy of `model` over `batches` of (x, y), on the CPU."""
    model.eval()
    loss = acc = 0.0
    for x, y in batches:
        logits = model(x).float()  # (B, T, V)
        loss += float(lm_loss(logits, y))
        acc += float((logits.argmax(-1) == y).float().mean())
    return {"loss": loss / len(batches), "acc": acc / len(batches)}


def run_quality(cfg: dict, ctx) -> dict:
    """The training record (`train.small_lm`), then on fixed held-out windows the loss and accuracy of the
    float32 model, its dynamic INT8 copies (one scale per tensor; per output row) and copies with Linear
    weights fake-quantised to each width in `bits`; the bytes the INT8 copy serialises to, what it quantised,
    how far the INT8 weights moved (in quantisation steps), and which engine ran them."""
    from tfclaims.train.small_lm import train_small  # torch loads when a run starts

    res, model = train_small(cfg, ctx, desc=f"d{cfg['d_model']}-L{cfg['n_layers']} seed {cfg['seed']}")
    if res.get("diverged_at") is not None:
        return res  # a diverged run is an outcome: nothing to quantise
    model = model.cpu().eval()
    batches = eval_windows(
        load_corpus().val, cfg["probe_batches"], cfg["batch"], cfg["seq_len"], seed=PROBE_SEED
    )
    with caught_warnings() as warned:
        copies = {INT8: int8_dynamic(model), CHANNEL: int8_dynamic(model, per_channel=True)}
        copies |= {weight_variant(b): fake_quantize_linears(model, b) for b in cfg["bits"]}
        res["probe"] = {FP32: score(model, batches), **{k: score(m, batches) for k, m in copies.items()}}
    q = copies[INT8]
    res["size"] = {"fp32": state_bytes(model), "int8": state_bytes(q), "linear_fp32": linear_bytes(model),
                   "linear_int8": linear_bytes(q)}  # fmt: skip
    res["coverage"] = coverage(model, q)
    res["step_error"] = {k: step_error(model, copies[k]) for k in (INT8, CHANNEL)}
    res["quantization"] = {**engine(), "warnings": warned}
    return res


def run_timing(cfg: dict, ctx) -> dict:
    """Per size [d_model, n_layers, n_heads] and batch: the forward pass of (batch, seq_len) tokens in
    float32 and through its dynamic INT8 copy, in interleaved rounds on `threads` CPU threads, the float32 one
    timed twice (the A/A pair). Weights are as initialised: a kernel's time does not depend on their
    values."""
    gen, rows = torch.Generator().manual_seed(cfg["seed"]), []
    with intra_op_threads(cfg["threads"]) as n_threads, torch.no_grad(), caught_warnings() as warned:
        for d, layers, heads in cfg["sizes"]:
            c = ModelConfig(
                vocab_size=96, d_model=d, n_layers=layers, n_heads=heads, max_seq_len=cfg["seq_len"]
            )
            torch.manual_seed(cfg["seed"])
            fp32 = LM(c).eval()
            int8 = int8_dynamic(fp32)
            for b in cfg["batches"]:
                idx = torch.randint(0, 96, (b, cfg["seq_len"]), generator=gen)
                fns = {FP32: lambda m=fp32, x=idx: m(x), INT8: lambda m=int8, x=idx: m(x)}
                fns[AA] = fns[FP32]
                t = time_interleaved(
                    fns,
                    device="cpu",
                    repeats=cfg["repeats"],
                    warmup=cfg["warmup"],
                    min_sample=cfg["min_sample"],
                    seed=cfg["seed"],
                )
                rows.append(
                    {
                        "d_model": d,
                        "n_layers": layers,
                        "batch": b,
                        "tokens": b * cfg["seq_len"],
                        "times": {k: v["times"] for k, v in t.items()},
                        "inner": {k: v["inner"] for k, v in t.items()},
                        "load": t[FP32]["load"],
                    }
                )
    return {"rows": rows, "threads": n_threads, "quantization": {**engine(), "warnings": warned}}
