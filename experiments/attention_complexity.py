"""`attention_complexity`: self-attention costs O(n²·d), and splitting it into h heads costs the same as one head."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from tfclaims.blocks import Block
from tfclaims.config import PRESETS, ModelConfig
from tfclaims.counting import (
    attention_flops,
    attention_projection_flops,
    attention_score_flops,
    block_flops,
    ffn_flops,
    lm_forward_flops,
    score_crossover_length,
)
from tfclaims.experiment import Experiment, Output, SubVerdict, Verdict
from tfclaims.measure import count_flops
from tfclaims.models import LM
from tfclaims.stats import loglog_fit
from tfclaims.threads import intra_op_threads
from tfclaims.timing import time_interleaved

# Pre-registered tolerances (fixed before any timing was looked at).
N_EXP, D_EXP, EXP_TOL = 2.0, 1.0, 0.2  # fitted exponent in n within 2 ± 0.2, in d within 1 ± 0.2
SHARE_MIN = 0.8  # fit in n only where QK^T + PV hold >= 80% of the unit's counted FLOPs
HEADS_MAX_RATIO = 1.25  # "same cost" in time: slowest head count within 1.25x of the fastest

# What is timed: the library's modules (non-causal, batch 1, no grad) and their parts.
UNITS = {
    "attention_explicit": "attention module, explicit (n×n scores materialised)",
    "attention_sdpa": "attention module, SDPA (fused kernel)",
    "block_sdpa": "pre-LN block (SDPA attention + GELU FFN)",
    "scores_explicit": "QKᵀ, softmax, PV only (explicit)",
    "scores_sdpa": "QKᵀ, softmax, PV only (fused SDPA)",
    "dense": "projections + FFN + norms of the block",
}


def unit_config(d: int, h: int, n: int, backend: str = "sdpa", causal: bool = False) -> ModelConfig:
    return ModelConfig(d_model=d, n_heads=h, max_seq_len=max(n, 1), attn_backend=backend, causal=causal)


def unit_flops(unit: str, c: ModelConfig, n: int) -> int:
    """Closed-form matmul FLOPs of a timed unit (batch 1, n tokens)."""
    if unit.startswith("attention"):
        return attention_flops(c, n)
    if unit.startswith("block"):
        return block_flops(c, n)
    if unit.startswith("scores"):
        return attention_score_flops(c, n)
    return attention_projection_flops(c, n) + ffn_flops(c, n)


def score_share(unit: str, c: ModelConfig, n: int) -> float:
    """Fraction of the unit's FLOPs in QK^T + PV (the n² term)."""
    return attention_score_flops(c, n) / unit_flops(unit, c, n)


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


def unit_fns(d: int, h: int, n: int, device) -> dict:
    """The timed units at one size: callables on fresh modules and inputs (batch 1, non-causal)."""
    c = unit_config(d, h, n)
    with torch.device(device):
        blocks = {be: Block(c.replace(attn_backend=be)).eval() for be in ("explicit", "sdpa")}
        x = torch.randn(1, n, d)
        q, k, v = (torch.randn(1, h, n, c.dk) for _ in range(3))
    return {
        "attention_explicit": lambda: blocks["explicit"].attn(x),
        "attention_sdpa": lambda: blocks["sdpa"].attn(x),
        "block_sdpa": lambda: blocks["sdpa"](x),
        "scores_explicit": lambda: blocks["explicit"].attn._explicit(q, k, v, None),
        "scores_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, scale=c.scale),
        "dense": lambda: dense_part(blocks["sdpa"], x),
    }


