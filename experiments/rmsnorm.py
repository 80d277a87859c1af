"""`rmsnorm`: RMSNorm drops LayerNorm's mean-centring, runs faster, and trains as well."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from tfclaims.comparison import by_seed, compare, plot_curves
from tfclaims.data import load_corpus, random_windows
from tfclaims.experiment import Experiment, Output, SubVerdict, Verdict
from tfclaims.models import LM, lm_loss
from tfclaims.norm_variants import VARIANTS, make_variant, swap_norms
from tfclaims.small_lm import model_config, run_fields, train_config, train_profile, train_small
from tfclaims.stats import mean_ci
from tfclaims.threads import intra_op_threads
from tfclaims.timing import grad_call, kernels, time_interleaved
from tfclaims.train import make_optimizer

IMPLS = (
    "layer",
    "rms",
    "eager_layer",
    "eager_rms",
)  # built-in F.layer_norm / F.rms_norm, then the formulas in eager ops


def step_model(impl: str, cfg: dict, vocab: int) -> LM:
    """The LM with every norm of kind `impl`: the library's layers (built-in functions), or eager formulas swapped in."""
    base = {"layer": "layer", "rms": "rms", "eager_layer": "layer", "eager_rms": "rms"}[impl]
    model = LM(model_config(cfg, vocab, norm=base))
    if impl.startswith("eager"):
        swap_norms(model, impl)
    return model


