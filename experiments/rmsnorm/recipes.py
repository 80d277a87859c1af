"""Run recipes of `rmsnorm`: LayerNorm against RMSNorm timed alone and inside a whole training step.

Four implementations (`IMPLS`): PyTorch's built-in functions (`F.layer_norm`, `F.rms_norm`, what the
library's layers call) and the standard formulas in eager elementwise ops; and, where a run asks for them
(`fused`), the same formulas fused by `torch.compile` (`FUSED`: one generated kernel per direction on the
CPU, Triton kernels on a GPU), so that each family compares like with like. Every timing goes through
`timing.time_probed`, which interleaves the implementations round by round and measures a large copy's
bandwidth before each round (the probe: what a neighbouring process left of the memory system); the per-round
times and probes are kept so the analysis can pair rounds and drop the contended ones. Each timing call also
times the built-in LayerNorm callable a second time under another name (`AA`): an A/A pair, what the timer
alone gives when nothing differs.

Every recipe is `recipe(cfg, ctx) -> metrics`.
"""

from __future__ import annotations

import torch

from tfclaims.data.corpus import load_corpus, random_windows
from tfclaims.measure.counters import copy_bandwidth
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import grad_call, kernels, time_interleaved, time_probed
from tfclaims.nn.models import LM, lm_loss
from tfclaims.nn.norm_variants import make_variant, swap_norms
from tfclaims.train.loop import make_optimizer
from tfclaims.train.profiles import model_config, train_config

from .grid import AA, FUSED, IMPLS


def build_norm(impl: str, d: int, device) -> torch.nn.Module:
    """One norm of width d: a variant of `norm_variants`, or (FUSED) its eager formula under torch.compile."""
    if impl in FUSED:
        eager = make_variant("eager_" + impl.removeprefix("fused_"), d).to(device)
        return torch.compile(eager, dynamic=False)  # compiled at the first call (a timing warm-up call)
    return make_variant(impl, d).to(device)


def compulsory_bytes(tokens: int, d: int, elt: int = 4) -> int:
    """Bytes a forward+backward must move at least: forward reads x and writes y, backward reads x and the
    output gradient and writes the input gradient (5 tensors of tokens x d; the gains' d values are noise)."""
    return 5 * tokens * d * elt


def _timed(t: dict) -> dict:
    return {
        k: {"median": v["median"], "q25": v["q25"], "q75": v["q75"], "times": v["times"]}
        for k, v in t.items()
    }


def _probe(cfg: dict, device):
    """The per-round probe: a copy of bw_bytes (read + write counted), bytes/s, median of three."""
    return lambda: copy_bandwidth(cfg["bw_bytes"], device=device, repeats=3)


def norm_alone(cfg: dict, ctx) -> dict:
    """Forward+backward of each norm alone at each width (fixed number of tokens), interleaved; which aten
    kernels each runs (forward and backward profiled apart, at the middle width)."""
    with intra_op_threads(cfg["threads"]):
        dev = ctx.device
        impls = IMPLS + (FUSED if cfg.get("fused") else ())
        rows = []
        for d in cfg["widths"]:
            x = torch.randn(cfg["tokens"], d, device=dev, requires_grad=True)
            gy = torch.randn(cfg["tokens"], d, device=dev)
            fns = {k: grad_call(build_norm(k, d, dev), x, gy) for k in impls}
            fns[AA] = fns["layer"]
            t = time_probed(fns, _probe(cfg, dev), device=dev, repeats=cfg["repeats"])
            rows.append(
                {
                    "d": d,
                    "bytes": compulsory_bytes(cfg["tokens"], d),
                    "load": t[AA]["load"],
                    "probe": t[AA]["probe"],
                    **_timed(t),
                }
            )
        d = cfg["widths"][len(cfg["widths"]) // 2]
        x = torch.randn(cfg["tokens"], d, device=dev, requires_grad=True)
        ops = {}
        for k in IMPLS:
            m = make_variant(k, d).to(dev)
            m(x)  # warm-up
            fwd = kernels(lambda m=m: m(x))
            y = m(x)
            bwd = kernels(lambda y=y, m=m: torch.autograd.grad(y, [x, *m.parameters()], torch.ones_like(y)))
            ops[k] = {"forward": fwd, "backward": bwd}
        return {
            "rows": rows,
            "impls": list(impls),
            "kernels": ops,
            "kernel_width": d,
            "threads": torch.get_num_threads(),
        }


def step_model(impl: str, cfg: dict, vocab: int) -> LM:
    """The LM with every norm of kind `impl`: the library's layers (built-in functions), or eager formulas."""
    base = {"layer": "layer", "rms": "rms", "eager_layer": "layer", "eager_rms": "rms"}[impl]
    model = LM(model_config(cfg, vocab, norm=base))
    if impl.startswith("eager"):
        swap_norms(model, impl)
    return model


def step_timing(cfg: dict, ctx) -> dict:
    """A whole training step (forward, loss, backward, AdamW) of the character LM with each norm, interleaved
    over rounds; and each norm alone at the model's shape, for its share of the step."""
    with intra_op_threads(cfg["threads"]):
        dev = ctx.device
        corpus = load_corpus()
        tc = train_config({**cfg, "steps": 100, "lr": 1e-3, "eval_every": 100, "eval_batches": 1})
        gen = torch.Generator().manual_seed(0)
        x, y = (t.to(dev) for t in random_windows(corpus.train, cfg["batch"], cfg["seq_len"], gen))
        fns, norm_fns = {}, {}
        for impl in IMPLS:
            torch.manual_seed(0)
            model = step_model(impl, cfg, corpus.vocab_size).to(dev).train()
            opt = make_optimizer(model, tc)

            def step(model=model, opt=opt):
                loss = lm_loss(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            fns[impl] = step
            h = torch.randn(cfg["batch"] * cfg["seq_len"], cfg["d_model"], device=dev, requires_grad=True)
            norm_fns[impl] = grad_call(make_variant(impl, cfg["d_model"]).to(dev), h, torch.randn_like(h))
        fns[AA] = fns["layer"]
        steps = time_probed(fns, _probe(cfg, dev), device=dev, repeats=cfg["repeats"], warmup=3)
        norms = time_interleaved(norm_fns, device=dev, repeats=cfg["repeats"] * 2)
        return {
            "step": {k: {"median": v["median"], "times": v["times"]} for k, v in steps.items()},
            "probe": steps[AA]["probe"],
            "norm": {k: {"median": v["median"]} for k, v in norms.items()},
            "n_norms": 2 * cfg["n_layers"] + 1,
            "threads": torch.get_num_threads(),
        }