class AttentionComplexity(Experiment):
    claim_id = "attention_complexity"
    title = "Self-attention costs O(n²·d); multi-head costs the same as one head"
    order = 6
    statement = (
        "Self-attention over n tokens of width d costs O(n²·d): the score matrix QKᵀ and the weighted sum PV each take "
        "n²·d multiply-adds and the softmax n² operations. Splitting the width into h heads of size d/h leaves the cost "
        "unchanged. In a Transformer block the n² term overtakes the projections and the FFN once n exceeds a few times d."
    )
    notes_say = "attention is O(n²d); h heads of d/h cost the same as one head"
    anchors = [
        "Vaswani et al. 2017, Table 1: self-attention O(n²·d) per layer against recurrent O(n·d²); attention is cheaper when n < d.",
        "Kaplan et al. 2020: forward FLOPs per token ≈ 2N + 2·n_layer·n_ctx·d (N non-embedding parameters); the context term is half of QKᵀ + PV over the full n×n as counted here (4·n_layer·n_ctx·d).",
        "Under the convention QKᵀ + PV (4·n·d per token per layer) against projections + FFN (24·d² with d_ff = 4d), the n² term overtakes at n = 6d.",
    ]
    anchor_number = "O(n²·d); crossover with projections + FFN at n = 6d (QKᵀ+PV vs 24d²)"
    method = (
        "FLOPs: torch's FlopCounterMode with SDPA forced onto the MATH backend (the fused CPU kernel has no FLOP formula "
        "and counts zero) over the library's Attention (explicit and SDPA backends, causal and not) and Block, on the "
        "meta device (same dispatched operations, no memory), for a grid of n, d and h, and GPT-2 small's whole forward; "
        "each count is compared with the closed forms in `tfclaims.counting`. Convention: a multiply-add is 2 FLOPs, only "
        "matmuls count (norms, softmax, GELU and biases are not), causal masking is not discounted (the MATH and explicit "
        "paths compute the full n×n scores). Time: `timing.time_interleaved`: all sizes and units of a sweep are timed round by round (so a change in "
        "background load lands on every size alike), after warm-up, each sample repeating fast calls to last at least 2 ms; "
        "medians and quartiles over rounds; batch 1, "
        "no autograd, non-causal attention, on one CPU thread (so that thread-pool effects do not bend the exponents). Per point we time the attention module (explicit, "
        "fused SDPA), a pre-LN block (SDPA), the score part alone (QKᵀ/softmax/PV, explicit and fused) and the dense part "
        "(norms, projections, FFN). Log-log fits of time vs n use every repeat at the sizes where the n² term holds at "
        "least 80% of the unit's counted FLOPs (n ≥ 8d for attention, n ≥ 24d for a block); the exponent the FLOP closed "
        "form predicts over the same sizes is given beside it. d is varied at fixed head size (h = d/32) and fixed n; h at "
        "fixed d and n."
    )
    rule = (
        "(1) Counting: every counted FLOP number equals the closed form exactly, and at fixed (n, d) the count is identical "
        "for every head count; otherwise the verdict is inconclusive (the measurement is broken). (2) n: for each width in "
        "the sweep and each unit (attention explicit, attention SDPA, block), the log-log exponent of time in n, fitted "
        "where QKᵀ+PV hold ≥ 80% of the unit's FLOPs (at least two sizes, else not evaluated), lies within 2 ± 0.2. "
        "(3) d: at fixed n with n ≥ 8d throughout, the exponent of attention time in d lies within 1 ± 0.2 for both "
        "backends. (4) Heads: at fixed d and n, the slowest head count's attention-module time is within 1.25× of the "
        "fastest, for each backend. (5) The counted crossover n/d where QKᵀ+PV FLOPs equal projections+FFN is reported "
        "and must be 6 under this convention; the time crossover is reported, not judged. Overall: supported if (1)–(4) "
        "all pass; refuted if fewer than half of the fits in (2) and (3) pass; mixed otherwise."
    )
    profiles = {
        "quick": {
            "count_ns": [16, 64], "count_ds": [32], "count_hs": [1, 4],
            "sweep_ds": [32], "head_dim": 32, "ns": [32, 64, 128, 256, 512, 1024], "max_n2d": 2**26,
            "d_sweep_n": 512, "d_sweep_ds": [16, 32, 64], "d_sweep_head_dim": 16,
            "heads_d": 64, "heads_n": 256, "heads_hs": [1, 4, 16],
            "warmup": 1, "repeats": 3, "threads": 1, "gpt2": False,
        },
        "default": {
            "count_ns": [128, 1024, 8192], "count_ds": [64, 256, 1024], "count_hs": [1, 4, 16, 64],
            "sweep_ds": [64, 128], "head_dim": 64, "ns": [64, 128, 256, 512, 1024, 2048, 4096, 8192], "max_n2d": 2**32,
            "d_sweep_n": 2048, "d_sweep_ds": [32, 64, 128, 256], "d_sweep_head_dim": 32,
            "heads_d": 256, "heads_n": 1024, "heads_hs": [1, 2, 4, 8, 16, 32, 64],
            "warmup": 1, "repeats": 5, "threads": 1, "gpt2": True,
        },
        "full": {
            "count_ns": [128, 512, 2048, 8192, 32768], "count_ds": [64, 256, 1024, 4096], "count_hs": [1, 4, 16, 64],
            "sweep_ds": [64, 128, 256, 512], "head_dim": 64, "ns": [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768], "max_n2d": 2**36,
            "d_sweep_n": 4096, "d_sweep_ds": [64, 128, 256, 512], "d_sweep_head_dim": 64,
            "heads_d": 1024, "heads_n": 2048, "heads_hs": [1, 2, 4, 8, 16, 32, 64, 128],
            "warmup": 3, "repeats": 10, "threads": 0, "gpt2": True,
        },
    }  # fmt: skip

    # ------------------------------------------------------------------ runs
    def grid(self, p):
        for d in p["sweep_ds"]:
            unit_config(d, d // p["head_dim"], 1)
        for d in p["d_sweep_ds"]:
            unit_config(d, d // p["d_sweep_head_dim"], 1)
        for h in p["heads_hs"]:
            unit_config(p["heads_d"], h, 1)
        runs = [
            {
                "kind": "count",
                "ns": p["count_ns"],
                "ds": p["count_ds"],
                "hs": p["count_hs"],
                "heads_d": p["heads_d"],
                "heads_n": p["heads_n"],
                "heads_hs": p["heads_hs"],
                "gpt2": p["gpt2"],
            }
        ]
        # One run per sweep; inside it every (unit, size) is timed round-robin (time_interleaved), so a change in
        # background load lands on all sizes alike instead of bending the fitted exponent.
        tk = {"warmup": p["warmup"], "repeats": p["repeats"], "threads": p["threads"]}
        for d in p["sweep_ds"]:
            pts = [[d, d // p["head_dim"], n] for n in p["ns"] if n * n * d <= p["max_n2d"]]
            runs.append({"kind": "time", "sweep": "n", "points": pts, "units": list(UNITS), **tk})
        pts = [[d, d // p["d_sweep_head_dim"], p["d_sweep_n"]] for d in p["d_sweep_ds"]]
        runs.append(
            {
                "kind": "time",
                "sweep": "d",
                "points": pts,
                "units": ["attention_explicit", "attention_sdpa", "block_sdpa"],
                **tk,
            }
        )
        pts = [[p["heads_d"], h, p["heads_n"]] for h in p["heads_hs"]]
        runs.append(
            {
                "kind": "time",
                "sweep": "h",
                "points": pts,
                "units": ["attention_explicit", "attention_sdpa", "scores_explicit", "scores_sdpa"],
                **tk,
            }
        )
        return runs

    def run_one(self, cfg, ctx):
        return self._count(cfg) if cfg["kind"] == "count" else self._time(cfg, ctx)

    def _count(self, cfg):
        """Counted FLOPs on the meta device (the same operations dispatch; nothing is computed)."""
        rows = []
        points = [(n, d, h) for n in cfg["ns"] for d in cfg["ds"] for h in cfg["hs"] if d % h == 0]
        points += [(cfg["heads_n"], cfg["heads_d"], h) for h in cfg["heads_hs"]]
        with torch.device("meta"), torch.no_grad():
            for n, d, h in points:
                # every unit of the SDPA block (counted on the MATH kernel); the attention module alone for the other
                # backend and for causal masking, to show that neither changes the count
                for backend, causal in (
                    ("sdpa", False),
                    ("explicit", False),
                    ("sdpa", True),
                    ("explicit", True),
                ):
                    rows += count_point(n, d, h, backend, causal, every_unit=backend == "sdpa" and not causal)
            lm = []
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

    def _time(self, cfg, ctx):
        dev = ctx.device
        fns = {}
        for d, h, n in cfg["points"]:
            fns.update(
                {
                    f"{unit}|{d}|{h}|{n}": fn
                    for unit, fn in unit_fns(d, h, n, dev).items()
                    if unit in cfg["units"]
                }
            )
        with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
            t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
        points = []
        for d, h, n in cfg["points"]:
            points.append({"d": d, "h": h, "n": n, "times": {u: t[f"{u}|{d}|{h}|{n}"] for u in cfg["units"]}})
        return {"points": points, "threads": n_threads}

    # -------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        count = next(r for r in runs if r["config"]["kind"] == "count")["metrics"]
        cdf = pd.DataFrame(count["rows"])
        cdf["equal"] = cdf["counted"] == cdf["closed_form"]
        all_equal = bool(cdf["equal"].all())
        # head invariance: at fixed (n, d, backend, causal, unit) every h gives the same count
        spread = cdf.groupby(["n", "d", "backend", "causal", "unit"])["counted"].agg(
            lambda s: int(s.max() - s.min())
        )
        head_spread = int(spread.max())
        causal_gap = int(
            (
                cdf[cdf.causal].set_index(["n", "d", "h", "backend", "unit"])["counted"]
                - cdf[~cdf.causal].set_index(["n", "d", "h", "backend", "unit"])["counted"]
            )
            .abs()
            .max()
        )
        out.table("flop_counts", cdf, "Counted FLOPs vs closed forms (every point)", in_report=False)
        summ = (
            cdf.groupby(["unit", "backend"])
            .agg(points=("equal", "size"), equal=("equal", "sum"))
            .reset_index()
        )  # fmt: skip
        out.table(
            "flop_count_summary",
            summ,
            f"Counted = closed form, by unit and backend (n ∈ {p['count_ns']}, d ∈ {p['count_ds']}, h ∈ {p['count_hs']}, causal and not)",
        )
        lm_rows = []
        for r in count["lm"]:
            c = PRESETS[r["model"]]
            n, L, d = r["n"], c.n_layers, c.d_model
            n_matmul = 12 * d * d * L  # attention 4d² + FFN 8d² per layer (no biases, no embeddings)
            kaplan = 2 * n_matmul + 2 * L * n * d
            lm_rows.append({
                "model": r["model"], "n_ctx": n, "counted FLOPs / token": r["counted"] / n, "closed form / token": r["closed_form"] / n,
                "2N (N non-embedding)": 2 * n_matmul, "QKᵀ+PV 4·L·n·d": 4 * L * n * d, "LM head 2·d·V": 2 * d * c.vocab_size,
                "Kaplan 2N + 2·L·n·d": kaplan, "counted − head − Kaplan": r["counted"] / n - 2 * d * c.vocab_size - kaplan,
            })  # fmt: skip
        if lm_rows:
            out.table(
                "gpt2_per_token",
                pd.DataFrame(lm_rows),
                "GPT-2 small, forward FLOPs per token at full context: counted = closed form; beyond the LM head, it exceeds Kaplan et al.'s 2N + 2·L·n·d by exactly 2·L·n·d (they count half of QKᵀ+PV)",
            )

        t = self._time_table(runs)
        out.table("timings", t, "Median wall time (s) of every timed unit", in_report=False)
        ns_t = t[t.sweep == "n"]
        # (2) exponent in n where the n² term dominates
        fits = []
        for d, g in ns_t.groupby("d"):
            for unit in ("attention_explicit", "attention_sdpa", "block_sdpa"):
                fits.append(self._fit(g, unit, "n", p, d=d))
        fdf = pd.DataFrame(fits)
        d_t = t[t.sweep == "d"]
        dfits = pd.DataFrame(
            [
                self._fit(d_t, unit, "d", p, judged=unit != "block_sdpa")
                for unit in ("attention_explicit", "attention_sdpa", "block_sdpa")
            ]
        )
        allfits = pd.concat([fdf, dfits], ignore_index=True)

        def round_slopes(fit) -> str:
            """Sensitivity check, not judged: rounds are timed across all sizes in turn, so one slope per round is
            immune to a change of machine speed between rounds. Median [min, max] over rounds."""
            if not fit.evaluated:
                return "—"
            sweep = t[t.sweep == fit.variable]
            if fit.variable == "n":
                sweep = sweep[sweep.d == fit.d]
            sel = sweep[sweep[fit.variable].isin(fit.x)].sort_values(fit.variable)
            rounds = np.array([list(ts) for ts in sel[f"{fit.unit}_times"]]).T  # (rounds, sizes)
            rs = [loglog_fit(sel[fit.variable].values, row).slope for row in rounds]
            return f"{np.median(rs):.2f} [{min(rs):.2f}, {max(rs):.2f}]"

        allfits["per-round slopes (not judged)"] = [round_slopes(r) for r in allfits.itertuples()]
        out.table(
            "exponents",
            allfits.drop(columns=["x", "y"]),
            f"Log-log exponents of time (the rule's estimator: one fit over every repeat, 95% CI). Target {N_EXP:g} ± {EXP_TOL} in n, {D_EXP:g} ± {EXP_TOL} in d. "
            "Per-round slopes (median [min, max]) are a sensitivity check, not judged",
        )

        # (4) heads
        h_t = t[t.sweep == "h"].sort_values("h")
        hc = (
            cdf[
                (cdf.n == p["heads_n"])
                & (cdf.d == p["heads_d"])
                & (~cdf.causal)
                & (cdf.unit == "attention")
                & (cdf.backend == "sdpa")
            ]
            .groupby("h")["counted"]
            .first()
        )
        heads_rows = []
        for _, r in h_t.iterrows():
            heads_rows.append({
                "h": int(r.h), "head size": p["heads_d"] // int(r.h), "counted FLOPs": int(hc.get(int(r.h), -1)),
                "score bytes h·n²·4 (explicit)": int(r.h) * p["heads_n"] ** 2 * 4,
                "attention explicit (ms)": 1e3 * r.attention_explicit, "attention SDPA (ms)": 1e3 * r.attention_sdpa,
                "scores explicit (ms)": 1e3 * r.scores_explicit, "scores SDPA (ms)": 1e3 * r.scores_sdpa,
                "scores explicit, ns per score entry": 1e9 * r.scores_explicit / (int(r.h) * p["heads_n"] ** 2),
                "scores SDPA, ns per score entry": 1e9 * r.scores_sdpa / (int(r.h) * p["heads_n"] ** 2),
                "scores SDPA GFLOP/s": attention_score_flops(unit_config(p["heads_d"], int(r.h), p["heads_n"]), p["heads_n"]) / r.scores_sdpa / 1e9,
            })  # fmt: skip
        hdf = pd.DataFrame(heads_rows)
        out.table(
            "heads",
            hdf,
            f"Head count at fixed d = {p['heads_d']}, n = {p['heads_n']}: FLOPs and median times",
        )
        head_ratio = {
            be: float(h_t[f"attention_{be}"].max() / h_t[f"attention_{be}"].min())
            for be in ("explicit", "sdpa")
        }
        h0, h1 = hdf.iloc[0], hdf.iloc[-1]
        head_best = {be: int(h_t.loc[h_t[f"attention_{be}"].idxmin(), "h"]) for be in ("explicit", "sdpa")}

        # (5) crossover: counted and timed
        counted_x = {}
        for d in sorted(cdf.d.unique()):
            g = cdf[(cdf.d == d) & (cdf.backend == "sdpa") & (~cdf.causal)]
            s = g[g.unit == "scores"].groupby("n")["counted"].first()
            dn = g[g.unit == "dense"].groupby("n")["counted"].first()
            ratio = s / dn  # = n / (6d) under this convention, exactly linear in n
            counted_x[int(d)] = float(np.exp(np.mean(np.log(ratio.index.values) - np.log(ratio.values))) / d)
        cfg_ref = unit_config(64, 1, 1)
        closed_x = score_crossover_length(cfg_ref) / cfg_ref.d_model
        xrows = []
        for d, g in ns_t.groupby("d"):
            g = g.sort_values("n")
            row = {"d": int(d), "counted n*/d": counted_x.get(int(d), closed_x), "closed form n*/d": closed_x}
            for be in ("explicit", "sdpa"):
                nx = _crossing(g["n"].values, g[f"scores_{be}"].values, g["dense"].values)
                row[f"time n* ({be})"] = nx
                row[f"time n*/d ({be})"] = nx / d if nx else math.nan
            row["asymptotic from n ≈ (attention SDPA)"] = _asymptotic_start(g, "attention_sdpa")
            row["asymptotic from n ≈ (block)"] = _asymptotic_start(g, "block_sdpa")
            xrows.append(row)
        xdf = pd.DataFrame(xrows)
        out.table(
            "crossover",
            xdf,
            "Where the n² term takes over: counted FLOP crossover (QKᵀ+PV = projections+FFN) and the measured time crossover (scores time = dense time); 'asymptotic from' = smallest n from which every local slope of time in n is ≥ 1.6",
        )

        self.plot_flops_time(cdf, ns_t, fdf, p, out)
        self.plot_d(d_t, dfits, p, out)
        self.plot_heads(h_t, hdf, p, out)
        self.plot_crossover(cdf, ns_t, xdf, p, out)

        # ---- verdict
        judged = allfits[allfits.judged & allfits.evaluated]
        n_fits = judged[judged.variable == "n"]
        d_fits = judged[judged.variable == "d"]
        n_ok, d_ok = (
            bool(n_fits["pass"].all()) and len(n_fits) > 0,
            bool(d_fits["pass"].all()) and len(d_fits) > 0,
        )
        heads_ok = all(r <= HEADS_MAX_RATIO for r in head_ratio.values())
        frac_pass = float(judged["pass"].mean()) if len(judged) else 0.0
        count_ok = all_equal and head_spread == 0
        if not count_ok:
            verdict = "inconclusive"
        elif n_ok and d_ok and heads_ok and abs(closed_x - 6) < 1e-12:
            verdict = "supported"
        elif frac_pass < 0.5:
            verdict = "refuted"
        else:
            verdict = "mixed"

        def fit_txt(df):
            return "; ".join(
                f"{_unit_short(r.unit)}{'' if r.variable == 'd' else f' d={r.d}'}: {r.slope:.2f} [{r.lo:.2f}, {r.hi:.2f}] (FLOPs predict {r.flop_slope:.2f})"
                for r in df.itertuples()
            )

        x_sdpa = "; ".join(
            f"d={r['d']}: {r['time n* (sdpa)']:.0f} ({r['time n*/d (sdpa)']:.1f}d) fused, {r['time n* (explicit)']:.0f} ({r['time n*/d (explicit)']:.1f}d) explicit"
            for r in xrows
            if r["time n* (sdpa)"] and r["time n* (explicit)"]
        )
        subs = [
            SubVerdict(
                "Counted FLOPs = closed forms; heads change FLOPs by 0",
                "supported" if count_ok else "refuted",
                f"{int(cdf['equal'].sum())}/{len(cdf)} counts equal; largest spread across head counts {head_spread} FLOPs; causal minus non-causal count {causal_gap} (masking not discounted)",
            ),
            SubVerdict(
                f"Time grows as n² where QKᵀ+PV ≥ {SHARE_MIN:.0%} of FLOPs",
                "supported" if n_ok else ("refuted" if not n_fits["pass"].any() else "mixed"),
                fit_txt(n_fits) or "no fit range reached",
            ),
            SubVerdict(
                f"Attention time grows as d at n = {p['d_sweep_n']}",
                "supported" if d_ok else ("refuted" if not d_fits["pass"].any() else "mixed"),
                fit_txt(d_fits),
            ),
            SubVerdict(
                f"Same time for every head count (d = {p['heads_d']}, n = {p['heads_n']})",
                "supported" if heads_ok else "refuted",
                f"slowest/fastest attention time: explicit {head_ratio['explicit']:.2f}× (fastest at h = {head_best['explicit']}), fused {head_ratio['sdpa']:.2f}× (fastest at h = {head_best['sdpa']}); FLOPs identical. "
                f"The score part's matmul throughput falls from {h0['scores SDPA GFLOP/s']:.1f} GFLOP/s (head size {int(h0['head size'])}) to {h1['scores SDPA GFLOP/s']:.1f} (head size {int(h1['head size'])}), "
                f"while its time per score entry (h·n² of them) settles at {h1['scores SDPA, ns per score entry']:.2f} ns fused and {h1['scores explicit, ns per score entry']:.2f} ns explicit: "
                "at small head size the per-entry softmax work and the traffic of the h·n² scores, not the n²·d multiply-adds, set the time",
            ),
            SubVerdict(
                "n² term overtakes projections + FFN at n = 6d",
                "supported"
                if abs(closed_x - 6) < 1e-12 and all(abs(v - 6) < 1e-9 for v in counted_x.values())
                else "refuted",
                f"counted n*/d = {', '.join(f'{v:g}' for v in counted_x.values())}; in time: {x_sdpa or 'not crossed in the measured range'}",
            ),
        ]
        n_sdpa = fdf[(fdf.unit == "attention_sdpa") & fdf.evaluated]

        def units_txt(unit):
            rows = n_fits[n_fits.unit == unit]
            return ", ".join(f"{r.slope:.2f} (d={r.d})" for r in rows.itertuples()) or "not fitted"

        # time per score entry (h·n² of them) of the score part alone, at the smallest width of the sweep
        g0 = ns_t[ns_t.d == ns_t.d.min()].sort_values("n")
        per_entry = {u: 1e9 * g0[u] / (g0.h * g0.n**2) for u in ("scores_explicit", "scores_sdpa")}
        small = (g0.n >= 256) & (g0.n <= 1024)
        pe_small = {u: float(v[small].median()) if small.any() else math.nan for u, v in per_entry.items()}
        pe_big = {u: float(v.iloc[-1]) for u, v in per_entry.items()}
        n_big = int(g0.n.iloc[-1])
        key = f"time exponent in n {', '.join(f'{r.slope:.2f}' for r in n_fits.itertuples())}; in d {', '.join(f'{r.slope:.2f}' for r in d_fits.itertuples())}; heads time ratio {head_ratio['explicit']:.1f}× explicit, {head_ratio['sdpa']:.1f}× fused"
        return Verdict(
            verdict=verdict,
            summary=(
                "Counted matmul FLOPs equal the closed forms at every point and do not depend on the head count. Where QKᵀ+PV hold ≥ 80% of the FLOPs, "
                f"time grows in n with exponent {units_txt('attention_sdpa')} for fused attention, {units_txt('block_sdpa')} for a block and {units_txt('attention_explicit')} "
                f"for the explicit path (target 2 ± {EXP_TOL}); the explicit path's time per score entry rises from {pe_small['scores_explicit']:.1f} ns (n = 256–1024) to "
                f"{pe_big['scores_explicit']:.1f} ns at n = {n_big} as its n×n tensors outgrow the caches, while the fused kernel's stays near {pe_big['scores_sdpa']:.1f} ns. "
                f"In d the exponents are {', '.join(f'{r.slope:.2f}' for r in d_fits.itertuples())} (target 1 ± {EXP_TOL}). "
                f"Equal FLOPs do not mean equal time across heads: at d = {p['heads_d']}, n = {p['heads_n']} the slowest head count takes {head_ratio['explicit']:.1f}× (explicit) and "
                f"{head_ratio['sdpa']:.1f}× (fused) the time of the fastest (h = 1). The counted crossover with projections + FFN is n = {closed_x:g}d; in time it comes at {x_sdpa or 'a point outside the range'}."
            ),
            key_number=key,
            evidence=_finite(
                {
                    "all_counts_equal": all_equal,
                    "head_count_spread_flops": head_spread,
                    "causal_minus_noncausal_flops": causal_gap,
                    "fits": [
                        {
                            k: (v if not isinstance(v, float) else round(v, 4))
                            for k, v in r.items()
                            if k not in ("x", "y")
                        }
                        for r in allfits.to_dict("records")
                    ],
                    "heads_ratio": head_ratio,
                    "heads_fastest_h": head_best,
                    "counted_crossover_n_over_d": counted_x,
                    "closed_crossover_n_over_d": closed_x,
                    "time_crossover": xrows,
                    "n_sdpa_fit": n_sdpa[["d", "slope"]].to_dict("records"),
                    "score_time_per_entry_ns": {
                        "n_256_to_1024_median": pe_small,
                        "largest_n": pe_big,
                        "n": n_big,
                    },
                    "tolerance": EXP_TOL,
                    "share_min": SHARE_MIN,
                }
            ),  # fmt: skip
            sub_verdicts=subs,
            caveats=[
                "One CPU thread, batch 1, float32, no autograd; other processes may add noise (medians and quartiles over repeats are reported). On a GPU, fused kernels and tensor cores move every crossover.",
                "The FLOP convention counts matmuls only. The softmax and the reads and writes of the n×n matrix are O(h·n²) and not in the count; they are why the explicit path costs more than its FLOPs suggest, and why head count changes time.",
                "Causal attention: the MATH and explicit paths compute all n² scores and mask them (no FLOPs saved, as counted); the fused CPU kernel with is_causal skips masked blocks, which this claim's timings (non-causal) do not use.",
                "Rounds are timed across all sizes in turn; when the machine's speed changes between rounds (other processes), the pooled fit's CI widens, while the per-round slopes in the exponents table stay paired. The verdict uses the pooled fit, as pre-registered.",
                "Fits use the sizes where QKᵀ+PV hold ≥ 80% of the counted FLOPs; below that the exponent is lower because the projections and FFN (linear in n) weigh in, as the 'FLOPs predict' column shows.",
            ],
        )

    def _time_table(self, runs):
        rows = []
        for r in runs:
            if r["config"]["kind"] != "time":
                continue
            for pt in r["metrics"]["points"]:
                row = {"sweep": r["config"]["sweep"], "d": pt["d"], "h": pt["h"], "n": pt["n"]}
                for unit, tt in pt["times"].items():
                    row[unit] = tt["median"]
                    row[f"{unit}_q25"], row[f"{unit}_q75"] = tt["q25"], tt["q75"]
                    row[f"{unit}_times"] = tt["times"]
                rows.append(row)
        return pd.DataFrame(rows)

    def _fit(self, g, unit, var, p, d=None, judged=True):
        """Fit log time on log var over every repeat; n-fits only where the n² term holds >= SHARE_MIN of FLOPs."""
        g = g.sort_values(var)
        if var == "n":
            cfgs = [unit_config(int(r.d), int(r.h), int(r.n)) for r in g.itertuples()]
            keep = np.array(
                [score_share(unit, c, int(r.n)) >= SHARE_MIN for c, r in zip(cfgs, g.itertuples())]
            )
        else:
            keep = np.ones(len(g), bool)
        sel = g[keep]
        row = {
            "variable": var,
            "unit": unit,
            "d": int(d) if d is not None else f"{sel.d.min()}–{sel.d.max()}" if len(sel) else "",
            "judged": judged,
        }
        if len(sel) < 2:
            return {
                **row,
                "range": "—",
                "sizes": len(sel),
                "slope": math.nan,
                "lo": math.nan,
                "hi": math.nan,
                "flop_slope": math.nan,
                "evaluated": False,
                "pass": False,
                "x": [],
                "y": [],
            }
        xs = np.concatenate([[getattr(r, var)] * len(getattr(r, f"{unit}_times")) for r in sel.itertuples()])
        ys = np.concatenate([getattr(r, f"{unit}_times") for r in sel.itertuples()])
        f = loglog_fit(xs, ys)
        flops = [
            unit_flops(unit, unit_config(int(r.d), int(r.h), int(r.n)), int(r.n)) for r in sel.itertuples()
        ]
        fs = loglog_fit(sel[var].values, flops).slope
        target = N_EXP if var == "n" else D_EXP
        return {
            **row, "range": f"{sel[var].min()}–{sel[var].max()}", "sizes": len(sel), "slope": f.slope, "lo": f.slope_lo, "hi": f.slope_hi,
            "flop_slope": fs, "evaluated": True, "pass": bool(abs(f.slope - target) <= EXP_TOL), "x": sel[var].tolist(), "y": sel[unit].tolist(),
        }  # fmt: skip

    # ------------------------------------------------------------------ plots
    def plot_flops_time(self, cdf, ns_t, fdf, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=5.0, height=3.9)
        g = cdf[(cdf.backend == "sdpa") & (~cdf.causal) & (cdf.h == 1)]
        dense_n = np.geomspace(g.n.min(), g.n.max(), 60).astype(int)
        for i, d in enumerate(sorted(g.d.unique())):
            c = unit_config(int(d), 1, 1)
            for unit, ls, fn in (("attention", "-", attention_flops), ("block", "--", block_flops)):
                s = g[(g.d == d) & (g.unit == unit)].sort_values("n")
                a.loglog(dense_n, [fn(c, int(n)) for n in dense_n], color=f"C{i}", ls=ls, lw=1)
                a.loglog(
                    s.n,
                    s.counted,
                    color=f"C{i}",
                    marker="o" if unit == "attention" else "s",
                    ls="none",
                    ms=4.5,
                    label=f"{unit}, d={d}",
                )
        a.plot([], [], "k-", lw=1, label="closed form (attention)")
        a.plot([], [], "k--", lw=1, label="closed form (block)")
        a.set_xlabel("sequence length n (tokens)")
        a.set_ylabel("counted forward FLOPs (matmuls, MAC = 2)")
        a.set_title("Counted FLOPs (markers) vs closed forms (lines)")
        a.legend(fontsize=6.5, ncol=2)
        colors = {"attention_explicit": "C0", "attention_sdpa": "C1", "block_sdpa": "C2"}
        for d, s in ns_t.groupby("d"):
            s = s.sort_values("n")
            ls = "-" if d == min(ns_t.d) else "--"
            for unit, col in colors.items():
                fr = fdf[(fdf.d == d) & (fdf.unit == unit)].iloc[0]
                lab = f"{_unit_short(unit)}, d={d}" + (f": slope {fr.slope:.2f}" if fr.evaluated else "")
                yerr = np.array([s[unit] - s[f"{unit}_q25"], s[f"{unit}_q75"] - s[unit]]).clip(0)
                b.errorbar(s.n, s[unit], yerr=yerr, color=col, ls=ls, marker="o", ms=3, capsize=2, label=lab)
                if fr.evaluated:
                    xs = np.array(fr.x, float)
                    b.plot(
                        xs,
                        np.exp(np.log(np.array(fr.y)).mean()) * (xs / np.exp(np.log(xs).mean())) ** fr.slope,
                        color="k",
                        lw=2.2,
                        alpha=0.35,
                    )
        b.set_xscale("log")
        b.set_yscale("log")
        b.set_xlabel("sequence length n (tokens)")
        b.set_ylabel("median wall time (s), bars: quartiles")
        b.set_title("Wall time vs n (grey: fitted where QKᵀ+PV ≥ 80% of FLOPs)")
        b.legend(fontsize=6, ncol=1)
        out.figure(
            "flops-time-vs-n",
            fig,
            f"Left: counted forward FLOPs of one attention module and one pre-LN block (h = 1) against n, for several widths; each point equals its closed form. Right: median wall time (CPU, batch 1, quartile bars) of the attention module (explicit and fused SDPA) and a block, head size {p['head_dim']}; thick grey lines are the log-log fits over the sizes where the n² term holds at least 80% of the FLOPs, with the fitted slopes in the legend.",
        )

    def plot_d(self, d_t, dfits, p, out):
        from tfclaims.plotting import subplots

        fig, (a,) = subplots(width=5.2, height=3.8)
        s = d_t.sort_values("d")
        for unit, col in (("attention_explicit", "C0"), ("attention_sdpa", "C1"), ("block_sdpa", "C2")):
            fr = dfits[dfits.unit == unit].iloc[0]
            yerr = np.array([s[unit] - s[f"{unit}_q25"], s[f"{unit}_q75"] - s[unit]]).clip(0)
            a.errorbar(
                s.d,
                s[unit],
                yerr=yerr,
                color=col,
                marker="o",
                ms=3.5,
                capsize=2,
                label=f"{_unit_short(unit)}: slope {fr.slope:.2f} [{fr.lo:.2f}, {fr.hi:.2f}] (FLOPs {fr.flop_slope:.2f})",
            )
        dd = s.d.values.astype(float)
        a.plot(dd, s.attention_sdpa.values[0] * dd / dd[0], "k:", lw=0.8, label="∝ d")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel(f"model width d (head size {p['d_sweep_head_dim']}, h = d/{p['d_sweep_head_dim']})")
        a.set_ylabel("median wall time (s)")
        a.set_title(f"Wall time vs d at n = {p['d_sweep_n']}")
        a.legend(fontsize=6.5)
        out.figure(
            "time-vs-d",
            fig,
            f"Median wall time against the model width d at n = {p['d_sweep_n']} with the head size fixed at {p['d_sweep_head_dim']} (quartile bars); slopes are log-log fits over every repeat with 95% CIs, beside the slope the FLOP closed form predicts. The block's slope exceeds 1 because its projections and FFN grow as d².",
        )

    def plot_heads(self, h_t, hdf, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.8, height=3.7)
        for unit, col, ls in (
            ("attention_explicit", "C0", "-"),
            ("attention_sdpa", "C1", "-"),
            ("scores_explicit", "C0", "--"),
            ("scores_sdpa", "C1", "--"),
        ):
            yerr = np.array([h_t[unit] - h_t[f"{unit}_q25"], h_t[f"{unit}_q75"] - h_t[unit]]).clip(0) * 1e3
            a.errorbar(
                h_t.h,
                h_t[unit] * 1e3,
                yerr=yerr,
                color=col,
                ls=ls,
                marker="o",
                ms=3.5,
                capsize=2,
                label=UNITS[unit],
            )
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel(f"number of heads h (head size {p['heads_d']}/h)")
        a.set_ylabel("median wall time (ms)")
        a.set_title(f"Time vs heads at d = {p['heads_d']}, n = {p['heads_n']}")
        a.legend(fontsize=6.5)
        b.plot(hdf["h"], hdf["counted FLOPs"] / 1e9, "ko-", ms=3.5, label="counted FLOPs (GFLOP)")
        b.set_xscale("log", base=2)
        b.set_xlabel("number of heads h")
        b.set_ylabel("counted forward GFLOPs")
        b.set_ylim(0, hdf["counted FLOPs"].max() / 1e9 * 1.3)
        b2 = b.twinx()
        b2.plot(
            hdf["h"],
            hdf["score bytes h·n²·4 (explicit)"] / 2**20,
            "s--",
            color="C3",
            ms=3.5,
            label="n×n score bytes (MiB, explicit)",
        )
        b2.set_ylabel("score matrices (MiB)")
        b.set_title("FLOPs are flat; the n×n tensors grow with h")
        lines = b.get_lines() + b2.get_lines()
        b.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="center left")
        out.figure(
            "heads",
            fig,
            f"Left: median time of the attention module and of its score part (QKᵀ, softmax, PV) against the head count at fixed d = {p['heads_d']}, n = {p['heads_n']} (quartile bars). Right: counted FLOPs are identical for every h, while the explicit path's n×n score tensors (and the softmax over them) grow as h·n².",
        )

    def plot_crossover(self, cdf, ns_t, xdf, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.9, height=3.8)
        g = cdf[(cdf.backend == "sdpa") & (~cdf.causal)]
        for d in sorted(g.d.unique()):
            gd = g[(g.d == d) & (g.h == g[g.d == d].h.min())]
            s = gd[gd.unit == "scores"].set_index("n")["counted"].sort_index()
            dn = gd[gd.unit == "dense"].set_index("n")["counted"].sort_index()
            a.loglog(s.index / d, s / dn, "o-", ms=3.5, label=f"d = {d}")
        a.axhline(1, color="k", lw=0.8)
        a.axvline(6, color="k", ls="--", lw=0.8, label="n = 6d")
        a.set_xlabel("n / d")
        a.set_ylabel("FLOPs (QKᵀ+PV) / (projections + FFN)")
        a.set_title("Counted crossover: n = 6d")
        a.legend(fontsize=7)
        for i, (d, s) in enumerate(ns_t.groupby("d")):
            s = s.sort_values("n")
            c = f"C{i}"
            b.loglog(s.n, s.dense * 1e3, color=c, marker="s", ms=3, ls="-", label=f"projections+FFN, d={d}")
            b.loglog(
                s.n, s.scores_sdpa * 1e3, color=c, marker="o", ms=3, ls="--", label=f"scores fused, d={d}"
            )
            b.loglog(
                s.n,
                s.scores_explicit * 1e3,
                color=c,
                marker="^",
                ms=3,
                ls=":",
                label=f"scores explicit, d={d}",
            )
            b.axvline(6 * d, color=c, lw=0.8, alpha=0.5)
            for be, mk in (("sdpa", "o"), ("explicit", "^")):
                nx = xdf.loc[xdf.d == d, f"time n* ({be})"].iloc[0]
                if nx and not math.isnan(nx):
                    y = math.exp(np.interp(math.log(nx), np.log(s.n), np.log(s.dense * 1e3)))
                    b.plot([nx], [y], marker=mk, color="k", ms=7, mfc="none")
        b.set_xlabel("sequence length n (tokens)")
        b.set_ylabel("median wall time (ms)")
        b.set_title("Measured: score part vs dense part of a block")
        b.legend(fontsize=5.8)
        out.figure(
            "crossover",
            fig,
            "Left: counted FLOPs of QKᵀ+PV over the projections + FFN of a block against n/d; they cross at n = 6d for every width. Right: measured time of the score part (fused and explicit) and of the dense part (norms, projections, FFN); vertical lines mark n = 6d, open black markers the measured crossings.",
        )


def _finite(obj):
    """NaN -> None (strict JSON), recursively."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _unit_short(unit: str) -> str:
    return {
        "attention_explicit": "attention explicit",
        "attention_sdpa": "attention fused",
        "block_sdpa": "block",
    }.get(unit, unit)


def _crossing(n, a, b) -> float | None:
    """First n where curve a (scores) reaches curve b (dense), interpolated in log-log; None if never."""
    la, lb, ln = np.log(a), np.log(b), np.log(n.astype(float))
    diff = la - lb
    if diff[0] >= 0:
        return float(n[0])
    for i in range(1, len(n)):
        if diff[i] >= 0:
            f = diff[i - 1] / (diff[i - 1] - diff[i])
            return float(math.exp(ln[i - 1] + f * (ln[i] - ln[i - 1])))
    return None


def _asymptotic_start(g, unit: str, min_slope: float = 1.6) -> float | None:
    """Smallest n from which every local slope (between consecutive sizes) of time in n is >= min_slope."""
    g = g.sort_values("n")
    n, t = np.log(g["n"].values.astype(float)), np.log(g[unit].values)
    slopes = np.diff(t) / np.diff(n)
    for i in range(len(slopes)):
        if (slopes[i:] >= min_slope).all():
            return float(g["n"].values[i])
    return None


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(AttentionComplexity)
