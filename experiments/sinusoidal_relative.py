"""`sinusoidal_relative`: PE(pos + k) is a fixed linear map (a rotation) of PE(pos)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from tfclaims.evidence import exact_check, holm, learned, noise_floor, paired, seed_values, with_noise
from tfclaims.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.pe_probes import identity_run, learned_run
from tfclaims.relative_pe import offset_dot
from tfclaims.small_lm import run_fields, train_profile

TOL = 1e-6  # "float precision": about 8 float32 ulps of 1 (table entries are rounded to float32)
NULL_OFFSET = 1000  # the null pair: the learned-position run again at seeds s + 1000
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned at all
CONVERGE_MARGIN = 0.02  # converged: offset R² changed by less than ±0.02 over the last probe interval (TOST)
R2_SHARE, R2_LACK = 0.9, 0.5  # pre-declared thresholds on the trained table's offset R²
RES_SHARE, RES_LACK = 0.05, 0.2  # ... and on its k = 1 shift residual
SUB_IDENT = "PE(p+k) = M_k·PE(p), M_k independent of p"
SUB_DOT = "PE(p)·PE(p+k) depends only on k"
SUB_LEARNED = "Learned absolute embeddings share the property (comparison)"
R2, RES1 = "offset R² of the trained table", "k=1 shift residual of the trained table"


def identity_grid(p: dict) -> list[dict]:
    return [{"d_models": p["d_models"], "max_len": p["max_len"], "offsets": p["offsets"]}]


def learned_grid(p: dict) -> list[dict]:
    return [{**run_fields(p), "seq_len": p["pe_len"], "seed": s} for s in p["seeds"]]


def null_grid(p: dict) -> list[dict]:
    return [{**run_fields(p), "seq_len": p["pe_len"], "seed": s + NULL_OFFSET} for s in p["seeds"]]


def tolerance_check(id: str, observed: float, sub_claim: str, metric: str, note: str):
    """observed (a largest error) against 0 within TOL."""
    c = exact_check(
        id, observed <= TOL, sub_claim=sub_claim, metric=metric, observed=observed, expected=0.0, note=note
    )
    return replace(c, margin=TOL)


def _res1(st: dict):
    r = st["shift_residual"]
    return r.get("1", r.get(1))


class SinusoidalRelative(Experiment):
    claim_id = "sinusoidal_relative"
    title = "Sinusoidal PE(pos+k) is a fixed linear function of PE(pos)"
    order = 12
    statement = (
        "With sinusoidal position encodings, the encoding of position pos + k is a linear map of the encoding of pos, "
        "and the map (a block-diagonal rotation by k·ω_i on each sine/cosine pair) depends on the offset k only; so dot "
        "products between encodings depend only on the distance, which is meant to make relative positions easy to use."
    )
    notes_say = "PE(pos+k) can be computed linearly from PE(pos) by the angle-addition formulas"
    anchors = [
        "Vaswani et al. 2017 §3.5: sinusoids chosen because for any fixed offset k, PE(pos+k) can be represented as a linear function of PE(pos); this may let the model attend by relative position.",
        "Vaswani et al. 2017 Table 3 row (E): learned positional embeddings instead of sinusoids give nearly identical results (25.7 vs 25.8 dev BLEU, 4.92 PPL both).",
    ]
    anchor_number = "Learned vs sinusoidal: 25.7 vs 25.8 BLEU (Vaswani et al. Table 3)"
    method = (
        "Part `identity`, on `tfclaims.positions.sinusoidal_table` (float32 entries): build M_k from the angle-addition "
        "formulas and measure max |M_k·PE(p) − PE(p+k)| over every position p and offsets k, in float32 and in float64 "
        "arithmetic, at two widths; check that M_k is orthogonal and that M_k·M_1 = M_(k+1); and the dot products "
        "PE(p)·PE(p+k): their spread over p for each k, against the closed form Σ_i cos(k·ω_i). Part `learned`: train "
        "the character LM with learned absolute positions over more positions than its width (so a linear shift map is "
        "over-determined) and ask the same two questions of the learned table at every evaluation: the share of the "
        "variance of the Gram matrix PE(p)·PE(q) explained by the offset q − p alone (R², 1 for sinusoids), and the "
        "relative residual of the best single linear map taking every PE(p) to PE(p+1) (least squares; 0 for sinusoids). "
        "Part `null`: the same run at seeds s + 1000, the noise floor of both measures."
    )
    rule = (
        "Identity (the verdict): tolerance checks, one per width: (a) max over offsets of max |M_k·PE(p) − PE(p+k)| in "
        "float32 and float64 arithmetic, and M_k's departure from orthogonality and from M_k·M_1 = M_(k+1), each ≤ 1e-6; "
        "(b) the spread over p of PE(p)·PE(p+k) and its largest departure from Σ cos(k·ω_i), relative to d/2, ≤ 1e-6. "
        "Supported if every check passes, refuted otherwise. Learned embeddings (a sub-verdict beside the verdict, not "
        "part of it): a run learned iff its final validation loss is ≥ 0.10 nats below the unigram cross-entropy; "
        "seeds that did not learn are left out, and with none the comparisons are excluded. Converged (declared before "
        "running) iff the offset R² at the last probe equals the one before within ±0.02, shown by a paired TOST over "
        "seeds (the TOST alone decides: a significant change within ±0.02 still counts as converged); if not shown, the sub-verdict is inconclusive (the table may still be acquiring or losing the "
        "structure). If converged: the trained table's offset R² and k = 1 residual are tested against the declared "
        "thresholds over seeds (paired t of each seed's value against the constant; Holm over the four tests): shares "
        "the property (supported) if R² is significantly above 0.9 and the residual significantly below 0.05; lacks it "
        "(refuted) if R² is significantly below 0.5 or the residual significantly above 0.2; otherwise inconclusive. "
        "The null pair (seeds + 1000) gives the noise floor of both measures."
    )
    profiles = {
        "quick": train_profile("quick", d_models=[16, 64], max_len=256, offsets=[1, 3, 50], pe_len=48),
        "default": train_profile("default", d_models=[64, 512], max_len=2048, offsets=[1, 2, 5, 10, 50, 100, 500, 1000], pe_len=128),
        "full": train_profile("full", d_models=[64, 512, 4096], max_len=8192, offsets=[1, 2, 5, 10, 50, 100, 500, 1000, 4000], pe_len=512),
    }  # fmt: skip
    parts = (
        Part("identity", identity_grid, identity_run),
        Part("learned", learned_grid, learned_run),
        Part("null", null_grid, learned_run),
    )

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        ident = self.runs_of(runs, "identity")[0]["metrics"]
        idf = pd.DataFrame(ident["rows"])
        idf["dot_spread/(d/2)"] = idf["dot_spread"] / (idf["d"] / 2)
        idf["dot_closed_err/(d/2)"] = idf["dot_closed_err"] / (idf["d"] / 2)
        cols = {
            "d": "d_model", "k": "offset k", "err32": "max|M_k PE(p) − PE(p+k)| f32", "err64": "same, f64",
            "orth_err": "max|M_kᵀM_k − I|", "compose_err": "max|M_k M_1 − M_(k+1)|", "dot_mean": "PE(p)·PE(p+k)",
            "dot_closed": "Σ cos(kω_i)", "dot_spread/(d/2)": "dot_spread/(d/2)", "dot_closed_err/(d/2)": "dot_closed_err/(d/2)",
        }  # fmt: skip
        out.table(
            "identity",
            idf.rename(columns=cols)[list(cols.values())],
            f"The shift identity over all {p['max_len']} positions (sinusoidal_table, float32 entries)",
            floatfmt=".3g",
        )
        ident_checks, dot_checks = [], []
        for d, g in idf.groupby("d"):
            e32, e64 = float(g["err32"].max()), float(g["err64"].max())
            orth, comp = float(g["orth_err"].max()), float(g["compose_err"].max())
            ident_checks.append(
                tolerance_check(
                    f"identity:d{d}", max(e32, e64, orth, comp), SUB_IDENT,
                    "max |M_k PE(p) − PE(p+k)| (f32, f64), |M_kᵀM_k − I|, |M_k M_1 − M_(k+1)|",
                    f"d = {d}, k ∈ {g['k'].tolist()}: f32 {e32:.2g}, f64 {e64:.2g}, orthogonality {orth:.1g}, "
                    f"composition {comp:.1g} (tolerance {TOL:g})",
                )
            )  # fmt: skip
            spread, closed = float(g["dot_spread/(d/2)"].max()), float(g["dot_closed_err/(d/2)"].max())
            dot_checks.append(
                tolerance_check(
                    f"dots:d{d}", max(spread, closed), SUB_DOT,
                    "max over k of the spread over p of PE(p)·PE(p+k) and its departure from Σ cos(kω_i), / (d/2)",
                    f"d = {d}: spread {spread:.2g}, departure from closed form {closed:.2g} (tolerance {TOL:g})",
                )
            )  # fmt: skip
        ok_ident = all(c.decision == "equivalent" for c in ident_checks)
        ok_dot = all(c.decision == "equivalent" for c in dot_checks)
        verdict = "supported" if ok_ident and ok_dot else "refuted"

        learned_runs, null_runs = self.runs_of(runs, "learned"), self.runs_of(runs, "null")
        lsum = self.learned_table(learned_runs, p, out)
        lsub, lcmps, floors = self.learned_verdict(learned_runs, null_runs)

        self.plot_identity(idf, ident, out)
        if learned_runs:
            self.plot_learned(learned_runs, p, out)

        err = max(idf["err32"].max(), idf["err64"].max())
        tr = lsum.set_index("table").loc["trained"] if len(lsum) and "trained" in set(lsum["table"]) else None
        subs = [
            SubVerdict(
                SUB_IDENT,
                "supported" if ok_ident else "refuted",
                f"max error {idf['err32'].max():.2g} (float32), {idf['err64'].max():.2g} (float64) over d ∈ {sorted(idf['d'].unique().tolist())}, k ≤ {idf['k'].max()}; M_k orthogonal to {idf['orth_err'].max():.1g} (tolerance {TOL:g})",
                [c.id for c in ident_checks],
            ),
            SubVerdict(
                SUB_DOT,
                "supported" if ok_dot else "refuted",
                f"spread over p ≤ {idf['dot_spread/(d/2)'].max():.2g} of d/2; matches Σ cos(kω_i) to {idf['dot_closed_err/(d/2)'].max():.2g} (tolerance {TOL:g})",
                [c.id for c in dot_checks],
            ),
            lsub,
        ]
        return Verdict(
            verdict=verdict,
            summary=(
                f"The rotation M_k reproduces PE(p+k) from PE(p) at every position to {err:.1g} (float32 table entries), and "
                f"PE(p)·PE(p+k) is the same for every p up to {idf['dot_spread/(d/2)'].max():.1g}·d/2, equal to Σ cos(kω_i). "
                f"Learned absolute embeddings trained on this task: {lsub.verdict} ({lsub.detail.split(';')[0]})."
            ),
            key_number=f"max |M_k PE(p) − PE(p+k)| = {err:.1g}"
            + (
                ""
                if tr is None
                else f"; learned: offset R² {tr['offset R²']:.2f}"
                if pd.notna(tr["offset R²"])
                else "; learned: no finite offset R² (the runs diverged)"
            ),
            evidence={
                "tolerance": TOL,
                "max_err32": float(idf["err32"].max()),
                "max_err64": float(idf["err64"].max()),
                "dot_ok": ok_dot,
                "learned": lsum.to_dict("records"),
                "learned_subverdict": lsub.verdict,
            },
            sub_verdicts=subs,
            caveats=[
                "The identity is exact mathematics; the measurement checks the library's table and the construction of M_k, limited by the float32 rounding of the table's entries. Its checks are deterministic (no seeds, no noise floor); the noise floor applies only to the learned-table measures.",
                "Linearity of PE(p+k) in PE(p) does not by itself show that a model uses relative positions; after the token embedding is added and the sum is projected, attention sees (x+PE(p))ᵀW_qᵀW_k(y+PE(q)), where the relative term is one of four.",
                f"The learned embeddings come from a small character LM ({p['steps']} steps, {p['pe_len']} positions, d = {p['d_model']}); the learning-rate schedule decays to zero, so a table that stops changing at the end may be frozen rather than converged; larger models trained longer may learn smoother tables.",
            ],
            comparisons=[*ident_checks, *dot_checks, *lcmps],
            noise_floor=floors,
        )

    def learned_table(self, learned_runs, p, out):
        lrows = []
        for r in learned_runs:
            m = r["metrics"]
            for when, st in (("init", m["probes"][0]), ("trained", m["final_table"]), ("sinusoidal (same T, d)", m["sinusoidal_table"])):  # fmt: skip
                lrows.append(
                    {"table": when, "seed": r["config"]["seed"], "offset R²": st["toeplitz_r2"]}
                    | {f"shift residual k={k}": v for k, v in st["shift_residual"].items()}
                )
        if not lrows:
            return pd.DataFrame(columns=["table"])
        lsum = pd.DataFrame(lrows).drop(columns="seed").groupby("table", sort=False).mean().reset_index()
        out.table(
            "learned",
            lsum,
            f"Relative structure of position tables (T = {p['pe_len']} positions, d = {p['d_model']}; mean over {len(learned_runs)} seeds)",
            floatfmt=".3g",
        )
        return lsum

    def learned_verdict(self, learned_runs, null_runs):
        """The learned-table sub-verdict: guard, convergence gate (TOST), then the thresholds (Holm)."""

        def vals(rs, f):
            return seed_values(rs, lambda c: True, f)

        flags = vals(learned_runs, lambda m: learned(m["final_val"], m["unigram_xent"], LEARN_MARGIN))
        ok = {s for s, v in flags.items() if v}

        def only_learned(d):
            return {s: v for s, v in d.items() if s in ok} if ok else d

        has_res = all(_res1(r["metrics"]["final_table"]) is not None for r in learned_runs)
        r2 = vals(learned_runs, lambda m: m["final_table"]["toeplitz_r2"])
        res = vals(learned_runs, lambda m: _res1(m["final_table"])) if has_res else {}
        r2_prev = vals(
            learned_runs, lambda m: m["probes"][-2]["toeplitz_r2"] if len(m["probes"]) > 1 else None
        )
        kw = dict(sub_claim=SUB_LEARNED, learned_a=flags, learned_b=flags)
        conv = paired(
            "learned:converged", only_learned(r2_prev), only_learned(r2), metric="offset R², last probe vs the one before",
            better="higher", arm_a="previous probe", arm_b="last probe", margin=CONVERGE_MARGIN, **kw,
        )  # fmt: skip
        tests = [(R2, r2, R2_SHARE, "higher"), (R2, r2, R2_LACK, "higher")]
        if has_res:
            tests += [(RES1, res, RES_SHARE, "lower"), (RES1, res, RES_LACK, "lower")]
        cmps = holm(
            [
                paired(
                    f"learned:{'R2' if metric == R2 else 'res1'}-vs-{thr:g}",
                    {s: thr for s in only_learned(x)},
                    only_learned(x),
                    metric=metric,
                    better=better,
                    arm_a=f"threshold {thr:g}",
                    arm_b="trained table",
                    **kw,
                )  # fmt: skip
                for metric, x, thr, better in tests
            ]
        )
        floors = []
        if null_runs:
            for metric, f in (
                (R2, lambda m: m["final_table"]["toeplitz_r2"]),
                (RES1, lambda m: _res1(m["final_table"])),
            ):
                if metric == RES1 and not has_res:
                    continue
                floors.append(
                    noise_floor(f"null:{'R2' if metric == R2 else 'res1'}", vals(learned_runs, f), vals(null_runs, f),
                                seed_offset=NULL_OFFSET, metric=metric, arm="learned positions",
                                better="higher" if metric == R2 else "lower")
                )  # fmt: skip
        cmps = with_noise(cmps, floors)
        # the gate is the TOST alone: a rise that is significant but within the margin still counts as converged
        converged = conv.p_equiv is not None and conv.p_equiv <= conv.alpha
        by = {c.id: c for c in cmps}
        share = [by[i] for i in (f"learned:R2-vs-{R2_SHARE:g}", f"learned:res1-vs-{RES_SHARE:g}") if i in by]
        lack = [by[i] for i in (f"learned:R2-vs-{R2_LACK:g}", f"learned:res1-vs-{RES_LACK:g}") if i in by]
        if not learned_runs:
            verdict, why = "inconclusive", "no learned-position run"
        elif conv.excluded or all(c.excluded for c in cmps):
            verdict, why = "inconclusive", "no run learned (final loss not 0.10 nats below unigram): excluded"
        elif not converged:
            verdict = "inconclusive"
            why = (
                f"not shown converged (R² over the last probe interval must stay within ±{CONVERGE_MARGIN:g})"
            )
        elif has_res and all(c.decision == "b_better" for c in share):
            verdict, why = "supported", "R² above 0.9 and k=1 residual below 0.05"
        elif any(c.decision == "a_better" for c in lack):
            verdict, why = "refuted", "R² significantly below 0.5 or k=1 residual significantly above 0.2"
        else:
            verdict, why = "inconclusive", "between the thresholds, or not significant"

        def mean_of(d):
            x = [v for v in only_learned(d).values() if v is not None and np.isfinite(v)]
            return f"{np.mean(x):.2f}" if x else "— (no finite value: the runs diverged)"

        detail = f"{why}: trained R² {mean_of(r2)}, k=1 residual {mean_of(res)} (mean over {len(ok)}/{len(flags)} learned seeds)"
        if ok:
            detail += (
                f"; convergence {'shown' if converged else 'not shown'} (TOST p = "
                f"{'—' if conv.p_equiv is None else format(conv.p_equiv, '.2g')}): {conv.text()}; "
                + "; ".join(c.text() for c in cmps)
            )
        return (
            SubVerdict(SUB_LEARNED, verdict, detail, [conv.id, *(c.id for c in cmps)]),
            [conv, *cmps],
            floors,
        )

    def plot_identity(self, idf, ident, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        for d, g in idf.groupby("d"):
            a.loglog(g["k"], g["err32"].clip(lower=1e-17), "o-", label=f"float32, d={d}")
            a.loglog(g["k"], g["err64"].clip(lower=1e-17), "s--", label=f"float64, d={d}")
        a.axhline(TOL, color="k", ls=":", lw=0.8, label="tolerance 1e-6")
        a.set_xlabel("offset k")
        a.set_ylabel("max over p of |M_k PE(p) − PE(p+k)|")
        a.set_title("Shift identity over all positions")
        a.legend(fontsize=7)
        ks = ident["curve_ks"]
        for start, ys in ident["curves"].items():
            b.plot(ks, ys, lw=1.2, label=f"p = {start}")
        b.plot(ks, offset_dot(torch.tensor(ks), ident["curve_d"]).numpy(), "k:", lw=1.5, label="Σ cos(kω_i)")
        b.set_xlabel("offset k")
        b.set_ylabel("PE(p)·PE(p+k)")
        b.set_title(f"Dot product vs offset, d = {ident['curve_d']} (curves overlap)")
        b.legend(fontsize=7)
        out.figure(
            "identity",
            fig,
            "Left: the largest error of PE(p+k) = M_k·PE(p) over every position, per offset, in float32 and float64 arithmetic (the table's entries are float32). Right: PE(p)·PE(p+k) against k from several starting positions p, which coincide with the closed form Σ_i cos(kω_i).",
        )

    def plot_learned(self, learned_runs, p, out):
        from tfclaims.plotting import subplots

        m = learned_runs[0]["metrics"]
        fig, (a, b, c) = subplots(3, width=3.9, height=3.5)
        T = len(m["norms"])
        ext = [0, T, T, 0]
        for ax, key, title in (
            (a, "gram_sinusoidal", "sinusoidal"),
            (b, "gram_learned", "learned, after training"),
        ):
            im = ax.imshow(np.array(m[key]), cmap="RdBu_r", vmin=-1, vmax=1, extent=ext)
            ax.set_xlabel("position q")
            ax.set_ylabel("position p")
            ax.set_title(f"cos(PE(p), PE(q)): {title}")
            ax.grid(False)
        fig.colorbar(im, ax=b, fraction=0.046)
        for i, r in enumerate(learned_runs):
            mm = r["metrics"]
            c.plot(mm["eval_steps"], [pr["toeplitz_r2"] for pr in mm["probes"]], "o-", ms=3, color="C0",
                   label="offset R²" if i == 0 else None)  # fmt: skip
            c.plot(mm["eval_steps"], [_res1(pr) for pr in mm["probes"]], "s--", ms=3, color="C1",
                   label="k=1 shift residual" if i == 0 else None)  # fmt: skip
        c.axhline(1, color="C0", lw=0.6, ls=":")
        c.axhline(0, color="C1", lw=0.6, ls=":")
        c.set_xlabel("training step")
        c.set_ylabel("measure (sinusoidal: R² = 1, residual = 0)")
        c.set_title(f"Learned table during training ({len(learned_runs)} seeds)")
        c.legend(fontsize=7)
        out.figure(
            "learned",
            fig,
            f"Cosine similarity between position encodings: sinusoidal (left) and learned absolute embeddings after training (middle, seed {learned_runs[0]['config']['seed']}; {T} positions, d = {p['d_model']}). Right: during training, the share of the learned Gram matrix's variance explained by the offset alone, and the residual of the best linear map PE(p) → PE(p+1); convergence is judged on the last two probes.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(SinusoidalRelative)
