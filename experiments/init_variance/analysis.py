"""`init_variance`'s observation table (per-layer factors against the mean-field closed forms) and figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import drawing
from tfclaims.plotting import subplots

from .mean_field import GAIN2, backward_factor, forward_map

LABEL = {"xavier": "Xavier", "kaiming": "Kaiming"}


def factors(runs: list[dict]) -> pd.DataFrame:
    """One row per run: the mean per-layer change of log2 q (forward) and of log2 r towards the input
    (backward), and each minus what the closed form predicts from the measured q_l, layer by layer."""
    rows = []
    for r in part(runs, "probe"):
        c, m = r["config"], r["metrics"]
        q, g = np.asarray(m["q"]), np.asarray(m["r"])
        g2 = GAIN2[c["init"]]
        fwd = np.log2(q[1:] / q[:-1])
        bwd = np.log2(g[:-1] / g[1:])
        pf = np.array([math.log2(forward_map(c["act"], g2, x) / x) for x in q[:-1]])
        pb = np.array([math.log2(backward_factor(c["act"], g2, x)) for x in q[:-1]])
        rows.append(
            {
                "init": c["init"],
                "act": c["act"],
                "unit": c["seed"],
                "forward": fwd.mean(),
                "backward": bwd.mean(),
                "dev_forward": (fwd - pf).mean(),
                "dev_backward": (bwd - pb).mean(),
                "q_first": q[0],
                "q_last": q[-1],
                "r_first": g[0],
                "r_last": g[-1],
            }
        )
    return pd.DataFrame(rows)


def summary(f: pd.DataFrame) -> pd.DataFrame:
    """Per init and activation: mean per-layer factors (bits) over seeds, and the total change over the
    depth."""
    s = f.groupby(["init", "act"], sort=False).agg(
        forward_bits=("forward", "mean"),
        backward_bits=("backward", "mean"),
        dev_forward=("dev_forward", "mean"),
        dev_backward=("dev_backward", "mean"),
        q_last=("q_last", "median"),
        r_first=("r_first", "median"),
        seeds=("unit", "size"),
    )
    s["forward_factor"] = 2.0**s.forward_bits
    s["backward_factor"] = 2.0**s.backward_bits
    return s.reset_index()


def _predicted(act: str, g2: float, q1: float, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean-field q_l from q₁, and r_l from r_depth = 1 back through the predicted q_l."""
    q = [q1]
    for _ in range(depth - 1):
        q.append(forward_map(act, g2, q[-1]))
    r = [1.0]
    for x in reversed(q[:-1]):
        r.append(r[-1] * backward_factor(act, g2, x))
    return np.asarray(q), np.asarray(r[::-1])


@drawing
def plot(runs: list[dict], out) -> None:
    """log2 of the second moments against the layer, per init and activation (median and range over seeds),
    with the mean-field prediction dashed."""
    recs = part(runs, "probe")
    if not recs:
        return
    fig, axes = subplots(2, 2, width=5.2, height=3.5)
    combos = sorted({(r["config"]["init"], r["config"]["act"]) for r in recs})
    colors = dict(zip(sorted({a for _, a in combos}), ("C0", "C1", "C2", "C3")))
    for col, init in enumerate(("xavier", "kaiming")):
        for row, key in enumerate(("q", "r")):
            ax = axes[row * 2 + col]
            for i, a in combos:
                if i != init:
                    continue
                ys = np.log2(
                    np.array(
                        [
                            r["metrics"][key]
                            for r in recs
                            if r["config"]["act"] == a and r["config"]["init"] == i
                        ]
                    )
                )
                layers = np.arange(1, ys.shape[1] + 1)
                ax.plot(layers, np.median(ys, 0), color=colors[a], label=a)
                ax.fill_between(layers, ys.min(0), ys.max(0), color=colors[a], alpha=0.2, lw=0)
                q1 = float(
                    np.median(
                        [
                            r["metrics"]["q"][0]
                            for r in recs
                            if r["config"]["act"] == a and r["config"]["init"] == i
                        ]
                    )
                )
                pq, pr = _predicted(a, GAIN2[i], q1, ys.shape[1])
                pred = np.log2(pq) if key == "q" else np.log2(pr) + np.median(ys[:, -1])
                ax.plot(layers, pred, color=colors[a], ls="--", lw=0.9)
            what = "activations: log2 E[h_l²]" if key == "q" else "gradients: log2 E[(∂L/∂h_l)²]"
            ax.set(xlabel="layer l", ylabel=what, title=f"{LABEL[init]} init: {what.split(':')[0]}")
    axes[0].legend(title="activation", fontsize=7)
    out.figure(
        "variance",
        fig,
        "Second moments of pre-activations and of their gradients through the depth at "
        "init (solid: median over seeds, band: their range; dashed: the mean-field closed form).",
    )
