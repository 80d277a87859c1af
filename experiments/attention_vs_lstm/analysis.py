"""attention_vs_lstm's readouts, observation tables, figures and summary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import runs_table, timing_rows
from tfclaims.evidence.tuning import null_at_choice, read_sweep, sweep_curves

from .grid import ARMS

ACC = Readout(
    "final_acc",
    "held-out recall accuracy",
    better="higher",
    fmt=".3f",
    definition="share of the scored positions (t ≥ k) of fixed held-out sequences whose most likely "
    "token is the one k back",
    fn=lambda m: m.get("final_acc") if m.get("diverged_at") is None else None,
)
NAMES = {"attention": "self-attention", "lstm": "LSTM"}


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """throughput: per length n, layer and round, log seconds per token; runs, tuned, choices: the recall
    sweep per distance as `evidence.tuning` reads it; first: the null pair at the shortest distance."""
    thr = [
        row
        for rec in part(runs, "throughput")
        for r in rec["metrics"]["rows"]
        for k, times in r["times"].items()
        for row in timing_rows(
            [t / r["tokens"] for t in times], None, n=r["n"], log2n=math.log2(r["n"]), arch=k
        )
    ]
    sel = set(p["selection_seeds"])

    def role(c, m):
        return "null" if c["seed"] >= null_offset else "selection" if c["seed"] in sel else "test"

    t = runs_table(
        part(runs, "recall"),
        readouts,
        role=role,
        scale=lambda c, m: f"k{c['k']}",
        log2k=lambda c, m: math.log2(c["k"]),
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
    )
    swept = t[t.role.isin(["selection", "test"])] if len(t) else t
    choices, tuned, _ = read_sweep(swept, ARMS, {f"k{k}": {"k": k} for k in p["ks"]})
    return {
        "throughput": pd.DataFrame(thr),
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "curves": sweep_curves(t, "arch"),
        "first": null_at_choice(t, tuned, choices, "attention", f"k{p['ks'][0]}"),
    }


def throughput_table(thr: pd.DataFrame) -> pd.DataFrame:
    """Per n: median tokens per second of each layer and attention's over the LSTM's."""
    if thr.empty:
        return thr
    tps = (1 / thr.groupby(["n", "arch"]).seconds.median()).unstack("arch")
    tps["attention / lstm"] = tps["attention"] / tps["lstm"]
    return tps.reset_index()


def crossover(thr: pd.DataFrame) -> float | None:
    """The length where attention's tokens/s falls to the LSTM's (log-linear interpolation between measured
    lengths); None if it never does in the measured range."""
    tab = throughput_table(thr)
    if tab.empty:
        return None
    r = np.log(tab["attention / lstm"].to_numpy())
    n = tab["n"].to_numpy(float)
    for i in range(1, len(r)):
        if r[i - 1] > 0 >= r[i]:
            w = r[i - 1] / (r[i - 1] - r[i])
            return float(np.exp(np.log(n[i - 1]) + w * (np.log(n[i]) - np.log(n[i - 1]))))
    return None


@drawing
def plot(t: dict, p: dict, out) -> None:
    """Left: tokens per second against n, both layers; right: recall accuracy against k, each arm at its
    chosen rate."""
    from tfclaims.plotting import band, subplots

    fig, (a0, a1) = subplots(2, width=4.6, height=3.5)
    thr = t["throughput"]
    if len(thr):
        g = thr[thr.arch.isin(list(ARMS))].groupby(["arch", "n"]).seconds
        for arch in ARMS:
            med, q1, q3 = (1 / g.quantile(x).loc[arch] for x in (0.5, 0.75, 0.25))
            band(a0, med.index, med, q1, q3, label=NAMES[arch])
        a0.set_xscale("log", base=2)
        a0.set_yscale("log")
        a0.axvline(p["timing_d"], color="grey", ls=":", lw=1, label=f"n = d = {p['timing_d']}")
        a0.set_xlabel("sequence length n (tokens)")
        a0.set_ylabel("training tokens per second")
        a0.set_title("One layer, matched parameters")
        a0.legend(fontsize=7)
    tu = t["tuned"]
    if len(tu):
        for arch in ARMS:
            s = tu[tu.arch == arch].groupby("k").final_acc
            band(a1, s.mean().index, s.mean(), s.min(), s.max(), label=NAMES[arch])
        a1.axhline(1 / p["vocab"], color="grey", ls=":", lw=1, label="chance")
        a1.set_xscale("log", base=2)
        a1.set_xlabel("distance k (positions back)")
        a1.set_ylabel("held-out accuracy")
        a1.set_title("Recall the token k back")
        a1.legend(fontsize=7)
    out.figure(
        "attention-vs-lstm",
        fig,
        "Left: training tokens per second of one causal self-attention layer and one LSTM layer of about the "
        f"same parameters (d = {p['timing_d']}, batch {p['batch_timing']}), median and quartiles of "
        f"{p['repeats']} interleaved rounds; the dotted line is n = d, where Vaswani et al.'s per-layer "
        "costs n²·d and n·d² meet. Right: held-out accuracy of recalling the token k positions back, each "
        f"model at its chosen learning rate, {len(p['seeds'])} fresh seeds (mean and range).",
    )


def plot_sweep(t: dict, p: dict, out) -> None:
    """Per distance, each model's learning-rate sweep and its chosen rate on the fresh seeds."""
    from tfclaims.evidence.plots import sweep_figure

    runs = t["runs"]
    if not len(runs):
        return
    sweep_figure(
        out,
        p,
        t["curves"],
        t["tuned"],
        [f"k{k}" for k in p["ks"]],
        NAMES,
        titles=[f"Recall the token {k} back" for k in p["ks"]],
        measured=f"Final held-out loss against peak learning rate, {p['steps']} steps",
        per="distance",
        each="model",
        unigram=runs.unigram.iloc[0],
        ylabel="final held-out loss (nats/token)",
    )


def summary(t: dict, p: dict) -> str:
    parts = []
    tab = throughput_table(t["throughput"])
    if len(tab):
        n0, n1 = tab.iloc[0], tab.iloc[-1]
        x = crossover(t["throughput"])
        parts.append(
            f"attention trains {n0['attention / lstm']:.2f}× the LSTM's tokens/s at n = {int(n0.n)} and "
            f"{n1['attention / lstm']:.2f}× at n = {int(n1.n)}" + (f" (equal near n = {x:.0f})" if x else "")
        )
    tu = t["tuned"]
    if len(tu):
        m = tu.groupby(["k", "arch"]).final_acc.mean().unstack("arch").dropna()  # diverged: no accuracy
        if m.shape[1] == 2 and len(m):
            parts.append(
                "recall accuracy attention/LSTM "
                + ", ".join(f"{r.attention:.2f}/{r.lstm:.2f} at k = {k}" for k, r in m.iterrows())
            )
    return ("; ".join(parts) + ".") if parts else "Nothing was measured."
