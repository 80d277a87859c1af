"""`layernorm_variants`: the notes' hand-written LayerNorm and RMSNorm against torch's definitions."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from tfclaims.claims.layernorm_variants import swap_run
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.decisions import (
    combine,
    exact_check,
    holm,
    ladder,
    learned,
    noise_bound,
    noise_floor,
    paired,
    seed_values,
    with_noise,
)
from tfclaims.harness.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.nn.norm_variants import NotesLayerNorm, NotesRMSNorm, gain, relative_difference
from tfclaims.train.small_lm import run_fields, train_profile

PAIRS = {"layer": ("notes_layer", "LayerNorm"), "rms": ("notes_rms", "RMSNorm")}  # standard -> (notes, name)
COL = {"layer": "LN", "rms": "RMS"}
THRESHOLD = 0.01  # "differ" means a relative output difference above 1%
FORMULA_TOL = 1e-3  # measured relative difference vs closed form (relative; absolute 1e-6 below 1e-3)
SWAP_MARGIN = 0.01  # nats/char, fixed before running: a swap's loss change within ±0.01 counts as none (TOST)
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned at all
NULL_OFFSET = 1000  # the null pair: the torch-trained arm of each family again at seeds s + 1000
NOTES_EPS = {"layer": 1e-6, "rms": 1e-8}  # the notes' own defaults (eps outside the root)
PREC = {"float32": "fp32", "bfloat16": "bf16"}
# cell -> (trained with, reference evaluation, swapped evaluation); evaluation names as in `evals`
CELLS = {
    "t2n-same-eps": ("torch", "torch", "notes_same_eps"),
    "t2n-notes-eps": ("torch", "torch", "notes"),
    "n2t": ("notes", "notes", "torch"),
}
SUB_FORMULA, SUB_UNIT, SUB_TINY, SUB_ACT, SUB_REF = (
    "Closed forms match the measured outputs",
    "Forward outputs agree at unit scale (within 1%)",
    "Tiny-variance inputs: the eps placement matters",
    "Real activations stay above σ*",
    "The swap's reference evaluation reproduces each run's final loss",
)


def sub_swap(std: str, dtype: str) -> str:
    return f"Checkpoint swap, {PAIRS[std][1]}, {PREC[dtype]}: loss change within ±{SWAP_MARGIN:g} nats"


def sub_context(std: str) -> str:
    return f"Context (not counted): training with the notes' {PAIRS[std][1]} instead of torch's"


def metric_of(std: str, dtype: str) -> str:
    return f"validation loss, {PAIRS[std][1]} family, {PREC[dtype]} (nats/char)"


def eval_label(std: str, name: str, eps: float) -> str:
    """How an evaluation formula reads in tables and comparisons."""
    who = "torch's" if name == "torch" else "the notes'"
    e = eps if name != "notes" else NOTES_EPS[std]
    return f"{who} {PAIRS[std][1]} (eps {e:g} {'inside' if name == 'torch' else 'outside'} the root)"


# ---------------------------------------------------------------- run path
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
        "median": float(rel.median()), "max": float(rel.max()), "max_abs": float((y_notes - y_ref).abs().max()),
        "out_rms_torch": float(y_ref.pow(2).mean().sqrt()), "out_rms_notes": float(y_notes.pow(2).mean().sqrt()),
        # relative error of the closed form, absolute floor (1e-3 * 1e-3) for float32 rounding where Δ ≈ 0
        "formula_err": float(((rel - closed).abs() / closed.clamp_min(1e-3)).max()),
    }  # fmt: skip


def width_run(cfg, ctx):
    rows = []
    for d in cfg["widths"]:
        x = torch.randn(cfg["tokens"], d) + 3 * torch.randn(
            cfg["tokens"], 1
        )  # unit variance, per-token offsets
        rows.append({"d": d, **{std: measure_pair(std, x, cfg["eps"]) for std in PAIRS}})
    return {"rows": rows}


def scale_run(cfg, ctx):
    rows = []
    for d in cfg["widths"]:
        z = torch.randn(cfg["tokens"], d)
        for s in cfg["sigmas"]:
            rows.append({"d": d, "sigma": s, **{std: measure_pair(std, s * z, cfg["eps"]) for std in PAIRS}})
    return {"rows": rows}


def width_grid(p):
    return [{"widths": p["widths"], "tokens": p["tokens"], "eps": p["eps"], "seed": 0}]


def scale_grid(p):
    return [{"sigmas": p["sigmas"], "widths": p["scale_widths"], "tokens": p["tokens"], "eps": p["eps"], "seed": 0}]  # fmt: skip


def swap_config(p: dict, std: str, arm: str, seed: int, *, null: bool = False) -> dict:
    """One training run of `std`'s family with torch's formula (eps = p['eps'], inside the root) or the notes'
    (their own eps, outside), evaluated afterwards with each formula; a null run only with its own."""
    formula, eps = ("torch", p["eps"]) if arm == "torch" else ("notes", NOTES_EPS[std])
    evals = {"torch": ["torch", p["eps"]], "notes_same_eps": ["notes", p["eps"]], "notes": ["notes", NOTES_EPS[std]]}  # fmt: skip
    if null:
        evals = {arm: evals[arm]}
    return {"family": std, "formula": formula, "eps": eps, "evals": evals, "dtypes": p["dtypes"], **run_fields(p), "seed": seed}  # fmt: skip


def train_grid(p):
    return [swap_config(p, std, arm, s) for std in PAIRS for arm in ("torch", "notes") for s in p["seeds"]]


def null_grid(p):
    return [swap_config(p, std, "torch", s + NULL_OFFSET, null=True) for std in PAIRS for s in p["seeds"]]


# ---------------------------------------------------------------- closed forms for the analysis
def rel_diff(std: str, sigma: float, d: int, eps: float, notes_eps: float | None = None) -> float:
    """|y_notes / y_torch − 1| at per-token scale sigma: torch's layer at eps, the notes' at notes_eps (default
    the same eps)."""
    notes_eps = eps if notes_eps is None else notes_eps
    return abs(gain(PAIRS[std][0], sigma, d, notes_eps) / gain(std, sigma, d, eps) - 1)


def sigma_star(std: str, d: int, eps: float, notes_eps: float | None = None) -> float:
    """Largest per-token scale at which the notes' variant differs by more than THRESHOLD (closed form, fine
    log grid); inf if it differs at every scale (small widths, LayerNorm's d/(d-1))."""
    s = np.logspace(-9, 3, 4801)
    bad = np.array([rel_diff(std, float(v), d, eps, notes_eps) for v in s]) > THRESHOLD
    if bad[-1]:
        return math.inf
    return float(s[bad].max()) if bad.any() else 0.0


def e_txt(x: float) -> str:
    """1e-05 -> '1e-5', for labels."""
    return f"1e{round(math.log10(x))}"


def reading(c) -> str:
    """What a swap cell shows against the equivalence claim (a tiny but consistent change is significant *and*
    within the margin: the decision field says the first, the claim needs the second)."""
    if c.excluded:
        return "excluded"
    if c.p_equiv is not None and c.p_equiv <= c.alpha:
        return f"within ±{c.margin:g}"
    if c.decision in ("a_better", "b_better"):
        return "worse than as trained" if c.decision == "a_better" else "better than as trained"
    return "undecided"


def cell_text(c) -> str:
    t = c.text(" nats", "+.2e")
    if not c.excluded and c.p_equiv is not None and c.p_equiv <= c.alpha and c.decision != "equivalent":
        t += f"; within ±{c.margin:g} (TOST p = {c.p_equiv:.2g})"
    return t


def check(id, ok, sub, metric, observed, expected, note, margin=0.0):
    """An exact check (margin 0) or a tolerance check (the declared margin)."""
    c = exact_check(
        id, bool(ok), sub_claim=sub, metric=metric, observed=observed, expected=expected, note=note
    )
    return replace(c, margin=margin)


class LayerNormVariants(Experiment):
    claim_id = "layernorm_variants"
    title = "The notes' hand-written LayerNorm and RMSNorm vs the standard definitions"
    order = 11
    statement = (
        "The notes' hand-written LayerNorm divides by the unbiased standard deviation plus eps (eps outside the square root), "
        "and their RMSNorm divides by the root mean square plus eps; these are interchangeable with the standard layers "
        "(torch.nn.LayerNorm: biased variance, eps inside the root; torch.nn.RMSNorm: eps inside the root)."
    )
    notes_say = "LayerNorm as g·(x−mean)/(std+eps)+b with unbiased std, eps = 1e-6; RMSNorm as g·x/(rms+eps), eps = 1e-8"
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
        "Part `width`: relative output difference ||y_notes − y_torch|| / ||y_torch|| per token vs width d at unit-variance "
        "inputs. Part `scale`: the same vs input scale σ (10⁻⁷…10²) at two widths: tiny-variance inputs are where eps "
        "placement matters, and σ* is the largest scale at which the difference exceeds 1%. "
        "Part `train`, the checkpoint swap: the character LM is trained, per family (LayerNorm, RMSNorm), once with torch's "
        "formula (eps = 1e-5 inside the root) and once with the notes' formula at the notes' own eps (LayerNorm 1e-6, "
        "RMSNorm 1e-8, outside the root) in every norm, same seeds (same initial weights and data order). Each trained "
        "model is then evaluated on the fixed validation batches as trained and with every norm swapped to another formula "
        "(the swapped module holds the very same gain and bias tensors, so only the per-token factor changes): torch-trained "
        "weights with the notes' formula at eps 1e-5 (the formula alone) and at the notes' eps (the notes' code as written); "
        "notes-trained weights with torch's formula. The swap's loss change, swapped − as trained, is a deterministic "
        "number per trained model, paired by seed, with no retraining noise in it, so it can resolve forward differences "
        "(3.5e-6 relative for RMSNorm at unit scale) that no comparison of two trainings could. The same swaps are "
        "evaluated with the whole model cast to bfloat16 (weights and activations; logits taken to float32 for the loss), "
        "where rounding meets the eps and the d/(d−1) factor. During training the per-token scale σ of every norm's input "
        "is probed on a fixed validation batch, to see whether real activations reach σ*. Part `null`: the torch-trained "
        "arm of each family retrained at seeds s + 1000 and evaluated the same way, in both precisions: the noise floor of "
        "the validation loss, what retraining alone changes, shown beside every swap effect."
    )
    rule = (
        "Declared before running: swap margin ±0.01 nats/char, learned-at-all margin 0.10 nats below the unigram "
        "cross-entropy, ≥ 5 seeds in the default profile. Exact checks: the measured relative differences match their "
        "closed forms within 0.1% (relative; absolute 1e-6 where the difference is below 1e-3, float32 rounding), per "
        "norm; the unit-scale difference at the model width is ≤ 1% (LayerNorm: 1 − sqrt((d−1)/d); RMSNorm: the largest "
        "measured at any width); at the smallest input scale the difference exceeds 1% (eps placement matters); no probed "
        "norm input's 1% quantile of per-token scale, at any probe of any run, is at or below σ* at the model width. "
        "Checkpoint swap: per family and precision (fp32, bf16) three cells (torch-trained → notes' formula at eps 1e-5; "
        "torch-trained → notes' formula at the notes' eps; notes-trained → torch's formula), each the validation loss of "
        "the same weights swapped vs as trained, paired t-test over seeds against 0 and TOST against ±0.01 nats/char, "
        "Holm-corrected over the three cells; a cell whose models never learned is excluded. The claim is an equivalence "
        "(interchangeable), so each family × precision sub-verdict goes through the evidence ladder with 'equivalent' "
        "claimed and require = all: supported if every cell is shown within ±0.01, refuted if a cell's whole CI lies "
        "outside ±0.01, otherwise inconclusive (with the detectable effect). Verdict: inconclusive if a closed-form check "
        "fails, or if evaluating a trained model as trained (float32) does not reproduce its final validation loss "
        "exactly (either would make the measurement wrong); otherwise the four swap sub-verdicts combined (all supported → supported, "
        "all refuted → refuted, supported beside refuted → mixed, else inconclusive). Reported beside them, not counted: "
        "the null pair per family and precision (torch-trained arm at seeds + 1000, with its TOST against the same "
        "margin), and the old training comparison (final loss, notes-trained − torch-trained, paired by seed)."
    )
    profiles = {
        "quick": train_profile("quick", widths=[2, 8, 64, 512], sigmas=[1e-6, 1e-3, 1.0], scale_widths=[32], tokens=256, eps=1e-5, dtypes=["float32", "bfloat16"]),
        # 800 steps (final loss ≈ 2.05 nats/char, unigram 3.30), 16 evaluation batches, 5 seeds: 30 training runs
        "default": train_profile("default", widths=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096], sigmas=[float(10**e) for e in np.arange(-7, 2.01, 0.5)], scale_widths=[64, 1024], tokens=4096, eps=1e-5,
                                 steps=800, eval_every=200, eval_batches=16, seeds=[0, 1, 2, 3, 4], dtypes=["float32", "bfloat16"]),
        "full": train_profile("full", widths=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384], sigmas=[float(10**e) for e in np.arange(-8, 3.01, 0.25)], scale_widths=[64, 256, 4096], tokens=16384, eps=1e-5,
                              seeds=[0, 1, 2, 3, 4, 5, 6, 7], dtypes=["float32", "bfloat16"]),
    }  # fmt: skip
    parts = (
        Part("width", width_grid, width_run),
        Part("scale", scale_grid, scale_run),
        Part("train", train_grid, swap_run),
        Part("null", null_grid, swap_run),
    )

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        eps, d_model, dtypes = p["eps"], p["d_model"], p["dtypes"]
        wrows = self.runs_of(runs, "width")[0]["metrics"]["rows"]
        wdf = pd.DataFrame(
            [
                {
                    "width d": r["d"],
                    "LN median rel. diff": r["layer"]["median"], "LN closed form 1−sqrt((d−1)/d)": 1 - math.sqrt((r["d"] - 1) / r["d"]),
                    "LN max |Δy|": r["layer"]["max_abs"], "RMS median rel. diff": r["rms"]["median"], "RMS max |Δy|": r["rms"]["max_abs"],
                    "LN formula error": r["layer"]["formula_err"], "RMS formula error": r["rms"]["formula_err"],
                }
                for r in wrows
            ]
        )  # fmt: skip
        out.table("vs_width", wdf, f"Output difference, notes variant vs torch layer, unit-variance inputs (eps = {eps:g}), per token ||Δy||/||y||", floatfmt=".3g")  # fmt: skip
        srows = self.runs_of(runs, "scale")[0]["metrics"]["rows"]
        sdf = pd.DataFrame(
            [
                {
                    "width d": r["d"], "input scale σ": r["sigma"], "LN rel. diff": r["layer"]["median"], "LN out RMS torch": r["layer"]["out_rms_torch"],
                    "LN out RMS notes": r["layer"]["out_rms_notes"], "RMS rel. diff": r["rms"]["median"], "RMS out RMS torch": r["rms"]["out_rms_torch"],
                    "RMS out RMS notes": r["rms"]["out_rms_notes"], "LN formula error": r["layer"]["formula_err"], "RMS formula error": r["rms"]["formula_err"],
                }
                for r in srows
            ]
        )  # fmt: skip
        out.table("vs_scale", sdf, "Output difference and output RMS vs input scale σ (median over tokens)", floatfmt=".3g")  # fmt: skip

        stars = {std: sigma_star(std, d_model, eps) for std in PAIRS}
        stars_notes = {
            std: sigma_star(std, d_model, eps, NOTES_EPS[std]) for std in PAIRS
        }  # torch at eps, notes at theirs
        stars_same = {
            std: sigma_star(std, d_model, NOTES_EPS[std]) for std in PAIRS
        }  # both at the notes' eps
        width_eff = 1 - math.sqrt((d_model - 1) / d_model)
        train, null = self.runs_of(runs, "train"), self.runs_of(runs, "null")
        pdf = pd.DataFrame(
            [
                {"family": r["config"]["family"], "trained with": r["config"]["formula"], "seed": r["config"]["seed"], "step": step,
                 "norm": norm, **q, "sigma*": stars[r["config"]["family"]]}
                for r in train
                for step, pr in zip(r["metrics"]["eval_steps"], r["metrics"].get("probes", []))
                for norm, q in pr.items()
            ],
            columns=["family", "trained with", "seed", "step", "norm", "min", "q01", "median", "sigma*"],
        )  # fmt: skip
        out.table(
            "norm_inputs",
            pdf.groupby(["family", "trained with", "norm"]).agg(min_scale=("min", "min"), q01_lowest=("q01", "min"), median=("median", "median")).reset_index(),
            f"Per-token scale σ of every norm's input during training (fixed validation batch; lowest over probes and seeds); σ* at d = {d_model}: LN {stars['layer']:.3g}, RMS {stars['rms']:.3g}",
            floatfmt=".3g",
        )  # fmt: skip

        # ---- exact checks
        big = (
            sdf[sdf["width d"] == d_model]
            if d_model in set(sdf["width d"])
            else sdf[sdf["width d"] == sdf["width d"].min()]
        )
        tiny = big.loc[big["input scale σ"].idxmin()]
        checks = {SUB_FORMULA: [], SUB_UNIT: [], SUB_TINY: [], SUB_ACT: [], SUB_REF: []}
        for std, (_notes, name) in PAIRS.items():
            col = COL[std]
            err = float(max(wdf[f"{col} formula error"].max(), sdf[f"{col} formula error"].max()))
            checks[SUB_FORMULA].append(check(f"formula:{col}", err <= FORMULA_TOL, SUB_FORMULA, "largest relative departure of the measured difference from its closed form", err, 0.0, f"{name}, every width and scale", FORMULA_TOL))  # fmt: skip
            unit = width_eff if std == "layer" else float(wdf["RMS median rel. diff"].max())
            where = (
                f"closed form 1 − sqrt((d−1)/d) at d = {d_model}"
                if std == "layer"
                else "largest measured at any width"
            )
            checks[SUB_UNIT].append(check(f"unit:{col}", unit <= THRESHOLD, SUB_UNIT, "relative output difference at unit scale", unit, 0.0, f"{name}: {where}", THRESHOLD))  # fmt: skip
            rel = float(tiny[f"{col} rel. diff"])
            checks[SUB_TINY].append(check(f"tiny:{col}", rel > THRESHOLD, SUB_TINY, f"relative output difference at σ = {tiny['input scale σ']:.0e}, d = {int(tiny['width d'])}", rel, THRESHOLD, f"{name}: σ* = {stars[std]:.3g} at d = {d_model}; the check passes when the difference exceeds 1%"))  # fmt: skip
            g = pdf[pdf["family"] == std]
            below = g[g["q01"] <= g["sigma*"]]
            at = sorted(
                {
                    f"{t}-trained {n} (step {st})"
                    for t, n, st in zip(below["trained with"], below["norm"], below["step"])
                }
            )
            where = ", ".join(at[:6]) + (f", … ({len(at) - 6} more)" if len(at) > 6 else "")
            # the swap evaluates as trained in float32 with the training's own batches: it must give final_val exactly
            own = [(r["metrics"]["final_val"], r["metrics"]["swap"]["float32"]["torch" if r["config"]["formula"] == "torch" else "notes"])
                   for r in train + null if r["config"]["family"] == std and "float32" in r["metrics"].get("swap", {})]  # fmt: skip
            off = max((abs(a - b) for a, b in own), default=math.nan)
            checks[SUB_REF].append(check(f"swap-reference:{col}", len(own) and off == 0, SUB_REF, "largest |final val − swap reference (fp32, as trained)|", off, 0.0, f"{name}: {len(own)} trained models"))  # fmt: skip
            checks[SUB_ACT].append(check(f"sigma-star:{col}", len(g) and not len(below), SUB_ACT, "probes whose 1% quantile of norm-input scale is ≤ σ*", len(below), 0, f"{name} runs: lowest 1% quantile {g['q01'].min() if len(g) else float('nan'):.3g} vs σ* {stars[std]:.3g}; {len(below)} of {len(g)} probes at or below" + (f": {where}" if where else "")))  # fmt: skip

        # ---- the checkpoint swap: same weights, another formula; paired by seed, Holm over a sub-verdict's cells
        def arm(std, formula):
            return lambda c: c["family"] == std and c["formula"] == formula

        def swap_loss(dtype, name):
            return lambda m: m.get("swap", {}).get(dtype, {}).get(name)

        def ok(m):
            return learned(m["final_val"], m["unigram_xent"], LEARN_MARGIN)

        floors = [
            noise_floor(
                f"null:{COL[std]}-{PREC[dt]}", seed_values(train, arm(std, "torch"), swap_loss(dt, "torch")),
                seed_values(null, arm(std, "torch"), swap_loss(dt, "torch")), seed_offset=NULL_OFFSET,
                metric=metric_of(std, dt), arm=f"torch-trained {PAIRS[std][1]}, {PREC[dt]}", margin=SWAP_MARGIN,
            )
            for std in PAIRS for dt in dtypes if null
        ]  # fmt: skip
        swaps: dict[tuple[str, str], list] = {}
        for std, (_notes, name) in PAIRS.items():
            for dt in dtypes:
                cells = []
                for cell, (trained, ref, swp) in CELLS.items():
                    who = arm(std, trained)
                    lab = f"{'torch' if trained == 'torch' else 'notes'}-trained {name}"
                    cells.append(paired(
                        f"swap:{COL[std]}-{PREC[dt]}:{cell}", seed_values(train, who, swap_loss(dt, ref)),
                        seed_values(train, who, swap_loss(dt, swp)), metric=metric_of(std, dt), better="lower",
                        sub_claim=sub_swap(std, dt), arm_a="as trained",
                        arm_b=f"{lab} → {eval_label(std, swp, eps)}", margin=SWAP_MARGIN,
                        learned_a=seed_values(train, who, ok), learned_b=seed_values(train, who, ok),
                    ))  # fmt: skip
                swaps[std, dt] = with_noise(holm(cells), floors)
        lads = {k: ladder(v, "equivalent", require="all", label=lambda c: c.id.split(":")[-1]) for k, v in swaps.items()}  # fmt: skip
        swap_subs = [
            SubVerdict(sub_swap(std, dt), lads[std, dt].verdict, lads[std, dt].detail + ". " + "; ".join(cell_text(c) for c in swaps[std, dt]), [c.id for c in swaps[std, dt]])
            for std, dt in swaps
        ]  # fmt: skip

        # ---- context, not counted: the two trainings compared (what the old design relied on)
        ctx_cmps = with_noise(
            [paired(f"train:{COL[std]}", seed_values(train, arm(std, "torch"), lambda m: m["final_val"]), seed_values(train, arm(std, "notes"), lambda m: m["final_val"]),
                    metric=metric_of(std, "float32"), better="lower", sub_claim=sub_context(std), arm_a=f"trained with torch's {name}",
                    arm_b=f"trained with the notes' {name} (eps {NOTES_EPS[std]:g})", margin=SWAP_MARGIN,
                    learned_a=seed_values(train, arm(std, "torch"), ok), learned_b=seed_values(train, arm(std, "notes"), ok))
             for std, (_n, name) in PAIRS.items()],
            floors,
        )  # fmt: skip
        ctx_subs = [SubVerdict(sub_context(std), ladder([c], "equivalent").verdict, c.text(" nats") + " (not in the verdict: two trainings differ by chaos, not only by the formula)", [c.id]) for std, c in zip(PAIRS, ctx_cmps)]  # fmt: skip

        self.tables(train, null, swaps, floors, eps, p, out)
        self.plot_formulas(wdf, sdf, pdf, stars, p, out)
        self.plot_swap(train, swaps, floors, dtypes, out)
        self.plot_training(train, out)

        def ok_all(sub):
            return all(c.decision == "equivalent" for c in checks[sub])

        def details(sub):
            return "; ".join(
                c.note + ("" if sub == SUB_ACT or c.mean_b is None else f" ({c.mean_b:.3g})")
                for c in checks[sub]
            )

        subs = [SubVerdict(s, "supported" if ok_all(s) else "inconclusive" if (s == SUB_ACT and not len(pdf)) or (s == SUB_REF and not train) else "refuted", details(s), [c.id for c in checks[s]]) for s in checks]  # fmt: skip
        swap_v = combine(s.verdict for s in swap_subs)
        verdict = swap_v if ok_all(SUB_FORMULA) and ok_all(SUB_REF) else "inconclusive"
        reach = not ok_all(SUB_ACT)
        lowest = pdf["q01"].min() if len(pdf) else None

        def largest(std, dt):  # the swap cell with the largest |mean change|, for the summary
            cs = [c for c in swaps[std, dt] if c.diff is not None]
            return max(cs, key=lambda c: abs(c.diff)) if cs else None

        def swap_txt(std, dt):
            c = largest(std, dt)
            if c is None:
                return f"{PREC[dt]}: no finite swap"
            ci = f", CI [{c.ci_low:+.1e}, {c.ci_high:+.1e}]" if c.ci_low is not None else ""
            floor = f" vs a noise floor of ±{c.noise:.2g}" if c.noise is not None else ""
            return f"{PREC[dt]} {c.diff:+.1e} nats ({c.id.split(':')[-1]}{ci}, {reading(c)}){floor}"

        swap_sentence = "; ".join(
            f"{PAIRS[std][1]}: " + ", ".join(swap_txt(std, dt) for dt in dtypes) for std in PAIRS
        )
        key = ", ".join(f"{COL[std]} {PREC[dt]} {largest(std, dt).short('+.1e') if largest(std, dt) else '—'}" for std in PAIRS for dt in dtypes)  # fmt: skip
        shift = {std: 0.5 * math.log10(eps / NOTES_EPS[std]) for std in PAIRS}
        return Verdict(
            verdict=verdict,
            summary=(
                f"At unit scale the notes' LayerNorm output is smaller than torch's by 1 − sqrt((d−1)/d) ({width_eff:.2%} at d = {d_model}, {1 - math.sqrt((wdf['width d'].min() - 1) / wdf['width d'].min()):.0%} at d = {wdf['width d'].min()}) and their "
                f"RMSNorm differs by ~eps/2; below σ* ≈ {stars['layer']:.2g} (LN) / {stars['rms']:.2g} (RMS) eps placement dominates; the norm inputs in training "
                + ("do reach σ*" if reach else f"never fell to σ* (lowest 1% quantile {lowest:.3g})" if lowest is not None else "were not probed")
                + f". Swapping the formula under trained weights changes the validation loss by at most (mean over seeds, worst cell): {swap_sentence}; "
                f"margin ±{SWAP_MARGIN:g} nats."
            ),
            key_number=f"Δy/y = {width_eff:.2%} at d={d_model}; swap Δloss {key} nats (margin ±{SWAP_MARGIN:g})",
            evidence={
                "width_effect": width_eff, "sigma_star": stars, "sigma_star_notes_eps_vs_torch": stars_notes,
                "sigma_star_both_at_notes_eps": stars_same, "activations_reach_sigma_star": reach,
                "swap_margin": SWAP_MARGIN, "learn_margin": LEARN_MARGIN, "notes_eps": NOTES_EPS,
                "swap": {f"{COL[s]} {PREC[d]}": lads[s, d].verdict for s, d in lads},
                "noise_floor": {f.id: noise_bound(f) for f in floors},
            },  # fmt: skip
            sub_verdicts=[*subs, *swap_subs, *ctx_subs],
            caveats=[
                f"σ* scales with √eps when both layers use the same eps (the eps term competes with σ², so the crossover sits near σ ∝ √eps): at the notes' own 1e-6 (LayerNorm) and 1e-8 (RMSNorm) it would move down by {shift['layer']:.1f} and {shift['rms']:.1f} orders of magnitude from eps = {eps:g} (closed form at d = {d_model}: LN {stars_same['layer']:.2g}, RMS {stars_same['rms']:.2g}, from {stars['layer']:.2g} and {stars['rms']:.2g}). "
                f"Against torch's default eps = {eps:g} inside the root, though, the larger eps sets the crossover: the notes' layers at their own eps differ from torch's by more than 1% below σ* = {stars_notes['layer']:.2g} (LN) and {stars_notes['rms']:.2g} (RMS), about where the same-eps comparison puts it.",
                f"The swap margin ±{SWAP_MARGIN:g} nats/char was fixed before running; the swap measures the formula's effect on fixed trained weights, which is what loading a checkpoint into the other implementation does. It does not say how training itself responds to the formula (the model can adapt its gains to a constant factor such as sqrt((d−1)/d)); the retraining comparison beside it is context only, its differences dominated by the noise floor.",
                "bf16 here means the whole model cast to bfloat16 on this device's kernels (torch's fused layers accumulate in float32 internally, the hand-written formulas round each intermediate to bf16); mixed-precision autocast, which keeps norms in float32, would show less.",
                f"Small models and short training ({p['steps']} steps, d_model = {d_model}, {p['n_layers']} layers, {len(p['seeds'])} seeds); activations in deeper or longer-trained models, or in fp16, may reach smaller scales.",
            ],
            comparisons=[*(c for cs in checks.values() for c in cs), *(c for cs in swaps.values() for c in cs), *ctx_cmps],
            noise_floor=floors,
        )  # fmt: skip

    def tables(self, train, null, swaps, floors, eps, p, out):
        rows = []
        for r in train + null:
            c, m = r["config"], r["metrics"]
            base = {"part": c["part"], "family": PAIRS[c["family"]][1], "trained with": f"{c['formula']} (eps {c['eps']:g})", "seed": c["seed"],
                    "final val": m["final_val"], "unigram": m["unigram_xent"]}  # fmt: skip
            own = "torch" if c["formula"] == "torch" else "notes"
            for dt, losses in m.get("swap", {}).items():
                for name, loss in losses.items():
                    rows.append({**base, "precision": PREC[dt], "evaluated with": eval_label(c["family"], name, eps),
                                 "val loss": loss, "Δ vs as trained": loss - losses[own], "Δ vs fp32 as trained": loss - m["swap"].get("float32", {}).get(own, math.nan)})  # fmt: skip
            if not m.get("swap"):
                rows.append(base)
        sdf = pd.DataFrame(rows)
        if len(sdf):
            keys = ["part", "family", "trained with", "precision", "evaluated with", "seed"]
            sdf = sdf.sort_values([k for k in keys if k in sdf])  # diverged runs have no swap columns
        out.table("swap_runs", sdf, "Every trained model evaluated as trained and with the other formulas, per precision (nats/char): Δ vs as trained is the swap effect, Δ vs fp32 the cost of bf16", in_report=False)  # fmt: skip
        by_metric = {f.metric: f for f in floors}
        summ = []
        for (std, dt), cs in swaps.items():
            f = by_metric.get(metric_of(std, dt))
            for c in cs:
                summ.append({"family": PAIRS[std][1], "precision": PREC[dt], "cell": c.id.split(":")[-1], "swap": c.arm_b,
                             "n": c.n, "mean Δ": c.diff, "CI low": c.ci_low, "CI high": c.ci_high, "p (Holm)": c.p, "TOST p (Holm)": c.p_equiv,
                             "noise floor (null pair CI bound)": noise_bound(f) if f else None, "decision": c.decision})  # fmt: skip
        out.table("swap", pd.DataFrame(summ), f"Checkpoint swap: validation loss with the swapped formula − as trained, same weights (nats/char), mean over seeds with 95% CI; margin ±{SWAP_MARGIN:g}; noise floor: the largest |CI bound| of retraining at seeds + {NULL_OFFSET}", floatfmt=".3g")  # fmt: skip

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
        a.set(xlabel="width d", ylabel="relative output difference ||Δy|| / ||y||", title="Notes' variant vs torch, unit-variance inputs")  # fmt: skip
        a.legend(fontsize=7)
        s = np.logspace(-8, 2.5, 300)
        for i, dw in enumerate(sorted(sdf["width d"].unique())):
            g, ls, fill = sdf[sdf["width d"] == dw], "-" if i == 0 else "--", i == 0
            for std, col, c in (("layer", "LN", "C0"), ("rms", "RMS", "C1")):
                b.loglog(s, [relative_difference(PAIRS[std][0], std, float(v), dw, eps) for v in s], color=c, ls=ls, lw=1)  # fmt: skip
                b.loglog(
                    g["input scale σ"], g[f"{col} rel. diff"], marker="o" if std == "layer" else "s", lw=0, color=c,
                    ms=3.5, mfc=c if fill else "none",
                    label=f"{col}, d = {dw} ({'solid' if fill else 'dashed'}, {'filled' if fill else 'open'})",
                )  # fmt: skip
        if len(pdf):
            b.axvspan(pdf["q01"].min(), pdf["median"].max(), color="C2", alpha=0.15, label="norm inputs in training (1% q. to median)")  # fmt: skip
        b.axhline(THRESHOLD, color="k", ls=":", lw=0.8)
        for x, t in ((math.sqrt(eps), " √eps"), (eps, " eps")):
            b.axvline(x, color="gray", lw=0.8, ls="-.")
            b.text(x, 0.97, t, fontsize=7, color="gray", transform=b.get_xaxis_transform(), va="top")
        b.set(xlabel="input scale σ (per-token std or RMS)", ylabel="relative output difference", title=f"vs input scale (eps = {eps:g}); lines: closed form")  # fmt: skip
        b.legend(fontsize=6.5, loc="lower left")
        out.figure(
            "formulas",
            fig,
            f"Left: relative output difference between the notes' variant and torch's layer vs width at unit-variance inputs (LayerNorm: the unbiased std; RMSNorm: eps placement only). Right: vs input scale at two widths, measured (markers) and closed form (lines; solid: first width, dashed: second); shaded: the per-token scales of norm inputs seen in training. σ* at d = {p['d_model']}: LN {stars['layer']:.2g}, RMS {stars['rms']:.2g}.",
        )

    def plot_swap(self, train, swaps, floors, dtypes, out):
        from tfclaims.plotting import subplots

        fig, axes = subplots(len(PAIRS), width=4.6, height=3.9)
        nb = {f.metric: noise_bound(f) for f in floors}
        colors = {"float32": "C0", "bfloat16": "C3"}
        tiny = 1e-6  # symlog's linear zone: swap effects span ~1e-6 up to the noise floor's ~1e-2
        p_eps = next((r["config"]["eps"] for r in train if r["config"]["formula"] == "torch"), 1e-5)
        for ax, std in zip(axes, PAIRS):
            seen = []  # every plotted per-seed change
            for k, dt in enumerate(dtypes):
                off = (k - (len(dtypes) - 1) / 2) * 0.3
                b = nb.get(metric_of(std, dt))
                for i, c in enumerate(swaps[std, dt]):
                    if b is not None:  # the noise floor as a band behind each column
                        ax.bar(i + off, 2 * b, bottom=-b, width=0.26, color=colors[dt], alpha=0.12, lw=0,
                               label=f"noise floor, {PREC[dt]}" if i == 0 else None)  # fmt: skip
                    trained, ref, swp = CELLS[c.id.split(":")[-1]]
                    who = [r for r in train if r["config"]["family"] == std and r["config"]["formula"] == trained and "swap" in r["metrics"]]  # fmt: skip
                    ys = [r["metrics"]["swap"][dt][swp] - r["metrics"]["swap"][dt][ref] for r in who]
                    seen += [y for y in ys if math.isfinite(y)]
                    ax.scatter([i + off] * len(ys), ys, s=12, color=colors[dt], alpha=0.6, zorder=3, label=f"one seed, {PREC[dt]}" if i == 0 else None)  # fmt: skip
                    if c.diff is not None and c.ci_low is not None:
                        ax.errorbar(i + off, c.diff, yerr=[[c.diff - c.ci_low], [c.ci_high - c.diff]], fmt="_", ms=14, color=colors[dt], capsize=4,
                                    zorder=4, label=f"mean and 95% CI, {PREC[dt]}" if i == 0 else None)  # fmt: skip
            for sgn in (1, -1):
                ax.axhline(sgn * SWAP_MARGIN, color="k", ls="--", lw=0.8, label=f"margin ±{SWAP_MARGIN:g}" if sgn > 0 else None)  # fmt: skip
            ax.axhline(0, color="k", lw=0.5)
            ax.set_yscale("symlog", linthresh=tiny)
            top = max(
                [SWAP_MARGIN, *(v for v in nb.values() if v is not None), *map(abs, seen)]
            )  # all in view
            ax.set_ylim(-3 * top, 3 * top)
            ax.set_xticks(range(len(CELLS)), [f"torch-trained →\nnotes (eps {e_txt(p_eps)})", f"torch-trained →\nnotes (eps {e_txt(NOTES_EPS[std])})", f"notes-trained →\ntorch (eps {e_txt(p_eps)})"], fontsize=7)  # fmt: skip
            ax.set(xlabel="which swap (trained with → evaluated with)", ylabel="val loss swapped − as trained (nats/char)", title=f"Checkpoint swap, {PAIRS[std][1]} family")  # fmt: skip
        axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        out.figure(
            "swap",
            fig,
            f"The checkpoint swap: validation loss of the same trained weights with the other formula minus as trained, per seed (dots) and mean with 95% CI over seeds (bars), in float32 (blue) and with the whole model in bfloat16 (red). Shaded columns: the noise floor of the validation loss in each precision (largest |CI bound| of the torch-trained arm retrained at seeds + {NULL_OFFSET}), what retraining alone changes; dashed: the pre-declared margin ±{SWAP_MARGIN:g} nats/char. Symmetric log axis, linear within ±{tiny:g}.",
        )

    def plot_training(self, train, out):
        from tfclaims.plotting import subplots

        fig, (a,) = subplots(1, width=5.2, height=3.7)
        groups, styles = {}, {}
        for std, c in (("layer", "C0"), ("rms", "C1")):
            for formula in ("torch", "notes"):
                lab = ("torch " if formula == "torch" else "the notes' ") + PAIRS[std][1]
                groups[lab] = [
                    r for r in train if (r["config"]["family"], r["config"]["formula"]) == (std, formula)
                ]
                styles[lab] = {"color": c, "ls": "--" if formula == "notes" else "-"}
        plot_curves(a, groups, styles=styles)
        unigram = next((r["metrics"]["unigram_xent"] for r in train), None)
        if unigram is not None:
            a.axhline(unigram, color="gray", ls=":", lw=0.8, label="unigram level")
        a.set(
            xlabel="training step", ylabel="validation loss (nats/char)", title="Training with each formula"
        )
        a.legend(fontsize=7)
        out.figure(
            "training",
            fig,
            "Validation loss during training with torch's LayerNorm/RMSNorm (eps 1e-5) and the notes' variants at their own eps in every norm (mean and 95% band over seeds); dotted: the unigram level.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LayerNormVariants)
