"""`rmsnorm`: RMSNorm drops LayerNorm's mean-centring, runs faster, and trains as well."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from tfclaims.claims.rmsnorm import AA, FUSED, IMPLS, norm_alone, step_timing
from tfclaims.evidence import decisions as ev
from tfclaims.evidence.curves import plot_curves
from tfclaims.harness.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.nn.norm_variants import VARIANTS
from tfclaims.train.small_lm import model_config, run_fields, train_profile, train_small

QUALITY_MARGIN = 0.05  # nats/char: |Δ final val loss| within this is "the same quality" (TOST)
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000  # the null pair: LayerNorm rerun at seed s + NULL_OFFSET
FAMILIES = {"built-in": ("layer", "rms"), "eager": ("eager_layer", "eager_rms"), "fused": FUSED}
# The algorithm is judged like with like; the built-in pair is a finding about PyTorch's kernels on the device.
ALGORITHM = ("alone eager", "alone fused", "step eager")
SUB = {
    "alone built-in": "Norm alone, built-in functions: RMSNorm faster (PyTorch's kernels; not counted)",
    "alone eager": "Norm alone, eager formulas: RMSNorm faster",
    "alone fused": "Norm alone, fused by torch.compile: RMSNorm faster",
    "step built-in": "Whole training step faster with RMSNorm (built-in; not counted)",
    "step eager": "Whole training step faster with RMSNorm (eager formulas)",
    "quality": "Same validation loss",
}


def norm_alone_grid(p: dict) -> list[dict]:
    return [
        {
            "widths": p["widths"],
            "tokens": p["tokens"],
            "repeats": p["repeats"],
            "threads": p["threads"],
            "fused": p["fused"],
            "bw_bytes": p["bw_bytes"],
            "seed": 0,
        }
    ]


def step_grid(p: dict) -> list[dict]:
    cfgs = [
        {"d_model": d, "n_layers": L, "n_heads": h, "seq_len": p["step_seq"], "batch": p["step_batch"],
         "repeats": p["step_repeats"], "threads": p["threads"], "seed": 0}
        for d, L, h in p["step_models"]
    ]  # fmt: skip
    for c in cfgs:
        model_config(c, 96)  # validate sizes before anything runs
    return cfgs


def train_grid(p: dict) -> list[dict]:
    arms = [{"norm": n, **run_fields(p), "seed": s} for n in ("layer", "rms") for s in p["seeds"]]
    null = [{"norm": "layer", **run_fields(p), "seed": s + NULL_OFFSET} for s in p["seeds"]]
    return arms + null


def train_norm(cfg: dict, ctx) -> dict:
    res, _ = train_small(cfg, ctx, model_kw={"norm": cfg["norm"]}, desc=f"{cfg['norm']} seed {cfg['seed']}")
    return res


def log_times(times) -> dict[int, float]:
    """round -> log seconds per call: the rounds are interleaved, so round i of two arms is a pair."""
    return {i: math.log(t) for i, t in enumerate(times)}


def timing_pair(cid: str, t: dict, a: str, b: str, *, metric: str, sub_claim: str) -> ev.Comparison:
    """log t_b − log t_a paired over rounds: diff = log(t_b / t_a), lower is faster."""
    return ev.paired(
        cid, log_times(t[a]["times"]), log_times(t[b]["times"]), metric=metric, better="lower",
        sub_claim=sub_claim, arm_a=VARIANTS.get(a, (None, a))[1], arm_b=VARIANTS.get(b, (None, b))[1],
    )  # fmt: skip


def quality_verdict(q: ev.Comparison) -> tuple[str, str]:
    """The equality sub-claim: TOST within ±QUALITY_MARGIN or RMSNorm significantly lower → supported;
    LayerNorm significantly lower (and no equivalence) → refuted; otherwise inconclusive."""
    t = q.text(" nats")
    if q.excluded:
        return "inconclusive", t
    if q.p_equiv is not None and q.p_equiv <= q.alpha:
        return "supported", f"{t} (equivalent within ±{QUALITY_MARGIN:g})"
    if q.decision == "b_better":
        return "supported", f"{t} (RMSNorm lower)"
    if q.decision == "a_better":
        return "refuted", f"{t} (LayerNorm lower)"
    return "inconclusive", f"{t} (neither a difference nor equivalence within ±{QUALITY_MARGIN:g} shown)"


def ratio_ci(c: ev.Comparison) -> tuple[float, float, float]:
    """LN/RMS time ratio (exp of −diff) with its 95% CI."""
    lo, hi = (math.exp(-v) if v is not None else math.nan for v in (c.ci_high, c.ci_low))
    return math.exp(-c.diff), lo, hi


def ratio_text(c: ev.Comparison) -> str:
    if c.ci_low is None:
        return f"{c.id}: {c.decision}"
    r, lo, hi = ratio_ci(c)
    return f"{c.id.split(':')[1]}: LN/RMS {r:.2f}× [{lo:.2f}, {hi:.2f}], p = {c.p:.2g}"


def saving_text(c: ev.Comparison) -> str:
    if c.ci_low is None:
        return f"{c.id}: {c.decision}"
    s, lo, hi = (1 - math.exp(v) for v in (c.diff, c.ci_high, c.ci_low))
    return f"{c.id.split(':')[1]}: saving {s:+.1%} [{lo:+.1%}, {hi:+.1%}], p = {c.p:.2g}"


def conjunction(verdicts: list[str]) -> str:
    """'A and B': refuted if any part is refuted; else mixed if any is mixed; supported if all are."""
    if "refuted" in verdicts:
        return "refuted"
    if "mixed" in verdicts:
        return "mixed"
    return "supported" if verdicts and all(v == "supported" for v in verdicts) else "inconclusive"


class RMSNormSpeed(Experiment):
    claim_id = "rmsnorm"
    title = "RMSNorm is cheaper than LayerNorm at the same quality"
    order = 10
    times_code = True
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
        "`torch.nn.LayerNorm` and `torch.nn.RMSNorm`, call), for the standard formulas written in eager elementwise ops, and "
        "for those formulas fused by `torch.compile` (one generated kernel per direction); all six, and the built-in "
        "LayerNorm a second time under another name (an A/A pair), are timed interleaved round by round. Each time is also "
        "read as achieved bandwidth: the compulsory bytes of a forward+backward (x read twice, y written, the output "
        "gradient read, the input gradient written: 5 × tokens × d × 4 bytes) over the time, against the bandwidth of a "
        "large copy measured before and after (both norms are memory-bound). The kernels each one runs (forward and backward apart) are read from torch's profiler: the computing aten ops "
        "that call no other computing op, which shows whether one fused kernel ran or a composite of elementwise ones. "
        "(2) Whole training step (forward, loss, backward, AdamW) of the character LM with each of the four norms (and the "
        "built-in LayerNorm step again, A/A), interleaved; the norms' share of the step estimated as (2L+1) × the norm-alone "
        "time at the model's shape over the step time. Timing comparisons are log t_RMS − log t_LN paired over rounds (the "
        "log of the time ratio), reported as the ratio LN/RMS or the saving 1 − t_RMS/t_LN with 95% CIs. (3) Final validation "
        "loss of the character LM (Shakespeare) trained with LayerNorm vs RMSNorm over seeds, paired by seed, with the "
        "learned-at-all guard and a null pair (LayerNorm rerun at seeds s + 1000)."
    )
    rule = (
        "Like with like: the algorithm is judged by eager formulas against eager formulas and by fused (torch.compile) "
        "against fused; PyTorch's built-in functions are compared too, but as a finding about its kernels on the device "
        "(on the CPU, torch 2.13's RMSNorm is composite where its LayerNorm is one fused kernel), not counted in the verdict. "
        "Timing: each cell compares log t_RMS − log t_LN (the log of the time ratio), paired over interleaved rounds "
        "(paired t-test), Holm-corrected across the cells (widths, or model sizes) of a sub-verdict, beside an A/A noise "
        "floor (the built-in LayerNorm callable timed twice in the same interleaved call). Norm alone, per family (built-in, "
        "eager, fused), each its own sub-verdict: the verdict ladder with "
        "'RMSNorm faster' claimed at every width: supported if RMSNorm is significantly faster at every width, refuted if "
        "LayerNorm is significantly faster at every width, mixed if each holds at some width, otherwise inconclusive. Whole "
        "step: the same ladder over model sizes, built-in and eager apart. Quality: final validation loss "
        f"RMS − LN paired over seeds, declared margin ±{QUALITY_MARGIN} nats/char; a run learned iff its final validation "
        f"loss is at least {LEARN_MARGIN} nats below the unigram cross-entropy (a comparison where neither arm learned in "
        "any seed is excluded); supported if TOST shows equivalence within the margin or RMSNorm is significantly lower, "
        "refuted if LayerNorm is significantly lower without equivalence, otherwise inconclusive (minimum detectable effect "
        "stated); the null pair (LayerNorm at seeds s + 1000) is shown beside it. Overall (the claim is a conjunction: "
        "cheaper and as good): speed = norm alone eager, norm alone fused and whole step eager combined (all supported → "
        "supported, all refuted → refuted, supported beside refuted or any mixed → mixed, otherwise inconclusive); refuted if speed or quality is "
        "refuted, else mixed if either is mixed, supported if both are supported, otherwise inconclusive."
    )
    profiles = {
        # quick leaves out the fused family: compiling takes longer than the whole quick profile may
        "quick": train_profile("quick", widths=[64, 128], tokens=256, repeats=2, fused=False, bw_bytes=1 << 22, step_models=[[32, 1, 2]], step_batch=4, step_seq=16, step_repeats=2, threads=1),
        # quality: 8 seeds, 800 steps (the 180-step recipe's seed spread, ±0.48 nats, could not show ±0.05)
        "default": train_profile("default", widths=[64, 128, 256, 512, 1024, 2048], tokens=4096, repeats=20, fused=True, bw_bytes=1 << 27, step_models=[[64, 2, 4], [256, 4, 8]], step_batch=8, step_seq=64, step_repeats=20, threads=1,
                                 steps=800, eval_every=200, eval_batches=16, seeds=[0, 1, 2, 3, 4, 5, 6, 7]),
        "full": train_profile("full", widths=[64, 256, 1024, 4096, 8192], tokens=16384, repeats=50, fused=True, bw_bytes=1 << 30, step_models=[[256, 4, 8], [1024, 12, 16]], step_batch=32, step_seq=256, step_repeats=30, threads=0,
                              seeds=[0, 1, 2, 3, 4, 5, 6, 7]),
    }  # fmt: skip
    parts = (
        Part("norm_alone", norm_alone_grid, norm_alone),
        Part("step", step_grid, step_timing),
        Part("train", train_grid, train_norm),
    )

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        micro = self.runs_of(runs, "norm_alone")[0]["metrics"]
        steps = sorted(
            self.runs_of(runs, "step"), key=lambda r: (r["config"]["d_model"], r["config"]["n_layers"])
        )
        train = self.runs_of(runs, "train")

        # timing: one family per (place, implementation family), Holm across its cells; A/A beside each cell
        fam_cmps: dict[str, list[ev.Comparison]] = {}
        floors: list[ev.Comparison] = []
        cells = [("alone", f"d{r['d']}", r) for r in micro["rows"]]
        cells += [
            ("step", f"d{r['config']['d_model']}-L{r['config']['n_layers']}", r["metrics"]["step"])
            for r in steps
        ]
        impls = micro.get("impls", list(IMPLS))
        fams = {
            "alone": [f for f, pair in FAMILIES.items() if set(pair) <= set(impls)],
            "step": ["built-in", "eager"],
        }
        for place, cell, t in cells:
            aa = timing_pair(f"aa:{place}-{cell}", t, "layer", AA, metric=f"log time, {place} (A/A)",
                             sub_claim="noise floor (A/A timing)")  # fmt: skip
            floors.append(aa)
            for fam in fams[place]:
                ln, rms = FAMILIES[fam]
                key = f"{place} {fam}"
                c = timing_pair(
                    f"{place}-{fam}:{cell}",
                    t,
                    ln,
                    rms,
                    metric=f"log time, {place} ({fam})",
                    sub_claim=SUB[key],
                )
                fam_cmps.setdefault(key, []).append(replace(c, noise=ev.noise_bound(aa)))
        fam_cmps = {k: ev.holm(v) for k, v in fam_cmps.items()}
        lads = {k: ev.ladder(v, "b_better", require="all") for k, v in fam_cmps.items()}

        # quality: final val loss, paired by seed, learned guard, null pair
        seeds = set(p["seeds"])
        val = lambda m: m["final_val"]  # noqa: E731
        learn = lambda m: ev.learned(m["final_val"], m["unigram_xent"], LEARN_MARGIN)  # noqa: E731
        arm = lambda n: lambda c: c["norm"] == n and c["seed"] in seeds  # noqa: E731
        null = lambda c: c["norm"] == "layer" and c["seed"] - NULL_OFFSET in seeds  # noqa: E731
        metric = "final validation loss (nats/char)"
        floor = ev.noise_floor("null:layernorm-seed-offset", ev.seed_values(train, arm("layer"), val),
                               ev.seed_values(train, null, val), seed_offset=NULL_OFFSET, metric=metric,
                               arm="LayerNorm", margin=QUALITY_MARGIN)  # fmt: skip
        q = ev.paired(
            "quality:rms-vs-ln", ev.seed_values(train, arm("layer"), val), ev.seed_values(train, arm("rms"), val),
            metric=metric, better="lower", sub_claim=SUB["quality"], arm_a="LayerNorm", arm_b="RMSNorm",
            margin=QUALITY_MARGIN, learned_a=ev.seed_values(train, arm("layer"), learn),
            learned_b=ev.seed_values(train, arm("rms"), learn),
        )  # fmt: skip
        (q,) = ev.with_noise([q], [floor])
        qual_v, qual_detail = quality_verdict(q)

        mdf, sdf = self.timing_tables(micro, steps, fam_cmps, fams["alone"], p, out)
        kdf = self.describe_kernels(micro)
        out.table("kernels", kdf, f"Which aten kernels run (torch profiler, width {micro['kernel_width']}): computing ops that call no other computing op; allocation, view and copy ops left out")  # fmt: skip
        tdf = pd.DataFrame(
            [{"norm": r["config"]["norm"], "seed": r["config"]["seed"], "null pair": r["config"]["seed"] not in seeds,
              "final val": r["metrics"]["final_val"], "unigram": r["metrics"]["unigram_xent"],
              "learned": bool(learn(r["metrics"])), "steps/s": r["metrics"]["steps_per_s"]} for r in train]
        ).sort_values(["null pair", "norm", "seed"])  # fmt: skip
        out.table("training", tdf, f"Training runs: final validation loss (nats/char); learned = at least {LEARN_MARGIN} below the unigram cross-entropy; null pair = LayerNorm at seed + {NULL_OFFSET}")  # fmt: skip
        self.plot_micro(mdf, out)
        self.plot_step_and_training(sdf, [r for r in train if r["config"]["seed"] in seeds], out)

        speed_v = ev.combine([lads[k].verdict for k in ALGORITHM if k in lads])
        verdict = conjunction([speed_v, qual_v])

        def detail(key, unit_fn):
            cs = fam_cmps[key]
            return lads[key].detail + ". " + "; ".join(unit_fn(c) for c in cs)

        subs = [
            SubVerdict(SUB[k], lads[k].verdict, detail(k, ratio_text if k.startswith("alone") else saving_text), [c.id for c in fam_cmps[k]])
            for k in ("alone eager", "alone fused", "step eager", "alone built-in", "step built-in") if k in lads
        ]  # fmt: skip
        subs.append(SubVerdict(SUB["quality"], qual_v, "RMS − LN final val: " + qual_detail, [q.id]))
        all_cmps = [c for k in fam_cmps for c in fam_cmps[k]] + [q]
        rng = lambda s: f"{s.min():.2f}–{s.max():.2f}×"  # noqa: E731
        step_txt = lambda fam: "; ".join(  # noqa: E731
            f"d={int(r['d_model'])}, {int(r['layers'])} layers: {r[f'{fam} saving']:+.1%} [{r[f'{fam} saving lo']:+.1%}, {r[f'{fam} saving hi']:+.1%}]"
            for _, r in sdf.iterrows()
        )  # fmt: skip
        kern_txt = "; ".join(
            f"{r['implementation'].split(',')[0]}: forward {r['forward: kernels run']}, backward {r['backward: kernels run']} kernels"
            for _, r in kdf.head(2).iterrows()
        )  # fmt: skip
        fused = "fused" in fams["alone"]
        fused_txt = f", fused by torch.compile {rng(mdf['LN/RMS fused'])}" if fused else ""
        bw = np.mean(micro["copy_bw"]) if micro.get("copy_bw") else None

        def share(norm, rows):  # the best implementation's share of the copy bandwidth, per row
            return mdf.loc[rows, [c for c in mdf if c.endswith(f"{norm} % of copy bandwidth")]].max(axis=1)

        bw_txt = (
            f" Measured as compulsory bytes per second, the fastest LayerNorm reaches at most {share('LN', mdf.index).max():.0f}% and the "
            f"fastest RMSNorm {share('RMS', mdf.index).max():.0f}% of a large copy's bandwidth ({bw / 1e9:.1f} GB/s, one thread), "
            f"{share('LN', mdf.index[-1:]).iloc[0]:.0f}% and {share('RMS', mdf.index[-1:]).iloc[0]:.0f}% at d = {int(mdf['width d'].iloc[-1])}."
            if bw else ""
        )  # fmt: skip
        return Verdict(
            verdict=verdict,
            summary=(
                f"Like with like, LayerNorm/RMSNorm time alone is {rng(mdf['LN/RMS eager'])} in eager ops{fused_txt} (>1: RMSNorm faster); "
                f"the whole training step with eager norms saves {step_txt('eager')}.{bw_txt} PyTorch's built-in functions on this device "
                f"give {rng(mdf['LN/RMS built-in'])} ({kern_txt}) and a step saving of {step_txt('built-in')}: a finding about its kernels, "
                f"not counted. Validation loss: {q.text(' nats')}."
            ),
            key_number=f"norm alone LN/RMS eager {rng(mdf['LN/RMS eager'])}"
            + (f", fused {rng(mdf['LN/RMS fused'])}" if fused else "")
            + f"; step saving (eager) {', '.join(f'{s:+.1%}' for s in sdf['eager saving'])}; built-in (PyTorch kernels) {rng(mdf['LN/RMS built-in'])}"
            + (f"; val Δ {q.diff:+.3f}" if q.diff is not None else ""),
            evidence={
                **{
                    f"norm_alone_{k.split()[1].replace('-', '')}": lads[k].verdict
                    for k in lads
                    if k.startswith("alone")
                },
                "step": lads["step built-in"].verdict,
                "step_eager": lads["step eager"].verdict,
                "speed": speed_v,
                "speed_from": [k for k in ALGORITHM if k in lads],
                "quality": qual_v,
                "quality_margin": QUALITY_MARGIN,
                "learn_margin": LEARN_MARGIN,
                "copy_bandwidth": bw,
                "step_savings": sdf[
                    ["d_model", "eager saving", "eager saving lo", "eager saving hi", "built-in saving"]
                ].to_dict("records"),
            },  # fmt: skip
            sub_verdicts=subs,
            caveats=[
                f"CPU timings (torch {torch.__version__}, {micro['threads']} intra-op thread(s) for timing, to keep a busy neighbouring process from stalling a thread barrier). Which kernels run depends on the PyTorch version and device (see the kernel table): this compares these implementations, not the two algorithms' lower bounds; on a GPU both norms are memory-bound and the share of a step spent in them differs.",
                "Timing comparisons pair the rounds of one interleaved call and treat rounds as independent; rounds taken seconds apart share slow drifts of the machine's load, which the A/A pair beside each cell measures.",
                f"Small models (d_model {p['d_model']}, {p['n_layers']} layers, {p['steps']} steps, {len(p['seeds'])} seeds) for the quality comparison; the anchors trained to convergence. Equivalence within ±{QUALITY_MARGIN} nats is what this setup can show; no positive control checks that it would detect a quality difference of that size.",
                "The fused family compiles the eager formulas with torch.compile (inductor); the whole step is timed with the built-in and eager norms only (compiling a whole training step measures the compiler's fusion of everything else too)."
                if fused
                else "This profile leaves out the fused (torch.compile) family.",
                "Timings were taken interleaved to spread background load over all variants; absolute times vary with the machine's load, the ratios less.",
            ],
            comparisons=all_cmps,
            noise_floor=floors + [floor],
        )

    def timing_tables(self, micro, steps, fam_cmps, alone_fams, p, out):
        by_id = {c.id: c for cs in fam_cmps.values() for c in cs}
        impls = micro.get("impls", list(IMPLS))
        bw = np.mean(micro["copy_bw"]) if micro.get("copy_bw") else None
        rows = []
        for r in micro["rows"]:
            row = {
                "width d": r["d"],
                "tokens": p["tokens"],
                **{f"{k} (µs)": r[k]["median"] * 1e6 for k in impls},
            }
            if bw and r.get("bytes"):  # achieved bytes/s over the copy bandwidth, per implementation
                for fam in alone_fams:
                    for norm, k in zip(("LN", "RMS"), FAMILIES[fam]):
                        row[f"{fam} {norm} % of copy bandwidth"] = 100 * r["bytes"] / r[k]["median"] / bw
            for fam in alone_fams:
                row[f"LN/RMS {fam}"], row[f"LN/RMS {fam} lo"], row[f"LN/RMS {fam} hi"] = ratio_ci(
                    by_id[f"alone-{fam}:d{r['d']}"]
                )
            row["eager/built-in LN"] = r["eager_layer"]["median"] / r["layer"]["median"]
            row["eager/built-in RMS"] = r["eager_rms"]["median"] / r["rms"]["median"]
            row["A/A LN/LN"] = r["layer"]["median"] / r[AA]["median"]
            rows.append(row)
        mdf = pd.DataFrame(rows)
        out.table("norm_alone", mdf, f"Norm alone: median forward+backward time over {p['repeats']} interleaved rounds ({micro['threads']} intra-op thread(s)); LN/RMS = exp of the mean paired log ratio over rounds, with 95% CI; % of copy bandwidth = compulsory bytes (5 × tokens × d × 4) per second over a large copy's bytes per second" + (f" ({bw / 1e9:.1f} GB/s)" if bw else "") + "; A/A: the built-in LayerNorm timed twice")  # fmt: skip
        srows = []
        for r in steps:
            c, m = r["config"], r["metrics"]
            cell = f"d{c['d_model']}-L{c['n_layers']}"
            row = {"d_model": c["d_model"], "layers": c["n_layers"], "tokens/step": c["batch"] * c["seq_len"]}
            for fam in ("built-in", "eager"):  # the whole step is timed with these two families
                ln, rms = FAMILIES[fam]
                cmp = by_id[f"step-{fam}:{cell}"]
                row[f"{fam} LN step (ms)"] = m["step"][ln]["median"] * 1e3
                row[f"{fam} RMS step (ms)"] = m["step"][rms]["median"] * 1e3
                row[f"{fam} saving"] = 1 - math.exp(cmp.diff)
                row[f"{fam} saving lo"] = 1 - math.exp(cmp.ci_high) if cmp.ci_high is not None else math.nan
                row[f"{fam} saving hi"] = 1 - math.exp(cmp.ci_low) if cmp.ci_low is not None else math.nan
                row[f"{fam} LN share of step"] = (
                    m["n_norms"] * m["norm"][ln]["median"] / m["step"][ln]["median"]
                )
            srows.append(row)
        sdf = pd.DataFrame(srows)
        out.table("step", sdf, "Whole training step: median time, saving 1 − t_RMS/t_LN (from the mean paired log ratio over interleaved rounds) with 95% CI, and the norms' estimated share of the LN step")  # fmt: skip
        return mdf, sdf

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

        have_bw = any(c.endswith("% of copy bandwidth") for c in mdf)
        fig, axes = subplots(3 if have_bw else 2, width=4.6, height=3.6)
        a, b = axes[0], axes[1]
        styles = {
            "layer": ("C0", "-", "o", "LayerNorm, built-in"),
            "rms": ("C1", "-", "o", "RMSNorm, built-in"),
            "eager_layer": ("C0", "--", "s", "LayerNorm, eager"),
            "eager_rms": ("C1", "--", "s", "RMSNorm, eager"),
            "fused_layer": ("C0", ":", "^", "LayerNorm, fused (compile)"),
            "fused_rms": ("C1", ":", "^", "RMSNorm, fused (compile)"),
        }
        for k, (c, ls, mk, lab) in styles.items():
            if f"{k} (µs)" in mdf:
                a.loglog(mdf["width d"], mdf[f"{k} (µs)"], marker=mk, ms=3.5, color=c, ls=ls, label=lab)
        a.set_xlabel("width d (features per token)")
        a.set_ylabel("forward+backward time (µs)")
        a.set_title(f"Norm alone, {int(mdf['tokens'].iloc[0])} tokens")
        a.legend(fontsize=7)
        for fam, (mk, ls, lab) in {"built-in": ("o", "-", "built-in (PyTorch kernels)"), "eager": ("s", "--", "eager formulas"), "fused": ("^", ":", "fused by torch.compile")}.items():  # fmt: skip
            if f"LN/RMS {fam}" in mdf:
                r, lo, hi = mdf[f"LN/RMS {fam}"], mdf[f"LN/RMS {fam} lo"], mdf[f"LN/RMS {fam} hi"]
                b.errorbar(mdf["width d"], r, yerr=[r - lo, hi - r], marker=mk, ls=ls, capsize=2, label=lab)
        b.set_xscale("log")
        b.axhline(1, color="k", lw=0.8)
        b.set_xlabel("width d (features per token)")
        b.set_ylabel("t_LayerNorm / t_RMSNorm (ratio)")
        b.set_title("Speed-up of RMSNorm (>1: faster), 95% CI")
        b.legend(fontsize=7.5)
        log_ticks(a, mdf["width d"])
        log_ticks(b, mdf["width d"])
        if have_bw:
            c = axes[2]
            for k, (col, ls, mk, lab) in styles.items():
                fam = {"layer": "built-in", "rms": "built-in"}.get(k, k.split("_")[0])
                key = f"{fam} {'LN' if 'layer' in k else 'RMS'} % of copy bandwidth"
                if key in mdf:
                    c.semilogx(mdf["width d"], mdf[key], marker=mk, ms=3.5, color=col, ls=ls, label=lab)
            c.axhline(100, color="k", lw=0.8, ls="--")
            c.set_xlabel("width d (features per token)")
            c.set_ylabel("achieved bandwidth (% of a large copy's)")
            c.set_title("Compulsory bytes per second")
            c.set_ylim(0, 110)
            c.legend(fontsize=6.5, loc="center right")
            log_ticks(c, mdf["width d"])
        out.figure(
            "norm-alone",
            fig,
            "Forward+backward time of LayerNorm and RMSNorm alone vs width: PyTorch's built-in functions (solid), the standard formulas in eager ops (dashed) and those formulas fused by torch.compile (dotted), medians of interleaved rounds; middle: the LN/RMS time ratio per family with its 95% CI over rounds; right: compulsory bytes (5 × tokens × d × 4) per second as a share of a large copy's bandwidth.",
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
