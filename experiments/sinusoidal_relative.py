"""`sinusoidal_relative`: PE(pos + k) is a fixed linear map (a rotation) of PE(pos), which is said to let a model
use relative positions."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd
import torch

from tfclaims.claims.sinusoidal_relative import identity_run, learned_run, length_run, offset_dot
from tfclaims.evidence.decisions import (
    combine,
    exact_check,
    holm,
    ladder,
    learned,
    noise_floor,
    paired,
    seed_values,
    with_noise,
)
from tfclaims.evidence.tables import comparison_table
from tfclaims.harness.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.train.small_lm import run_fields, train_profile

TOL = 1e-6  # "float precision": about 8 float32 ulps of 1 (table entries are rounded to float32)
NULL_OFFSET = 1000  # the null pairs: the learned-table run and the sinusoidal length arm at seeds s + 1000
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned at all
CONVERGE_MARGIN = 0.02  # converged: offset R² changed by less than ±0.02 over the last probe interval (TOST)
R2_SHARE, R2_LACK = 0.9, 0.5  # pre-declared thresholds on the trained table's offset R²
RES_SHARE, RES_LACK = 0.05, 0.2  # ... and on its k = 1 shift residual
EXTRA_MARGIN = 0.05  # nats/char: sinusoidal's loss increase beyond T may exceed RoPE's by this much
LOSS_MARGIN = 0.02  # nats/char: "the same loss" (TOST), at 1× and for a window moved to unseen positions
SHARE_MARGIN = 0.05  # offset-only share: "the same" (TOST, reported beside the decision)
CHECK_TOL = 1e-4  # nats/char (loss) and share units: what "by construction" must reproduce
SUB_IDENT = "PE(p+k) = M_k·PE(p), M_k independent of p"
SUB_DOT = "PE(p)·PE(p+k) depends only on k"
SUB_LEARNED = "Learned absolute embeddings share the property (comparison)"
SUB_SHARE = "Trained with sinusoids, the first layer's position-only attention depends on the offset more than with learned positions"
SUB_EXTRA = f"Beyond the training length the sinusoidal model loses no more than a relative one (RoPE, +{EXTRA_MARGIN:g} nats/char)"
SUB_ANCHOR = f"Reported: at the training length sinusoidal and learned positions give the same loss (±{LOSS_MARGIN:g}; Vaswani Table 3 (E))"
SUB_NOPE = "Reported: {arm} loses less than no position encoding (NoPE) from 1× to longer windows"
SUB_SHIFT = f"Reported: a training-length window moved to positions never trained on keeps the sinusoidal model's loss (±{LOSS_MARGIN:g})"
SUB_CHECKS = "Checks: RoPE's position logits are offset-only, RoPE and NoPE ignore where a window starts (by construction)"
R2, RES1 = "offset R² of the trained table", "k=1 shift residual of the trained table"
ARMS = ("sinusoidal", "learned", "rope", "none")
LABEL = {"sinusoidal": "sinusoidal", "learned": "learned", "rope": "RoPE", "none": "NoPE"}
# evaluation lengths and window starts (× T); token embeddings × √d in every length arm (see the caveats)
LENGTH = {"mults": [1, 2, 4], "shift_mults": [1, 3], "emb_scale": True}
COLOR = {"sinusoidal": "C0", "learned": "C3", "rope": "C2", "none": "C7"}
SHARE = "offset-only share of first-layer position logits"
LOSS1 = "validation loss at 1× (nats/char)"


def increase_metric(n: int) -> str:
    return f"loss increase 1×→{n}× (nats/char)"


def at_kT(k: int) -> str:
    return "T" if k == 1 else f"{k}T"


def shift_metric(k: int) -> str:
    return f"loss change, window moved to start at {at_kT(k)} (nats/char)"


# ---------------------------------------------------------------------------- grids
def identity_grid(p: dict) -> list[dict]:
    return [{"d_models": p["d_models"], "max_len": p["max_len"], "offsets": p["offsets"]}]


def learned_grid(p: dict) -> list[dict]:
    return [{**run_fields(p), "seq_len": p["pe_len"], "seed": s} for s in p["seeds"]]


def null_grid(p: dict) -> list[dict]:
    return [{**run_fields(p), "seq_len": p["pe_len"], "seed": s + NULL_OFFSET} for s in p["seeds"]]


def _length_fields(p: dict) -> dict:
    """The length part's recipe: the small LM's sizes, its own steps and evaluation, token embeddings × √d."""
    keys = ("mults", "shift_mults", "len_eval_batches", "emb_scale")
    return {
        **run_fields(p),
        "steps": p["len_steps"],
        "eval_every": p["len_eval_every"],
        **{k: p[k] for k in keys},
    }


def length_grid(p: dict) -> list[dict]:
    return [{**_length_fields(p), "pos": pos, "seed": s} for pos in ARMS for s in p["seeds"]]


def length_null_grid(p: dict) -> list[dict]:
    return [{**_length_fields(p), "pos": "sinusoidal", "seed": s + NULL_OFFSET} for s in p["seeds"]]


def tolerance_check(id: str, observed: float, sub_claim: str, metric: str, note: str):
    """observed (a largest error) against 0 within TOL."""
    c = exact_check(
        id, observed <= TOL, sub_claim=sub_claim, metric=metric, observed=observed, expected=0.0, note=note
    )
    return replace(c, margin=TOL)


def _res1(st: dict):
    r = st["shift_residual"]
    return r.get("1", r.get(1))


# ---------------------------------------------------------------------------- per-run values (length part)
def did_learn(m: dict) -> bool:
    return learned(m.get("final_val"), m["unigram_xent"], LEARN_MARGIN)


def loss_at(m: dict, n: int, T: int) -> float | None:
    """Window-mean loss over the first n·T positions of the evaluation windows (None where the arm has none)."""
    at0 = (m.get("position_loss") or {}).get("at_0")
    return float(np.mean(at0[: n * T])) if at0 and len(at0) >= n * T else None


def increase(m: dict, n: int, T: int) -> float | None:
    a, b = loss_at(m, n, T), loss_at(m, 1, T)
    return None if a is None or b is None else a - b


def shift_change(m: dict, k: int, T: int) -> float | None:
    """Loss of the windows' first T characters placed at k·T, less the same characters placed at 0."""
    at = (m.get("position_loss") or {}).get(f"at_{k * T}")
    base = loss_at(m, 1, T)
    return None if at is None or base is None else float(np.mean(at)) - base


