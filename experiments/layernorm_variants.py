"""`layernorm_variants`: the notes' hand-written LayerNorm and RMSNorm against torch's definitions."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch import nn

from tfclaims.comparison import by_seed, compare, plot_curves
from tfclaims.data import eval_windows, load_corpus
from tfclaims.experiment import Experiment, Output, SubVerdict, Verdict
from tfclaims.norm_variants import NotesLayerNorm, NotesRMSNorm, relative_difference, swap_norms
from tfclaims.norms import LayerNorm, RMSNorm
from tfclaims.small_lm import run_fields, train_profile, train_small

PAIRS = {
    "layer": ("notes_layer", "LayerNorm"),
    "rms": ("notes_rms", "RMSNorm"),
}  # standard -> (notes variant, name)
THRESHOLD = 0.01  # "differ" means a relative output difference above 1%
FORMULA_TOL = (
    1e-3  # measured relative difference vs closed form: relative, or absolute 1e-6 where it is below 1e-3
)


def pair_modules(std: str, d: int, eps: float) -> tuple[nn.Module, nn.Module]:
    """(torch's own layer, the notes' variant), both at gain 1 and bias 0."""
    if std == "layer":
        return nn.LayerNorm(d, eps=eps), NotesLayerNorm(d, eps)
    return nn.RMSNorm(d, eps=eps), NotesRMSNorm(d, eps)


def token_scale(x: torch.Tensor, std: str) -> torch.Tensor:
    """The per-token statistic the norm divides by (without eps): biased std for LayerNorm, RMS for RMSNorm."""
    return x.std(-1, correction=0) if std == "layer" else x.pow(2).mean(-1).sqrt()


@torch.no_grad()
def measure_pair(std: str, x: torch.Tensor, eps: float) -> dict:
    """Relative output difference per token ||y_notes - y_torch|| / ||y_torch|| and its closed form."""
    d = x.shape[-1]
    ref, notes = pair_modules(std, d, eps)
    y_ref, y_notes = ref(x), notes(x)
    rel = (torch.linalg.norm(y_notes - y_ref, dim=-1) / torch.linalg.norm(y_ref, dim=-1)).double()
    closed = relative_difference(PAIRS[std][0], std, token_scale(x.double(), std), d, eps)
    return {
        "median": float(rel.median()),
        "max": float(rel.max()),
        "max_abs": float((y_notes - y_ref).abs().max()),
        "out_rms_torch": float(y_ref.pow(2).mean().sqrt()),
        "out_rms_notes": float(y_notes.pow(2).mean().sqrt()),
        # relative error of the closed form, with an absolute floor (1e-3 * 1e-3) for float32 rounding where Δ ≈ 0
        "formula_err": float(((rel - closed).abs() / closed.clamp_min(1e-3)).max()),
    }


def sigma_star(std: str, d: int, eps: float) -> float:
    """Largest per-token scale at which the notes' variant differs by more than THRESHOLD (closed form, fine
    log grid); inf if it differs at every scale (small widths, LayerNorm's d/(d-1))."""
    s = np.logspace(-9, 3, 4801)
    bad = np.array([relative_difference(PAIRS[std][0], std, float(v), d, eps) for v in s]) > THRESHOLD
    if bad[-1]:
        return math.inf
    return float(s[bad].max()) if bad.any() else 0.0


def is_norm(m: nn.Module) -> bool:
    return isinstance(m, (LayerNorm, RMSNorm, NotesLayerNorm, NotesRMSNorm))


class LayerNormVariants(Experiment):
    claim_id = "layernorm_variants"
    title = "The notes' hand-written LayerNorm and RMSNorm vs the standard definitions"
    order = 11
    statement = (
        "The notes' hand-written LayerNorm divides by the unbiased standard deviation plus eps (eps outside the square root), "
        "and their RMSNorm divides by the root mean square plus eps; these are interchangeable with the standard layers "
        "(torch.nn.LayerNorm: biased variance, eps inside the root; torch.nn.RMSNorm: eps inside the root)."
    )
    notes_say = "LayerNorm as g·(x−mean)/(std+eps)+b with unbiased std; RMSNorm as g·x/(rms+eps)"
    anchors = [
        "Ba et al. 2016 (Layer Normalization) define the statistics with the mean over the d features: σ = sqrt(mean((x−μ)²)), i.e. the biased estimate; torch.nn.LayerNorm computes (x−μ)/sqrt(Var_biased + eps).",
        "Zhang & Sennrich 2019 (RMSNorm): RMS(x) = sqrt(mean(x²)); torch.nn.RMSNorm computes x/sqrt(mean(x²) + eps).",
        "The notes' LayerNorm is the form popularised by the Annotated Transformer (x.std(), which is unbiased in PyTorch, plus eps): the two differ by sqrt(d/(d−1)), 1/(2d) relative, plus the eps placement.",
    ]
    anchor_number = "closed form: unbiased std changes outputs by 1 − sqrt((d−1)/d) ≈ 1/(2d)"
    method = (
        "All variants at gain 1 and bias 0 scale (x − mean) or x by a per-token factor, so they differ only in that factor; "
        "the closed forms (notes LN: 1/(σ·sqrt(d/(d−1)) + eps) vs 1/sqrt(σ² + eps); notes RMS: 1/(r + eps) vs 1/sqrt(r² + eps)) "
        "are checked against measured outputs of torch.nn.LayerNorm / torch.nn.RMSNorm and the notes' variants (float32). "
        "(1) Relative output difference ||y_notes − y_torch|| / ||y_torch|| per token vs width d at unit-variance inputs; "
        "(2) vs input scale σ (10⁻⁷…10²) at two widths: tiny-variance inputs are where eps placement matters, and σ* is the "
        "largest scale at which the difference exceeds 1%. (3) Training: the character LM with each of the four norms (the "
        "notes' variants swapped in for every norm), same eps = 1e-5 everywhere; during training the per-token scale σ of "
        "every norm's input is probed on a fixed validation batch, to see whether real activations ever fall below σ*."
    )
    rule = (
        "Formulas: if any measured relative difference departs from its closed form by more than 0.1% (relative; absolute "
        "1e-6 where the difference is below 1e-3, float32 rounding), the "
        "verdict is inconclusive (the analysis would be wrong). Training: the final validation loss of each notes variant "
        "is compared with its standard counterpart over seeds by the shared rule. Refuted if either comparison is 'higher' "
        "or 'lower' (the variant changes training). Supported if both are 'equal', the width effect at the model width "
        "is below 1%, and the probed norm inputs stay above σ* (their 1% quantile of per-token scale, at every probe, in "
        "every run, exceeds σ* at the model width). Mixed if both are 'equal' but the width effect exceeds 1% or "
        "activations do reach σ < σ*. Otherwise (an 'unclear' comparison) inconclusive."
    )
    profiles = {
        "quick": train_profile("quick", widths=[2, 8, 64, 512], sigmas=[1e-6, 1e-3, 1.0], scale_widths=[32], tokens=256, eps=1e-5),
        "default": train_profile("default", widths=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096], sigmas=[float(10**e) for e in np.arange(-7, 2.01, 0.5)], scale_widths=[64, 1024], tokens=4096, eps=1e-5),
        "full": train_profile("full", widths=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384], sigmas=[float(10**e) for e in np.arange(-8, 3.01, 0.25)], scale_widths=[64, 256, 4096], tokens=16384, eps=1e-5),
    }  # fmt: skip

    def grid(self, p):
        width = [{"kind": "width", "widths": p["widths"], "tokens": p["tokens"], "eps": p["eps"], "seed": 0}]
        scale = [
            {
                "kind": "scale",
                "sigmas": p["sigmas"],
                "widths": p["scale_widths"],
                "tokens": p["tokens"],
                "eps": p["eps"],
                "seed": 0,
            }
        ]
        train = [
            {"kind": "train", "variant": v, "eps": p["eps"], **run_fields(p)}
            for v in ("layer", "notes_layer", "rms", "notes_rms")
        ]
        return width + scale + self.with_seeds(train, p["seeds"])

    def run_one(self, cfg, ctx):
        return {"width": self._width, "scale": self._scale, "train": self._train}[cfg["kind"]](cfg, ctx)

    def _width(self, cfg, ctx):
        rows = []
        for d in cfg["widths"]:
            x = torch.randn(cfg["tokens"], d) + 3 * torch.randn(
                cfg["tokens"], 1
            )  # unit variance, per-token offsets
            rows.append({"d": d, **{std: measure_pair(std, x, cfg["eps"]) for std in PAIRS}})
        return {"rows": rows}

    def _scale(self, cfg, ctx):
        rows = []
        for d in cfg["widths"]:
            z = torch.randn(cfg["tokens"], d)
            for s in cfg["sigmas"]:
                rows.append(
                    {"d": d, "sigma": s, **{std: measure_pair(std, s * z, cfg["eps"]) for std in PAIRS}}
                )
        return {"rows": rows}

    def _train(self, cfg, ctx):
        corpus = load_corpus()
        v = cfg["variant"]
        std = v.removeprefix("notes_")
        probe_x = eval_windows(corpus.val, 1, 16, cfg["seq_len"], seed=99)[0][0].to(ctx.device)

        def probe(step, model):
            """Per norm: quantiles of the per-token scale of its input on a fixed batch."""
            seen = {}
            hooks = [
                m.register_forward_pre_hook(
                    lambda mod, args, name=name: seen.__setitem__(
                        name, token_scale(args[0].detach().double(), std).flatten()
                    )
                )
                for name, m in model.named_modules()
                if is_norm(m)
            ]
            was = model.training
            model.eval()
            with torch.no_grad():
                model(probe_x)
            model.train(was)
            for h in hooks:
                h.remove()
            return {
                name: {"min": float(s.min()), "q01": float(s.quantile(0.01)), "median": float(s.median())}
                for name, s in seen.items()
            }

        prepare = (lambda m: swap_norms(m, v)) if v.startswith("notes") else None
        res, _ = train_small(
            cfg,
            ctx,
            model_kw={"norm": std, "norm_eps": cfg["eps"]},
            prepare=prepare,
            on_eval=probe,
            desc=f"{v} seed {cfg['seed']}",
        )
        return res

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        eps, d_model = p["eps"], p["d_model"]
        wrows = next(r for r in runs if r["config"]["kind"] == "width")["metrics"]["rows"]
        wdf = pd.DataFrame(
            [
                {
                    "width d": r["d"],
                    "LN median rel. diff": r["layer"]["median"], "LN closed form 1−sqrt((d−1)/d)": 1 - math.sqrt((r["d"] - 1) / r["d"]),
                    "LN max |Δy|": r["layer"]["max_abs"], "RMS median rel. diff": r["rms"]["median"], "RMS max |Δy|": r["rms"]["max_abs"],
                    "max formula error": max(r["layer"]["formula_err"], r["rms"]["formula_err"]),
                }
                for r in wrows
            ]
        )  # fmt: skip
        out.table(
            "vs_width",
            wdf,
            f"Output difference, notes variant vs torch layer, unit-variance inputs (eps = {eps:g}), per token ||Δy||/||y||",
            floatfmt=".3g",
        )
        srows = next(r for r in runs if r["config"]["kind"] == "scale")["metrics"]["rows"]
        sdf = pd.DataFrame(
            [
                {
                    "width d": r["d"], "input scale σ": r["sigma"], "LN rel. diff": r["layer"]["median"], "LN out RMS torch": r["layer"]["out_rms_torch"],
                    "LN out RMS notes": r["layer"]["out_rms_notes"], "RMS rel. diff": r["rms"]["median"], "RMS out RMS torch": r["rms"]["out_rms_torch"],
                    "RMS out RMS notes": r["rms"]["out_rms_notes"], "max formula error": max(r["layer"]["formula_err"], r["rms"]["formula_err"]),
                }
                for r in srows
            ]
        )  # fmt: skip
        out.table(
            "vs_scale",
            sdf,
            "Output difference and output RMS vs input scale σ (median over tokens)",
            floatfmt=".3g",
        )
        formula_err = float(max(wdf["max formula error"].max(), sdf["max formula error"].max()))

        stars = {std: sigma_star(std, d_model, eps) for std in PAIRS}
        width_eff = 1 - math.sqrt((d_model - 1) / d_model)
        train = [r for r in runs if r["config"]["kind"] == "train"]
        comps, probe_rows = {}, []
        for std, (notes, _name) in PAIRS.items():
            comps[std] = compare(
                by_seed(train, lambda c, s=std: c["variant"] == s, lambda m: m["final_val"]),
                by_seed(train, lambda c, v=notes: c["variant"] == v, lambda m: m["final_val"]),
            )
        for r in train:
            std = r["config"]["variant"].removeprefix("notes_")
            for step, pr in zip(r["metrics"]["eval_steps"], r["metrics"].get("probes", [])):
                for norm_name, q in pr.items():
                    probe_rows.append(
                        {
                            "variant": r["config"]["variant"],
                            "seed": r["config"]["seed"],
                            "step": step,
                            "norm": norm_name,
                            **q,
                            "sigma*": stars[std],
                        }
                    )
        pdf = pd.DataFrame(probe_rows)
        below = pdf[pdf["q01"] <= pdf["sigma*"]]
        reach = len(below) > 0
        lowest = pdf.loc[pdf["q01"].idxmin()] if len(pdf) else None
        psum = (
            pdf.groupby(["variant", "norm"])
            .agg(min_scale=("min", "min"), q01_lowest=("q01", "min"), median=("median", "median"))
            .reset_index()
        )
        out.table(
            "norm_inputs",
            psum,
            f"Per-token scale σ of every norm's input during training (fixed validation batch; lowest over probes and seeds); σ* at d = {d_model}: LN {stars['layer']:.3g}, RMS {stars['rms']:.3g}",
            floatfmt=".3g",
        )
        tdf = pd.DataFrame(
            [
                {
                    "variant": r["config"]["variant"],
                    "seed": r["config"]["seed"],
                    "final val": r["metrics"]["final_val"],
                }
                for r in train
            ]
        ).sort_values(["variant", "seed"])
        out.table("training", tdf, "Training runs: final validation loss (nats/char)", in_report=False)

        self.plot_formulas(wdf, sdf, pdf, stars, p, out)
        self.plot_training(train, out)

        outcomes = [c.outcome for c in comps.values()]
        if formula_err > FORMULA_TOL:
            verdict = "inconclusive"
        elif any(o in ("higher", "lower") for o in outcomes):
            verdict = "refuted"
        elif all(o == "equal" for o in outcomes):
            verdict = "mixed" if (reach or width_eff > THRESHOLD) else "supported"
        else:
            verdict = "inconclusive"
        big = sdf[sdf["width d"] == d_model]
        tiny = big.loc[big["input scale σ"].idxmin()] if len(big) else None
        subs = [
            SubVerdict(
                "Closed forms match the measured outputs",
                "supported" if formula_err <= FORMULA_TOL else "refuted",
                f"largest departure {formula_err:.2g} (relative) over all widths and scales",
            ),
            SubVerdict(
                "Forward outputs agree at unit scale (within 1%)",
                "supported" if width_eff <= THRESHOLD else "refuted",
                f"LN: 1 − sqrt((d−1)/d) = {width_eff:.2%} at d = {d_model} (above 1% for d ≤ {int(wdf[wdf['LN median rel. diff'] > THRESHOLD]['width d'].max()) if (wdf['LN median rel. diff'] > THRESHOLD).any() else 0}); RMS: {wdf['RMS median rel. diff'].max():.1e} at every width",
            ),
            SubVerdict(
                "Tiny-variance inputs: the eps placement matters",
                "supported",
                f"σ* (difference > 1%) at d = {d_model}: LN {stars['layer']:.3g}, RMS {stars['rms']:.3g}"
                + (
                    f"; at σ = {tiny['input scale σ']:.0e}: LN {tiny['LN rel. diff']:.3g}×, RMS {tiny['RMS rel. diff']:.3g}× relative difference"
                    if tiny is not None
                    else ""
                ),
            ),
            SubVerdict(
                "Real activations stay above σ*",
                "refuted" if reach else "supported",
                "; ".join(
                    f"{name} runs: lowest 1% quantile of a norm input's per-token scale {g['q01'].min():.3g} vs σ* {stars[std]:.3g}"
                    for std, (_, name) in PAIRS.items()
                    for g in [pdf[pdf["variant"].str.removeprefix("notes_") == std]]
                    if len(g)
                )
                + (
                    f"; below σ*: {', '.join(sorted({f'{r.variant} {r.norm} (step {r.step})' for r in below.itertuples()}))}"
                    if reach
                    else ""
                )
                + f"; {len(below)} of {len(pdf)} probes at or below σ*",
            ),
            *[
                SubVerdict(
                    f"Training: notes {PAIRS[s][1]} = torch {PAIRS[s][1]}",
                    {"equal": "supported", "unclear": "inconclusive"}.get(c.outcome, "refuted"),
                    c.text(" nats"),
                )
                for s, c in comps.items()
            ],
        ]
        return Verdict(
            verdict=verdict,
            summary=(
                f"At unit scale the notes' LayerNorm output is smaller than torch's by 1 − sqrt((d−1)/d) ({width_eff:.2%} at d = {d_model}, {1 - math.sqrt((wdf['width d'].min() - 1) / wdf['width d'].min()):.0%} at d = {wdf['width d'].min()}) and their "
                f"RMSNorm differs by ~eps/2; below σ* ≈ {stars['layer']:.2g} (LN) / {stars['rms']:.2g} (RMS) eps placement dominates, the standard layers shrinking "
                f"outputs towards 0 while the notes' keep them near unit scale down to σ ≈ eps. In training, the norm inputs' per-token scale "
                + (
                    "does fall below σ*"
                    if reach
                    else f"never fell below σ* (lowest 1% quantile {lowest['q01']:.3g})"
                    if lowest is not None
                    else "was not probed"
                )
                + f", and the final validation loss is LN: {comps['layer'].text(' nats')}; RMS: {comps['rms'].text(' nats')}."
            ),
            key_number=f"Δy/y = {width_eff:.2%} at d={d_model} (unbiased std); val Δ LN {comps['layer'].diff:+.3f}, RMS {comps['rms'].diff:+.3f} nats",
            evidence={
                "formula_err": formula_err,
                "width_effect": width_eff,
                "sigma_star": stars,
                "activations_reach_sigma_star": reach,
                "training": {k: c.as_dict() for k, c in comps.items()},
            },
            sub_verdicts=subs,
            caveats=[
                f"One eps (= {eps:g}) for every variant isolates the formulas; the notes' own defaults (1e-6 for LayerNorm, 1e-8 for RMSNorm) would move σ* down by about 3 and 6 orders of magnitude for the eps-outside forms.",
                "With a learnable gain after the norm, a constant factor such as sqrt((d−1)/d) is absorbed by training; it matters when weights are exchanged between implementations (e.g. loading a checkpoint into the other formula).",
                f"Small models and short training ({p['steps']} steps, d_model = {d_model}, {p['n_layers']} layers); activations in deeper or longer-trained models, or in fp16, may reach smaller scales.",
            ],
        )

    def plot_formulas(self, wdf, sdf, pdf, stars, p, out):
        from tfclaims.plotting import log_ticks, subplots

        eps = p["eps"]
        fig, (a, b) = subplots(2, width=4.8, height=3.7)
        d = np.logspace(math.log10(2), math.log10(wdf["width d"].max()), 200)
        a.loglog(d, 1 - np.sqrt((d - 1) / d), "C0-", lw=1, label="LN closed form 1 − sqrt((d−1)/d)")
        a.loglog(wdf["width d"], wdf["LN median rel. diff"], "C0o", label="LN measured")
        a.loglog(
            wdf["width d"], wdf["RMS median rel. diff"], "C1s", label="RMS measured (eps placement only)"
        )
        a.axhline(THRESHOLD, color="k", ls=":", lw=0.8, label="1%")
        log_ticks(a, wdf["width d"])
        a.set_xlabel("width d")
        a.set_ylabel("relative output difference ||Δy|| / ||y||")
        a.set_title("Notes' variant vs torch, unit-variance inputs")
        a.legend(fontsize=7)
        s = np.logspace(-8, 2.5, 300)
        for i, dw in enumerate(sorted(sdf["width d"].unique())):
            g = sdf[sdf["width d"] == dw]
            for std, col, lab in (("layer", "LN", "C0"), ("rms", "RMS", "C1")):
                ls = "-" if i == 0 else "--"
                b.loglog(
                    s,
                    [relative_difference(PAIRS[std][0], std, float(v), dw, eps) for v in s],
                    color=lab,
                    ls=ls,
                    lw=1,
                )
                b.loglog(
                    g["input scale σ"],
                    g[f"{col} rel. diff"],
                    marker="o" if std == "layer" else "s",
                    ls=ls,
                    lw=0,
                    color=lab,
                    ms=3.5,
                    mfc=lab if i == 0 else "none",
                    label=f"{col}, d = {dw} ({'solid' if i == 0 else 'dashed'}, {'filled' if i == 0 else 'open'})",
                )
        if len(pdf):
            lo, hi = pdf["q01"].min(), pdf["median"].max()
            b.axvspan(lo, hi, color="C2", alpha=0.15, label="norm inputs in training (1% q. to median)")
        b.axhline(THRESHOLD, color="k", ls=":", lw=0.8)
        b.axvline(math.sqrt(eps), color="gray", lw=0.8, ls="-.")
        b.axvline(eps, color="gray", lw=0.8, ls="-.")
        b.text(
            math.sqrt(eps),
            0.97,
            " √eps",
            fontsize=7,
            color="gray",
            transform=b.get_xaxis_transform(),
            va="top",
        )
        b.text(eps, 0.97, " eps", fontsize=7, color="gray", transform=b.get_xaxis_transform(), va="top")
        b.set_xlabel("input scale σ (per-token std or RMS)")
        b.set_ylabel("relative output difference")
        b.set_title(f"vs input scale (eps = {eps:g}); lines: closed form")
        b.legend(fontsize=6.5, loc="lower left")
        out.figure(
            "formulas",
            fig,
            f"Left: relative output difference between the notes' variant and torch's layer vs width at unit-variance inputs (LayerNorm: the unbiased std; RMSNorm: eps placement only). Right: vs input scale at two widths, measured (markers) and closed form (lines; solid: first width, dashed: second); shaded: the per-token scales of norm inputs seen in training. σ* at d = {p['d_model']}: LN {stars['layer']:.2g}, RMS {stars['rms']:.2g}.",
        )

    def plot_training(self, train, out):
        from tfclaims.plotting import subplots

        fig, (a,) = subplots(1, width=5.2, height=3.7)
        names = {
            "layer": "torch LayerNorm",
            "notes_layer": "notes' LayerNorm",
            "rms": "torch RMSNorm",
            "notes_rms": "notes' RMSNorm",
        }
        styles = {
            "torch LayerNorm": {"color": "C0"},
            "notes' LayerNorm": {"color": "C0", "ls": "--"},
            "torch RMSNorm": {"color": "C1"},
            "notes' RMSNorm": {"color": "C1", "ls": "--"},
        }
        plot_curves(
            a,
            {lab: [r for r in train if r["config"]["variant"] == v] for v, lab in names.items()},
            styles=styles,
        )
        a.set_xlabel("training step")
        a.set_ylabel("validation loss (nats/char)")
        a.set_title("Training with each formula")
        a.legend()
        out.figure(
            "training",
            fig,
            "Validation loss during training with torch's LayerNorm/RMSNorm and the notes' variants swapped in for every norm (mean and 95% band over seeds).",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LayerNormVariants)