class RMSNormSpeed(Experiment):
    claim_id = "rmsnorm"
    title = "RMSNorm is cheaper than LayerNorm at the same quality"
    order = 10
    statement = (
        "RMSNorm normalises each token by its root mean square only, skipping LayerNorm's mean subtraction (and bias); "
        "this makes it cheaper to compute than LayerNorm, and models trained with it reach the same quality."
    )
    notes_say = "RMSNorm removes mean-centring; simpler and cheaper than LayerNorm, same effect"
    anchors = [
        "Zhang & Sennrich 2019 (RMSNorm): 7%–64% less running time than LayerNorm across models; on a Transformer (WMT14 En-De) only about 7% (6.9%) faster per step at equal BLEU; the 64% is partial RMSNorm (pRMSNorm) on an RNN.",
        "LLaMA (Touvron et al. 2023) and later open models use RMSNorm before every sub-layer.",
    ]
    anchor_number = "Transformer step time: −6.9% (Zhang & Sennrich 2019)"
    method = (
        "(1) Norm alone: forward+backward time (torch.autograd.grad, no accumulation) of LayerNorm vs RMSNorm over widths at "
        "a fixed number of tokens, for PyTorch's built-in functions `F.layer_norm` and `F.rms_norm` (what the library's layers, "
        "`torch.nn.LayerNorm` and `torch.nn.RMSNorm` call) and for the standard formulas written in eager elementwise ops; "
        "the four are timed interleaved round by round. The kernels each one runs (forward and backward apart) are read from "
        "torch's profiler: the computing aten ops that call no other computing op, which shows whether one fused kernel ran "
        "or a composite of elementwise ones. (2) Whole training step (forward, loss, backward, AdamW) of the character LM with each of the four "
        "norms, interleaved; the saving 1 − t_RMS/t_LN with a 95% CI over rounds (paired per round), and the norms' share "
        "of the step estimated as (2L+1) × the norm-alone time at the model's shape over the step time. (3) Validation loss "
        "of the character LM (Shakespeare) trained with LayerNorm vs RMSNorm over seeds."
    )
    rule = (
        "Norm alone (PyTorch's built-in functions, which the library uses): RMSNorm faster if its median forward+backward "
        "time is below LayerNorm's; supported if faster at every width, mixed if at some, refuted if at none (the eager "
        "formulas get the same rule as a separate sub-verdict). Whole step: supported if the 95% CI of the built-in saving 1 − t_RMS/t_LN "
        "lies above 0 at every model size, refuted if it lies below 0 at any size, otherwise inconclusive. Quality: final "
        "validation loss RMS − LN compared over seeds by the shared rule (CI below/above 0, or |Δ| within the seed spread): "
        "'equal' or 'lower' → supported, 'higher' → refuted, 'unclear' → inconclusive. Overall: supported if norm-alone, "
        "whole-step and quality are all supported; refuted if the norm alone is faster at no width or quality is refuted; "
        "otherwise mixed."
    )
    profiles = {
        "quick": train_profile("quick", widths=[64, 128], tokens=256, repeats=2, step_models=[[32, 1, 2]], step_batch=4, step_seq=16, step_repeats=2, threads=1),
        "default": train_profile("default", widths=[64, 128, 256, 512, 1024, 2048], tokens=4096, repeats=15, step_models=[[64, 2, 4], [256, 4, 8]], step_batch=8, step_seq=64, step_repeats=10, threads=1),
        "full": train_profile("full", widths=[64, 256, 1024, 4096, 8192], tokens=16384, repeats=50, step_models=[[256, 4, 8], [1024, 12, 16]], step_batch=32, step_seq=256, step_repeats=30, threads=0),
    }  # fmt: skip

    def grid(self, p):
        timing = {"threads": p["threads"], "seed": 0}
        micro = [
            {"kind": "micro", "widths": p["widths"], "tokens": p["tokens"], "repeats": p["repeats"], **timing}
        ]
        step = [
            {
                "kind": "step",
                "d_model": d,
                "n_layers": L,
                "n_heads": h,
                "seq_len": p["step_seq"],
                "batch": p["step_batch"],
                "repeats": p["step_repeats"],
                **timing,
            }
            for d, L, h in p["step_models"]
        ]
        for c in step:
            model_config(c, 96)  # validate sizes before anything runs
        train = [{"kind": "train", "norm": n, **run_fields(p)} for n in ("layer", "rms")]
        return micro + step + self.with_seeds(train, p["seeds"])

    def run_one(self, cfg, ctx):
        return {"micro": self._micro, "step": self._step, "train": self._train}[cfg["kind"]](cfg, ctx)

    def _micro(self, cfg, ctx):
        with intra_op_threads(cfg["threads"]):
            return self._micro_timed(cfg, ctx)

    def _micro_timed(self, cfg, ctx):
        dev = ctx.device
        rows = []
        for d in cfg["widths"]:
            x = torch.randn(cfg["tokens"], d, device=dev, requires_grad=True)
            gy = torch.randn(cfg["tokens"], d, device=dev)
            fns = {k: grad_call(make_variant(k, d).to(dev), x, gy) for k in IMPLS}
            t = time_interleaved(fns, device=dev, repeats=cfg["repeats"])
            rows.append(
                {
                    "d": d,
                    **{k: {"median": v["median"], "q25": v["q25"], "q75": v["q75"]} for k, v in t.items()},
                }
            )
        # which kernels run: forward and backward profiled apart, at the middle width
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
        return {"rows": rows, "kernels": ops, "kernel_width": d, "threads": torch.get_num_threads()}

    def _step(self, cfg, ctx):
        with intra_op_threads(cfg["threads"]):
            return self._step_timed(cfg, ctx)

    def _step_timed(self, cfg, ctx):
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
        steps = time_interleaved(fns, device=dev, repeats=cfg["repeats"], warmup=3)
        norms = time_interleaved(norm_fns, device=dev, repeats=cfg["repeats"] * 2)
        return {
            "step": {k: {"median": v["median"], "times": v["times"]} for k, v in steps.items()},
            "norm": {k: {"median": v["median"]} for k, v in norms.items()},
            "n_norms": 2 * cfg["n_layers"] + 1,
            "threads": torch.get_num_threads(),
        }

    def _train(self, cfg, ctx):
        res, _ = train_small(
            cfg, ctx, model_kw={"norm": cfg["norm"]}, desc=f"{cfg['norm']} seed {cfg['seed']}"
        )
        return res

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        micro = next(r for r in runs if r["config"]["kind"] == "micro")["metrics"]
        mdf = pd.DataFrame(
            [
                {
                    "width d": r["d"], "tokens": p["tokens"],
                    **{f"{k} (µs)": r[k]["median"] * 1e6 for k in IMPLS},
                    "LN/RMS built-in": r["layer"]["median"] / r["rms"]["median"],
                    "LN/RMS eager": r["eager_layer"]["median"] / r["eager_rms"]["median"],
                    "eager/built-in LN": r["eager_layer"]["median"] / r["layer"]["median"],
                    "eager/built-in RMS": r["eager_rms"]["median"] / r["rms"]["median"],
                }
                for r in micro["rows"]
            ]
        )  # fmt: skip
        out.table(
            "norm_alone",
            mdf,
            f"Norm alone: median forward+backward time over {p['repeats']} interleaved rounds ({micro['threads']} intra-op thread(s))",
        )
        kdf = self.describe_kernels(micro)
        out.table(
            "kernels",
            kdf,
            f"Which aten kernels run (torch profiler, width {micro['kernel_width']}): computing ops that call no other computing op; allocation, view and copy ops left out",
        )

        srows = []
        for r in runs:
            if r["config"]["kind"] != "step":
                continue
            c, m = r["config"], r["metrics"]
            row = {"d_model": c["d_model"], "layers": c["n_layers"], "tokens/step": c["batch"] * c["seq_len"]}
            for fam, (ln, rms) in {
                "built-in": ("layer", "rms"),
                "eager": ("eager_layer", "eager_rms"),
            }.items():
                lr = np.log(np.array(m["step"][ln]["times"]) / np.array(m["step"][rms]["times"]))
                ci = mean_ci(lr)
                row[f"{fam} LN step (ms)"] = m["step"][ln]["median"] * 1e3
                row[f"{fam} RMS step (ms)"] = m["step"][rms]["median"] * 1e3
                row[f"{fam} saving"] = 1 - math.exp(-ci.mean)
                row[f"{fam} saving lo"] = 1 - math.exp(-ci.lo)
                row[f"{fam} saving hi"] = 1 - math.exp(-ci.hi)
                row[f"{fam} LN share of step"] = (
                    m["n_norms"] * m["norm"][ln]["median"] / m["step"][ln]["median"]
                )
            srows.append(row)
        sdf = pd.DataFrame(srows)
        out.table(
            "step",
            sdf,
            "Whole training step: median time, saving 1 − t_RMS/t_LN with 95% CI over interleaved rounds, and the norms' estimated share of the LN step",
        )

        train = [r for r in runs if r["config"]["kind"] == "train"]
        q = compare(
            by_seed(train, lambda c: c["norm"] == "layer", lambda m: m["final_val"]),
            by_seed(train, lambda c: c["norm"] == "rms", lambda m: m["final_val"]),
        )
        tdf = pd.DataFrame(
            [
                {
                    "norm": r["config"]["norm"],
                    "seed": r["config"]["seed"],
                    "final val": r["metrics"]["final_val"],
                    "best val": r["metrics"]["best_val"],
                    "steps/s": r["metrics"]["steps_per_s"],
                }
                for r in train
            ]
        ).sort_values(["norm", "seed"])
        out.table("training", tdf, "Training runs: final validation loss (nats/char)")

        self.plot_micro(mdf, out)
        self.plot_step_and_training(sdf, train, out)

        def speed_verdict(ratio):
            n = int((ratio > 1).sum())
            return "supported" if n == len(ratio) else "mixed" if n else "refuted", n

        builtin_v, n_builtin = speed_verdict(mdf["LN/RMS built-in"])
        eager_v, n_eager = speed_verdict(mdf["LN/RMS eager"])
        if (sdf["built-in saving lo"] > 0).all():
            step_v = "supported"
        elif (sdf["built-in saving hi"] < 0).any():
            step_v = "refuted"
        else:
            step_v = "inconclusive"
        qual_v = {"equal": "supported", "lower": "supported", "higher": "refuted", "unclear": "inconclusive"}[
            q.outcome
        ]
        if builtin_v == step_v == qual_v == "supported":
            verdict = "supported"
        elif builtin_v == "refuted" or qual_v == "refuted":
            verdict = "refuted"
        else:
            verdict = "mixed"
        step_txt = "; ".join(
            f"d={int(r['d_model'])}, {int(r['layers'])} layers: {r['built-in saving']:+.1%} [{r['built-in saving lo']:+.1%}, {r['built-in saving hi']:+.1%}] (norms ≈{r['built-in LN share of step']:.0%} of the step)"
            for _, r in sdf.iterrows()
        )
        eager_step = "; ".join(f"d={int(r['d_model'])}: {r['eager saving']:+.1%}" for _, r in sdf.iterrows())
        rng = lambda s: f"{s.min():.2f}–{s.max():.2f}×"  # noqa: E731
        kern_txt = "; ".join(
            f"{r['implementation'].split(',')[0]}: forward {r['forward: kernels run']}, backward {r['backward: kernels run']} kernels"
            for _, r in kdf.head(2).iterrows()
        )
        subs = [
            SubVerdict(
                "Norm alone, built-in functions: RMSNorm faster",
                builtin_v,
                f"LN/RMS time {rng(mdf['LN/RMS built-in'])} over widths {mdf['width d'].min()}–{mdf['width d'].max()} ({n_builtin}/{len(mdf)} widths faster)",
            ),
            SubVerdict(
                "Norm alone, eager formulas: RMSNorm faster",
                eager_v,
                f"LN/RMS time {rng(mdf['LN/RMS eager'])} ({n_eager}/{len(mdf)} widths faster); eager LN takes {rng(mdf['eager/built-in LN'])} the built-in LN time",
            ),
            SubVerdict(
                "Whole training step faster with RMSNorm (built-in)",
                step_v,
                step_txt + f"; eager formulas: {eager_step}",
            ),
            SubVerdict("Same validation loss", qual_v, "RMS − LN final val: " + q.text(" nats")),
        ]
        return Verdict(
            verdict=verdict,
            summary=(
                f"Alone, PyTorch's built-in RMSNorm takes {rng(1 / mdf['LN/RMS built-in'])} LayerNorm's forward+backward time ({kern_txt}); written as eager ops "
                f"RMSNorm takes {rng(1 / mdf['LN/RMS eager'])} of LayerNorm's. In a whole training step the saving is {step_txt}. "
                f"Validation loss: {q.text(' nats')}."
            ),
            key_number=f"step saving {', '.join(f'{s:+.1%}' for s in sdf['built-in saving'])} (d={', '.join(str(d) for d in sdf['d_model'])}); norm alone LN/RMS {rng(mdf['LN/RMS built-in'])}; val Δ {q.diff:+.3f}",
            evidence={
                "norm_alone_builtin": builtin_v,
                "norm_alone_eager": eager_v,
                "step": step_v,
                "quality": q.as_dict(),
                "step_savings": sdf[
                    ["d_model", "built-in saving", "built-in saving lo", "built-in saving hi"]
                ].to_dict("records"),
            },
            sub_verdicts=subs,
            caveats=[
                f"CPU timings (torch {torch.__version__}, {micro['threads']} intra-op thread(s) for timing, to keep a busy neighbouring process from stalling a thread barrier). Which kernels run depends on the PyTorch version and device (see the kernel table): this compares these implementations, not the two algorithms' lower bounds; on a GPU both norms are memory-bound and the share of a step spent in them differs.",
                f"Small models (d_model {p['d_model']}, {p['n_layers']} layers, {p['steps']} steps) for the quality comparison; the anchors trained to convergence.",
                "Timings were taken interleaved to spread background load over all variants; absolute times vary with the machine's load, the ratios less.",
            ],
        )

    def describe_kernels(self, micro):
        rows = []
        for k in IMPLS:
            row = {"implementation": VARIANTS[k][1]}
            for phase in ("forward", "backward"):
                ks = micro["kernels"][k][phase]["kernels"]
                n = sum(ks.values())
                row[f"{phase}: kernels run"] = n
                row[f"{phase}: which"] = ", ".join(
                    f"{o.removeprefix('aten::')}×{c}" if c > 1 else o.removeprefix("aten::")
                    for o, c in ks.items()
                )
                row[f"{phase}: fused?"] = "fused (1 kernel)" if n == 1 else f"composite ({n} kernels)"
            rows.append(row)
        return pd.DataFrame(rows)

    def plot_micro(self, mdf, out):
        from tfclaims.plotting import log_ticks, subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        styles = {
            "layer": ("C0", "-", "LayerNorm, built-in"),
            "rms": ("C1", "-", "RMSNorm, built-in"),
            "eager_layer": ("C0", "--", "LayerNorm, eager"),
            "eager_rms": ("C1", "--", "RMSNorm, eager"),
        }
        for k, (c, ls, lab) in styles.items():
            a.loglog(mdf["width d"], mdf[f"{k} (µs)"], marker="o", ms=3.5, color=c, ls=ls, label=lab)
        a.set_xlabel("width d (features per token)")
        a.set_ylabel("forward+backward time (µs)")
        a.set_title(f"Norm alone, {int(mdf['tokens'].iloc[0])} tokens")
        a.legend(fontsize=7.5)
        b.semilogx(mdf["width d"], mdf["LN/RMS built-in"], "o-", label="built-in (F.layer_norm, F.rms_norm)")
        b.semilogx(mdf["width d"], mdf["LN/RMS eager"], "s--", label="eager formulas")
        b.axhline(1, color="k", lw=0.8)
        b.set_xlabel("width d")
        b.set_ylabel("t_LayerNorm / t_RMSNorm")
        b.set_title("Speed-up of RMSNorm over LayerNorm (>1: faster)")
        b.legend()
        log_ticks(a, mdf["width d"])
        log_ticks(b, mdf["width d"])
        out.figure(
            "norm-alone",
            fig,
            "Forward+backward time of LayerNorm and RMSNorm alone vs width, PyTorch's built-in functions (solid) and the standard formulas in eager ops (dashed), medians of interleaved rounds; right: the LN/RMS time ratio.",
        )

    def plot_step_and_training(self, sdf, train, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        x = np.arange(len(sdf))
        for i, fam in enumerate(("built-in", "eager")):
            s = sdf[f"{fam} saving"] * 100
            err = np.vstack([s - sdf[f"{fam} saving lo"] * 100, sdf[f"{fam} saving hi"] * 100 - s])
            a.bar(x + (i - 0.5) * 0.38, s, 0.38, yerr=err, capsize=3, label=f"{fam} norms")
        a.axhline(6.9, color="k", ls="--", lw=1, label="anchor: 6.9% (Transformer)")
        a.axhline(0, color="k", lw=0.6)
        a.set_xticks(x, [f"d={d}, {L} layers" for d, L in zip(sdf["d_model"], sdf["layers"])])
        a.set_ylabel("step time saved by RMSNorm (%)")
        a.set_title("Whole training step (95% CI over rounds)")
        a.legend(fontsize=7.5)
        plot_curves(
            b,
            {
                "LayerNorm": [r for r in train if r["config"]["norm"] == "layer"],
                "RMSNorm": [r for r in train if r["config"]["norm"] == "rms"],
            },
        )
        b.set_xlabel("training step")
        b.set_ylabel("validation loss (nats/char)")
        b.set_title("Training: LayerNorm vs RMSNorm")
        b.legend()
        out.figure(
            "step-and-quality",
            fig,
            "Left: the share of a whole training step (forward, backward, AdamW) saved by RMSNorm over LayerNorm, with PyTorch's built-in functions and with the eager formulas (error bars: 95% CI over interleaved rounds); dashed: the anchor's 6.9%. Right: validation loss during training, mean and 95% band over seeds.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(RMSNormSpeed)