def shifted_loss(m: dict, k: int, T: int) -> float | None:
    at = (m.get("position_loss") or {}).get(f"at_{k * T}")
    return float(np.mean(at)) if at else None


def share_of(m: dict, when: str = "trained") -> float | None:
    return m.get("offset_share" if when == "trained" else "offset_share_init")


def arm_values(runs, pos: str, fn) -> tuple[dict, dict]:
    """(seed -> fn(metrics), None where the run did not learn; seed -> learned) for one arm's runs."""
    rs = [r for r in runs if r["config"]["pos"] == pos]
    flags = seed_values(rs, lambda c: True, did_learn)
    vals = seed_values(rs, lambda c: True, fn)
    return {s: (v if flags[s] else None) for s, v in vals.items()}, flags


def arm_paired(
    id, runs, a, b, fn_a, fn_b=None, *, metric, sub_claim, better="lower", margin=None, b_plus=0.0
):
    """Paired over seeds: arm b's value (plus `b_plus`, a declared margin moved into the comparison) against
    arm a's. A comparison with an arm none of whose seeds learned is excluded, and says which arm failed."""
    va, fa = arm_values(runs, a, fn_a)
    vb, fb = arm_values(runs, b, fn_b or fn_a)
    if b_plus:
        vb = {s: (None if v is None else v + b_plus) for s, v in vb.items()}
    c = paired(
        id, va, vb, metric=metric, better=better, sub_claim=sub_claim, arm_a=LABEL[a],
        arm_b=LABEL[b] + (f" + {b_plus:g}" if b_plus else ""), margin=margin, learned_a=fa, learned_b=fb,
    )  # fmt: skip
    failed = [LABEL[x] for x, f in ((a, fa), (b, fb)) if f and not any(f.values())]
    if failed and not c.excluded:
        c = replace(c, decision="excluded", note=f"{' and '.join(failed)} failed: no seed learned")
    return c


def within_arm(id, runs, pos, fn_a, fn_b, *, arm_a, arm_b, metric, sub_claim, margin):
    """Paired over seeds, two measures of the same runs (b against a)."""
    va, fa = arm_values(runs, pos, fn_a)
    vb, _ = arm_values(runs, pos, fn_b)
    c = paired(id, va, vb, metric=metric, sub_claim=sub_claim, arm_a=arm_a, arm_b=arm_b, margin=margin,
               learned_a=fa, learned_b=fa)  # fmt: skip
    if fa and not any(fa.values()) and not c.excluded:
        c = replace(c, decision="excluded", note=f"{LABEL[pos]} failed: no seed learned")
    return c


class SinusoidalRelative(Experiment):
    claim_id = "sinusoidal_relative"
    title = "Sinusoidal PE(pos+k) is a linear map of PE(pos), which lets models use relative positions"
    order = 12
    statement = (
        "With sinusoidal position encodings, the encoding of position pos + k is a linear map of the encoding of pos, "
        "and the map (a block-diagonal rotation by k·ω_i on each sine/cosine pair) depends on the offset k only; so dot "
        "products between encodings depend only on the distance, and this lets a model attend by relative position "
        "(and, the original paper hoped, work on sequences longer than those it was trained on)."
    )
    notes_say = "PE(pos+k) can be computed linearly from PE(pos) by the angle-addition formulas, which lets a model use relative positions"
    anchors = [
        "Vaswani et al. 2017 §3.5: sinusoids chosen because for any fixed offset k, PE(pos+k) can be represented as a linear function of PE(pos); this may let the model attend by relative position, and may let it extrapolate to sequence lengths longer than those met in training.",
        "Vaswani et al. 2017 Table 3 row (E): learned positional embeddings instead of sinusoids give nearly identical results (25.7 vs 25.8 dev BLEU, 4.92 PPL both).",
        "Press et al. 2022 (ALiBi), Fig. 1: language models with sinusoidal or rotary positions, trained at L = 512 or 1,024 tokens, lose perplexity when evaluated on longer inputs, the sinusoidal one most steeply.",
    ]
    anchor_number = "Learned vs sinusoidal: 25.7 vs 25.8 BLEU (Vaswani et al. Table 3)"
    method = (
        "Part `identity`, on `tfclaims.nn.positions.sinusoidal_table` (float32 entries): build M_k from the angle-addition "
        "formulas and measure max |M_k·PE(p) − PE(p+k)| over every position p and offsets k, in float32 and in float64 "
        "arithmetic, at two widths; check that M_k is orthogonal and that M_k·M_1 = M_(k+1); and the dot products "
        "PE(p)·PE(p+k): their spread over p for each k, against the closed form Σ_i cos(k·ω_i). Part `length` (the "
        "use of the identity): the character LM of the small-LM recipe (default profile: d = 64, 2 layers, 4 heads, "
        "pre-norm) trained at T = 64 characters with sinusoidal, learned, rotary (RoPE) and no position encodings (NoPE; "
        "the causal mask is its only position signal), with equal steps (800 in the default profile), data order and "
        "seeds (0–4); token embeddings are multiplied by √d "
        "in every arm, as in the original Transformer. Learned embeddings are built with max_seq_len = T (they have no "
        "rows beyond it); the others with 4T, which adds no parameter. Each trained model is evaluated per position on "
        "fixed validation windows of 4T characters (the 1× and 2× losses are the means over their first T and 2T "
        "positions: the same text at every length), and on their first T characters placed at absolute positions T.. "
        "and 3T.. (new positions, no new distances). The offset-only share: the first layer's position-only attention "
        "logits L_h[i, j] = (W_q p̃_i)·(W_k p̃_j)/√d_k for i, j < T, with p̃ = γ ⊙ (p − mean(p)) (the first norm's "
        "centring and gain, both linear and token-independent, folded in; its per-token scale and the biases left out), "
        "and the share of their variance over the causal cells j ≤ i explained by the mean of each diagonal i − j "
        "(pooled over heads: 1 − ΣSS_res/ΣSS_tot); for RoPE the logits of the query and key of the mean first-layer "
        "input, rotated to positions i and j (offset-only by construction: a check of the measure). Part `length_null`: "
        f"the sinusoidal arm at seeds s + {NULL_OFFSET}, the noise floor of every length measure. Part `learned`: train "
        "the character LM with learned absolute positions over more positions than its width (so a linear shift map is "
        "over-determined) and ask the identity's two questions of the learned table at every evaluation: the share of "
        "the variance of the Gram matrix PE(p)·PE(q) explained by the offset q − p alone (R², 1 for sinusoids), and the "
        "relative residual of the best single linear map taking every PE(p) to PE(p+1) (least squares; 0 for "
        f"sinusoids). Part `null`: that run at seeds s + {NULL_OFFSET}, the noise floor of both measures."
    )
    rule = (
        "Identity: tolerance checks, one per width: (a) max over offsets of max |M_k·PE(p) − PE(p+k)| in float32 and "
        "float64 arithmetic, and M_k's departure from orthogonality and from M_k·M_1 = M_(k+1), each ≤ 1e-6; (b) the "
        "spread over p of PE(p)·PE(p+k) and its largest departure from Σ cos(k·ω_i), relative to d/2, ≤ 1e-6; each "
        "supported if its checks pass, refuted otherwise. Use (declared before running): a length run learned iff its "
        f"final validation loss is ≥ {LEARN_MARGIN:g} nats/char below the unigram cross-entropy; runs that did not learn "
        "are left out, and a comparison with an arm none of whose seeds learned is excluded and reported as excluded. "
        "Every comparison is a two-sided paired t-test over seeds (α = 0.05; 5 seeds in the default profile), Holm-corrected across the cells of its sub-verdict and "
        "turned into a sub-verdict by the evidence ladder with require = all; no positive control exists for these "
        "margins, so equivalence never refutes and an underpowered null is inconclusive. (1) Mechanism: the offset-only "
        "share is higher for sinusoidal than for learned positions: supported if significantly higher, refuted if "
        "significantly lower. (2) Use beyond the training length: the loss increase from 1× to n× (n = 2, 4) of the "
        f"sinusoidal model is at most RoPE's + {EXTRA_MARGIN:g} nats/char: per n, sinusoidal's increase against RoPE's "
        f"increase + {EXTRA_MARGIN:g}; supported if significantly below at both n, refuted if significantly above at both, "
        "mixed if one of each. RoPE is the comparison because its attention depends on content and offset only: beyond "
        "T it meets the same unseen distances, but no unseen absolute position. Learned embeddings have no rows beyond "
        "T, so their 2× and 4× cells are not applicable. Overall: the identity, the dot products, (1) and (2) combined: "
        "all supported → supported, all refuted → refuted, supported beside refuted → mixed, otherwise inconclusive. "
        f"Reported beside the verdict, with the same tests: the 1× loss of sinusoidal and learned positions equal within "
        f"±{LOSS_MARGIN:g} (TOST); sinusoidal and RoPE each losing less than NoPE from 1× to n×; the sinusoidal model's "
        f"loss on a T-window moved to start at T and 3T equal to its loss at 0 within ±{LOSS_MARGIN:g} (TOST); and checks "
        f"that RoPE's share is 1 and that RoPE's and NoPE's losses do not move with the window (within {CHECK_TOL:g}). "
        f"The null pair (sinusoidal at seeds + {NULL_OFFSET}) gives the noise floor of every one of these measures. "
        "Learned-table sub-verdict (beside the verdict): seeds that did not learn are left out, and with none the "
        "comparisons are excluded. Converged (declared before running) iff the offset R² at the last probe equals the "
        f"one before within ±{CONVERGE_MARGIN:g}, shown by a paired TOST over seeds (the TOST alone decides: a "
        "significant change within the margin still counts as converged); if not shown, the sub-verdict is "
        "inconclusive (the table may still be acquiring or losing the structure). If converged: the trained table's "
        "offset R² and k = 1 residual are tested against the declared thresholds over seeds (paired t of each seed's "
        "value against the constant; Holm over the four tests): shares the property (supported) if R² is significantly "
        f"above {R2_SHARE:g} and the residual significantly below {RES_SHARE:g}; lacks it (refuted) if R² is "
        f"significantly below {R2_LACK:g} or the residual significantly above {RES_LACK:g}; otherwise inconclusive."
    )
    profiles = {
        "quick": train_profile("quick", d_models=[16, 64], max_len=256, offsets=[1, 3, 50], pe_len=48,
                               len_steps=12, len_eval_every=6, len_eval_batches=1, **LENGTH),
        "default": train_profile("default", d_models=[64, 512], max_len=2048, offsets=[1, 2, 5, 10, 50, 100, 500, 1000],
                                 pe_len=128, seeds=[0, 1, 2, 3, 4], len_steps=800, len_eval_every=200, len_eval_batches=8, **LENGTH),
        "full": train_profile("full", d_models=[64, 512, 4096], max_len=8192, offsets=[1, 2, 5, 10, 50, 100, 500, 1000, 4000],
                              pe_len=512, len_steps=3000, len_eval_every=500, len_eval_batches=16, **LENGTH),
    }  # fmt: skip
    parts = (
        Part("identity", identity_grid, identity_run),
        Part("learned", learned_grid, learned_run),
        Part("null", null_grid, learned_run),
        Part("length", length_grid, length_run),
        Part("length_null", length_null_grid, length_run),
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

        learned_runs, null_runs = self.runs_of(runs, "learned"), self.runs_of(runs, "null")
        lsum = self.learned_table(learned_runs, p, out)
        lsub, lcmps, floors = self.learned_verdict(learned_runs, null_runs)
        use = self.length_analysis(self.runs_of(runs, "length"), self.runs_of(runs, "length_null"), p, out)

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
            *use["subs"],
            lsub,
        ]
        verdict = combine([subs[0].verdict, subs[1].verdict, use["share"], use["extra"]])
        key_learned = (
            ""
            if tr is None
            else f"; learned table: offset R² {tr['offset R²']:.2f}"
            if pd.notna(tr["offset R²"])
            else "; learned table: no finite offset R² (the runs diverged)"
        )
        return Verdict(
            verdict=verdict,
            summary=(
                f"The rotation M_k reproduces PE(p+k) from PE(p) at every position to {err:.1g} (float32 table entries), and "
                f"PE(p)·PE(p+k) is the same for every p up to {idf['dot_spread/(d/2)'].max():.1g}·d/2, equal to Σ cos(kω_i). "
                + use["summary"]
                + f" Learned absolute embeddings trained on this task share the identity's structure: {lsub.verdict} "
                f"({lsub.detail.split(';')[0]})."
            ),
            key_number=f"max |M_k PE(p) − PE(p+k)| = {err:.1g}; {use['key']}{key_learned}",
            evidence={
                "tolerance": TOL,
                "max_err32": float(idf["err32"].max()),
                "max_err64": float(idf["err64"].max()),
                "dot_ok": ok_dot,
                **use["evidence"],
                "learned": lsum.to_dict("records"),
                "learned_subverdict": lsub.verdict,
            },
            sub_verdicts=subs,
            caveats=[
                "The identity is exact mathematics; the measurement checks the library's table and the construction of M_k, limited by the float32 rounding of the table's entries. Its checks are deterministic (no seeds, no noise floor).",
                "Linearity of PE(p+k) in PE(p) does not by itself make a model use relative positions: after the token embedding is added and the sum is normalised and projected, attention sees (x+PE(p))ᵀW_qᵀW_k(y+PE(q)), and the position–position term is relative only if W_qᵀW_k commutes with the rotations M_k, which training has to find. The offset-only share measures how far it did, for that term alone: content terms, token–position cross terms, LayerNorm's per-token scale and later layers are left out, and a model may reach relative attention through them too.",
                "Every length arm multiplies token embeddings by √d, as the original Transformer did: at this recipe's initialisation (N(0, 0.02)) the unscaled sinusoidal table (entries up to 1) swamps the token embeddings and that arm barely learns in the budget. The scale is the same in every arm.",
                "RoPE's offset-only share is 1 by construction (its content-free logits are one query and one key, rotated): it checks the measure and is not a finding. NoPE has no position logits.",
                f"Learned embeddings have rows only for the T = {p['seq_len']} trained positions: that arm is built with max_seq_len = T and its 2× and 4× cells are not applicable, not failures. The other arms hold no trainable position parameters, so building them with max_seq_len = {max(p['mults'])}T changes neither their parameters nor their training (a test checks this).",
                "Longer windows bring two new things: absolute positions never trained on, and distances never trained on. RoPE meets only the second, so the comparison with RoPE isolates the first; the moved window (T characters placed at T or 3T) has no new distance at all and shows the sinusoidal model's reliance on absolute position directly.",
                f"Small scale: a character LM (d = {p['d_model']}, {p['n_layers']} layers, {p['len_steps']} steps at T = {p['seq_len']}); larger models, trained longer, may learn more relative structure, and the original paper's hypothesis concerned translation models.",
                f"The learned-table part is a small character LM ({p['steps']} steps, {p['pe_len']} positions, d = {p['d_model']}); the learning-rate schedule decays to a tenth, so a table that stops changing at the end may be frozen rather than converged.",
            ],
            comparisons=[*ident_checks, *dot_checks, *use["comparisons"], *lcmps],
            noise_floor=[*use["floors"], *floors],
        )

    def length_analysis(self, runs, nulls, p, out) -> dict:
        """The use half: comparisons, sub-verdicts, the table and figures of the length part."""
        T, ns, ks = p["seq_len"], [n for n in sorted(p["mults"]) if n > 1], p["shift_mults"]
        loss1 = partial(loss_at, n=1, T=T)
        fam = {
            "share": ([arm_paired("use:share:sinusoidal-vs-learned", runs, "learned", "sinusoidal", share_of, metric=SHARE,
                                  sub_claim=SUB_SHARE, better="higher", margin=SHARE_MARGIN)], "b_better"),
            "extra": (holm([arm_paired(f"use:{n}x:sinusoidal-vs-rope+margin", runs, "sinusoidal", "rope", partial(increase, n=n, T=T),
                                       metric=increase_metric(n), sub_claim=SUB_EXTRA, b_plus=EXTRA_MARGIN) for n in ns]), "a_better"),
            "anchor": ([arm_paired("1x:sinusoidal-vs-learned", runs, "learned", "sinusoidal", loss1, metric=LOSS1, sub_claim=SUB_ANCHOR,
                                   margin=LOSS_MARGIN)], "equivalent"),
            **{f"nope-{a}": (holm([arm_paired(f"{n}x:{a}-vs-nope", runs, a, "none", partial(increase, n=n, T=T), metric=increase_metric(n),
                                              sub_claim=SUB_NOPE.format(arm=LABEL[a])) for n in ns]), "a_better") for a in ("sinusoidal", "rope")},
            "shift": (holm([within_arm(f"shift:{k}T:sinusoidal", runs, "sinusoidal", loss1, partial(shifted_loss, k=k, T=T), arm_a="window at 0",
                                       arm_b=f"window at {at_kT(k)}", metric=shift_metric(k), sub_claim=SUB_SHIFT, margin=LOSS_MARGIN) for k in ks]), "equivalent"),
        }  # fmt: skip
        floors = []
        if nulls:
            measures = [("loss1x", LOSS1, loss1, "lower"), ("share", SHARE, share_of, "higher")]
            measures += [
                (f"increase{n}x", increase_metric(n), partial(increase, n=n, T=T), "lower") for n in ns
            ]
            measures += [
                (f"shift{k}T", shift_metric(k), partial(shift_change, k=k, T=T), "lower") for k in ks
            ]
            for slug, metric, fn, better in measures:
                floors.append(noise_floor(f"null:sinusoidal:{slug}", arm_values(runs, "sinusoidal", fn)[0],
                                          arm_values(nulls, "sinusoidal", fn)[0], seed_offset=NULL_OFFSET, metric=metric,
                                          arm="sinusoidal", better=better, margin=LOSS_MARGIN if better == "lower" else SHARE_MARGIN))  # fmt: skip
        fam = {k: (with_noise(cs, floors), claimed) for k, (cs, claimed) in fam.items()}
        lad = {
            k: ladder(cs, claimed, positive_control=False, require="all") for k, (cs, claimed) in fam.items()
        }
        checks = self.length_checks(runs, T, ks)
        names = {"share": SUB_SHARE, "extra": SUB_EXTRA, "anchor": SUB_ANCHOR, "nope-sinusoidal": SUB_NOPE.format(arm=LABEL["sinusoidal"]),
                 "nope-rope": SUB_NOPE.format(arm=LABEL["rope"]), "shift": SUB_SHIFT}  # fmt: skip
        subs = [SubVerdict(names[k], lad[k].verdict, lad[k].detail + " — " + "; ".join(c.text(" nats" if k != "share" else "") for c in cs),
                           [c.id for c in cs]) for k, (cs, _) in fam.items()]  # fmt: skip
        if checks:
            ok = all(c.decision == "equivalent" for c in checks)
            subs.append(SubVerdict(SUB_CHECKS, "supported" if ok else "refuted", "; ".join(c.note for c in checks), [c.id for c in checks]))  # fmt: skip
        cmps = [c for cs, _ in fam.values() for c in cs]
        tab = self.length_table(runs, p, out)
        if cmps:
            out.table("use_differences", comparison_table(cmps + floors), "The use half: paired comparisons over seeds "
                      "(b − a; Holm within each sub-verdict) and the null pairs (sinusoidal at seeds + 1000)")  # fmt: skip
        if runs:
            plot_length(runs, p, out)
            plot_logits(runs, p, out)
        m = {r["arm"]: r for r in tab.to_dict("records")} if len(tab) else {}

        def num(arm, col, fmt=".2f"):
            v = m.get(arm, {}).get(col)
            return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

        n2 = ns[0] if ns else 2
        summary = (
            f"Trained at T = {T} characters ({len(p['seeds'])} seeds, {p['len_steps']} steps), the sinusoidal model's first-layer "
            f"position-only logits are {num('sinusoidal', 'share')} offset-only against {num('learned', 'share')} with learned "
            f"positions → {lad['share'].verdict}; from 1× to {n2}× its loss rises by {num('sinusoidal', f'increase {n2}×', '+.2f')} "
            f"nats/char against RoPE's {num('rope', f'increase {n2}×', '+.2f')} and NoPE's {num('none', f'increase {n2}×', '+.2f')} "
            f"(at {ns[-1] if ns else 4}×: {num('sinusoidal', f'increase {ns[-1] if ns else 4}×', '+.2f')}, "
            f"{num('rope', f'increase {ns[-1] if ns else 4}×', '+.2f')}, {num('none', f'increase {ns[-1] if ns else 4}×', '+.2f')}) → "
            f"{lad['extra'].verdict}; a {T}-character window moved to start at {at_kT(ks[0] if ks else 1)} changes its loss by "
            f"{num('sinusoidal', f'moved to {at_kT(ks[0] if ks else 1)}', '+.2f')} (RoPE and NoPE: 0 by construction). At 1×, sinusoidal "
            f"{num('sinusoidal', 'loss 1×', '.3f')} vs learned {num('learned', 'loss 1×', '.3f')} nats/char ({lad['anchor'].verdict})."
        )
        c2 = next((c for c in fam["extra"][0] if c.id.startswith(f"use:{n2}x")), None)
        key = (f"offset-only share {num('sinusoidal', 'share')} (sinusoidal) vs {num('learned', 'share')} (learned); loss rise 1×→{n2}× "
               f"{num('sinusoidal', f'increase {n2}×', '+.2f')} (sinusoidal) vs {num('rope', f'increase {n2}×', '+.2f')} (RoPE)"
               + ("" if c2 is None or not c2.excluded else " (excluded)"))  # fmt: skip
        return {
            "subs": subs, "share": lad["share"].verdict, "extra": lad["extra"].verdict, "summary": summary, "key": key,
            "comparisons": [*cmps, *checks], "floors": floors,
            "evidence": {"margins": {"learn": LEARN_MARGIN, "extra": EXTRA_MARGIN, "loss": LOSS_MARGIN, "share": SHARE_MARGIN},
                         "use": {k: v.verdict for k, v in lad.items()},
                         "length": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in tab.to_dict("records")]},
        }  # fmt: skip

    @staticmethod
    def length_checks(runs, T, ks) -> list:
        """RoPE's share must be 1 and RoPE's and NoPE's losses must not move with the window: both hold by
        construction, so a failure points at the measurement, not at the models."""
        out = []
        rope = [share_of(r["metrics"]) for r in runs if r["config"]["pos"] == "rope"]
        rope = [v for v in rope if v is not None]
        if rope:
            worst = float(max(abs(1 - v) for v in rope))
            out.append(exact_check("check:rope-share", worst <= CHECK_TOL, sub_claim=SUB_CHECKS, metric=SHARE, observed=1 - worst,
                                   expected=1.0, note=f"RoPE's offset-only share within {worst:.1g} of 1 over {len(rope)} runs (tolerance {CHECK_TOL:g})"))  # fmt: skip
        for pos in ("rope", "none"):
            d = [shift_change(r["metrics"], k, T) for r in runs if r["config"]["pos"] == pos for k in ks]
            d = [v for v in d if v is not None]
            if d:
                worst = float(max(map(abs, d)))
                out.append(exact_check(f"check:{pos}-moved-window", worst <= CHECK_TOL, sub_claim=SUB_CHECKS, metric="loss change, window moved (nats/char)",
                                       observed=worst, expected=0.0, note=f"{LABEL[pos]}: moving the window changes the loss by ≤ {worst:.1g} (tolerance {CHECK_TOL:g})"))  # fmt: skip
        return out

    @staticmethod
    def length_table(runs, p, out) -> pd.DataFrame:
        """Per arm: learned count, loss at each length, the increases, the moved windows, the offset-only share."""
        from tfclaims.evidence.stats import mean_ci

        T, mults, ks = p["seq_len"], sorted(p["mults"]), p["shift_mults"]
        rows, runs_rows = [], []
        for r in runs:
            c, m = r["config"], r["metrics"]
            runs_rows.append({"arm": LABEL[c["pos"]], "seed": c["seed"], "learned": did_learn(m), "final_val": m.get("final_val"),
                              **{f"loss {n}×": loss_at(m, n, T) for n in mults}, **{f"moved to {at_kT(k)}": shift_change(m, k, T) for k in ks},
                              "share (init)": share_of(m, "init"), "share": share_of(m), "seconds": m.get("seconds")})  # fmt: skip
        if not runs:
            return pd.DataFrame()
        out.table(
            "length_runs",
            pd.DataFrame(runs_rows),
            "Length part, per run (nats/char; shares in [0, 1])",
            in_report=False,
        )
        shown = []
        for pos in ARMS:
            if not any(r["config"]["pos"] == pos for r in runs):
                continue
            flags = arm_values(runs, pos, did_learn)[1]
            row = {"arm": pos, "learned": f"{sum(flags.values())}/{len(flags)}"}
            cols = [(f"loss {n}×", partial(loss_at, n=n, T=T)) for n in mults]
            cols += [(f"increase {n}×", partial(increase, n=n, T=T)) for n in mults if n > 1]
            cols += [(f"moved to {at_kT(k)}", partial(shift_change, k=k, T=T)) for k in ks]
            cols += [("share (init)", partial(share_of, when="init")), ("share", share_of)]
            for col, fn in cols:
                ci = mean_ci([v for v in arm_values(runs, pos, fn)[0].values() if v is not None])
                row[col], row[col + " ±"] = ci.mean, ci.half_width
            rows.append(row)
            beyond = (
                {f"loss {n}×" for n in mults if n > 1}
                | {f"increase {n}×" for n in mults}
                | {f"moved to {at_kT(k)}" for k in ks}
            )
            fmt = {}
            for k, v in row.items():
                if k in ("arm", "learned") or k.endswith(" ±"):
                    continue
                hw = row[k + " ±"]
                fmt[k] = ("n/a" if pos == "learned" and k in beyond else "—" if math.isnan(v)
                          else f"{v:.3f}" if math.isnan(hw) or hw == 0 else f"{v:.3f} ± {hw:.3f}")  # fmt: skip
            shown.append({"arm": LABEL[pos], "learned": row["learned"], **fmt})
        out.table("length", pd.DataFrame(shown), f"Trained at T = {T} characters, evaluated on {max(mults)}T-character windows: window-mean "
                  "validation loss at each length (nats/char), its increase over 1×, the change when the first T characters are moved to "
                  "start at kT, and the offset-only share of the first layer's position-only logits (at initialisation and trained); "
                  "mean ± 95% CI over the seeds that learned. n/a: learned embeddings have no rows beyond T.")  # fmt: skip
        return pd.DataFrame(rows)

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


# ---------------------------------------------------------------------------- figures (length part)
def plot_length(runs, p, out):
    from tfclaims.evidence.stats import mean_ci
    from tfclaims.plotting import band, log_ticks, subplots

    T, mults = p["seq_len"], sorted(p["mults"])
    fig, (a, b, c) = subplots(3, width=4.5, height=3.7)
    for pos in ARMS:
        cis = {
            n: mean_ci(
                [v for v in arm_values(runs, pos, partial(loss_at, n=n, T=T))[0].values() if v is not None]
            )
            for n in mults
        }
        cis = {n: ci for n, ci in cis.items() if ci.n}
        xs = [n * T for n in cis]
        if len(xs) > 1:
            band(a, xs, [ci.mean for ci in cis.values()], [ci.lo for ci in cis.values()], [ci.hi for ci in cis.values()],
                 label=LABEL[pos], color=COLOR[pos])  # fmt: skip
        elif xs:
            ci = next(iter(cis.values()))
            a.errorbar(xs, [ci.mean], yerr=[[ci.mean - ci.lo], [ci.hi - ci.mean]], fmt="s", color=COLOR[pos], capsize=3,
                       label=f"{LABEL[pos]} (no rows beyond T)")  # fmt: skip
        curves = [r["metrics"]["position_loss"]["at_0"] for r in runs
                  if r["config"]["pos"] == pos and did_learn(r["metrics"]) and "position_loss" in r["metrics"]]  # fmt: skip
        if curves:
            w = max(1, T // 8)  # moving average over T/8 positions: per-position losses are noisy
            sm = np.array([np.convolve(y, np.ones(w) / w, mode="valid") for y in curves])
            x = np.arange(sm.shape[1]) + (w - 1) / 2
            pc = [mean_ci(sm[:, j]) for j in range(sm.shape[1])]
            band(b, x, [q.mean for q in pc], [q.lo for q in pc], [q.hi for q in pc], label=LABEL[pos], color=COLOR[pos], marker=None)  # fmt: skip
    log_ticks(a, [n * T for n in mults])
    a.set(xlabel=f"evaluation window (characters; trained at T = {T})", ylabel="validation loss, window mean (nats/char)",
          title="Loss vs evaluation length")  # fmt: skip
    if a.get_legend_handles_labels()[0]:
        a.legend(fontsize=7)
    b.axvline(T, color="k", lw=0.8, ls=":")
    b.text(T, b.get_ylim()[1], " training length", fontsize=7, va="top")
    b.set(xlabel="position in the window (characters)", ylabel=f"loss at that position (nats/char, {max(1, T // 8)}-position mean)",
          title="Loss by position")  # fmt: skip
    if b.get_legend_handles_labels()[0]:
        b.legend(fontsize=7)
    shown = [pos for pos in ARMS if pos != "none"]
    rng = np.random.default_rng(0)
    for i, pos in enumerate(shown):
        for when, dx, mfc in (("init", -0.18, "none"), ("trained", 0.18, COLOR[pos])):
            v = [x for x in arm_values(runs, pos, partial(share_of, when=when))[0].values() if x is not None]
            if not v:
                continue
            ci = mean_ci(v)
            c.scatter(
                i + dx + rng.uniform(-0.05, 0.05, len(v)),
                v,
                s=12,
                color=COLOR[pos],
                alpha=0.5,
                facecolors=mfc,
            )
            c.errorbar(i + dx, ci.mean, yerr=[[ci.mean - ci.lo], [ci.hi - ci.mean]], fmt="o", ms=7, mfc=mfc, color=COLOR[pos], capsize=3,
                       label=("at initialisation" if i == 0 and when == "init" else "trained" if i == 0 else None))  # fmt: skip
    c.set_xticks(
        range(len(shown)),
        [LABEL[s] + (" (1 by construction)" if s == "rope" else "") for s in shown],
        fontsize=8,
    )
    c.set_ylim(-0.05, 1.08)
    c.set(ylabel="offset-only share of the variance (R²)", title="First-layer position-only logits")
    c.text(0.02, 0.97, "NoPE: no position logits", transform=c.transAxes, fontsize=7, va="top")
    if c.get_legend_handles_labels()[0]:
        c.legend(fontsize=7, loc="center right")
    out.figure(
        "length",
        fig,
        f"Left: window-mean validation loss at 1×, 2× and 4× the training length T = {T} (the same text at each length: prefixes of "
        f"{max(mults)}T-character windows), mean and 95% band over the seeds that learned; learned embeddings have no rows beyond T. "
        "Middle: loss at each position of the window (moving average), the dotted line at T. Right: share of the variance of the "
        "first layer's position-only attention logits (causal cells, pooled over heads) explained by the offset i − j alone, at "
        "initialisation (hollow) and after training (filled), seeds as dots with mean and 95% CI; RoPE's is 1 by construction.",
    )


def plot_logits(runs, p, out):
    from tfclaims.plotting import subplots

    have = {}
    for pos in ("sinusoidal", "learned"):
        rs = sorted(
            (r for r in runs if r["config"]["pos"] == pos and "position_logits" in r["metrics"]),
            key=lambda r: r["config"]["seed"],
        )
        if rs:
            have[pos] = rs[0]
    if not have:
        return
    fig, axes = subplots(len(have) + 1, width=3.9, height=3.6)
    T = p["seq_len"]
    for ax, (pos, r) in zip(axes, have.items()):
        L = np.array(r["metrics"]["position_logits"], float)  # (T, T), causal cells j ≤ i
        L = np.where(np.tril(np.ones_like(L, bool)), L, np.nan)
        lim = float(np.nanmax(np.abs(L))) or 1.0
        im = ax.imshow(L, cmap="RdBu_r", vmin=-lim, vmax=lim, extent=[0, T, T, 0])
        ax.grid(False)
        ax.set(xlabel="key position j", ylabel="query position i",
               title=f"{LABEL[pos]} (seed {r['config']['seed']}, head {r['metrics']['logits_head']}): share {r['metrics']['offset_share']:.2f}")  # fmt: skip
        fig.colorbar(im, ax=ax, fraction=0.046, label="position-only logit")
        off = np.array([np.nanmean(np.diagonal(L, -k)) for k in range(T)])
        axes[-1].plot(range(T), off / (np.abs(off).max() or 1), color=COLOR[pos], label=LABEL[pos])
    axes[-1].set(
        xlabel="offset i − j (characters)",
        ylabel="mean logit on the diagonal (÷ max |·|)",
        title="The offset-only part",
    )
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=7)
    out.figure(
        "position_logits",
        fig,
        "The first layer's position-only attention logits (W_q p̃_i)·(W_k p̃_j)/√d_k over the training window, for the head whose "
        "logits vary most, sinusoidal and learned positions (first seed); the upper triangle is masked (causal). Right: the mean "
        "of each diagonal, the function of i − j alone that the offset-only share measures against. Each panel has its own "
        "colour scale: the norm's per-token 1/σ is left out, so magnitudes do not compare across arms (the share is scale-free).",
    )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(SinusoidalRelative)
