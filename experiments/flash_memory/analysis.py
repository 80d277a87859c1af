"""flash_memory: observation tables from its records (exact byte counts: what each path saves for backward,
the fitted exponents in n, the peak memory of forward + backward), its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing, loglog
from tfclaims.evidence.stats import loglog_fit
from tfclaims.measure.attention_units import ITEMSIZE, VARIANTS, classify, hand_bytes

FUSED = ("fused", "fused_causal")  # the fused kernel without a mask argument
PEAKED = ("explicit", "explicit_causal", "fused", "fused_causal")  # the paths the peak part measures

# The columns of the observation tables that the declarations read
EXPONENT = Readout(
    "exponent",
    "log-log exponent in n",
    definition="least squares of log bytes on log n (saved bytes over the fit sizes); of the peak, least "
    "squares of log increment on log n (the peak's growth from each size to the next, so its constant part "
    "cancels; sizes that double); exact counts, so one fixed number",
    fmt=".3f",
)
STORAGES = Readout(
    "storages",
    "storages kept for backward",
    definition="distinct saved storages with at least B·h·n² elements (n×n), with B·h·n (per row), or, at "
    "the inventory size, with B·h·n·d_k (n×d)",
    fmt=".0f",
)
HAND_ERR = Readout(
    "hand_error",
    "measured − hand-formula bytes",
    "bytes",
    definition="bytes saved for backward (saved-tensor hooks, distinct storages, parameters excluded) less "
    "the formula derived by hand from what each operation saves",
    fmt="+.0f",
)
INV_ERR = Readout(
    "inventory_error",
    "saved bytes − inventory sum",
    "bytes",
    definition="saved_bytes less the sum of the listed storages (two readings of the same hooks)",
    fmt="+.0f",
)
RATIO_ERR = Readout(
    "ratio_error",
    "explicit/fused over its closed form, − 1",
    definition="saved bytes explicit / fused, over (3n·d_k + n²)/(4n·d_k + n), less 1",
    fmt="+.2g",
)
LIVE = Readout(
    "live",
    "peak over its live-set unit",
    definition="peak bytes of forward + backward over 3·h·n²·4 (P, dP and dS, which the explicit backward "
    "holds at once; on CUDA 4·h·n²·4, softmax's backward kernel holding one n×n buffer beside them) on the "
    "explicit paths, over h·n·d_k·4 (one n×d tensor) on the fused ones",
    fmt=".3f",
)
READOUTS = (EXPONENT, STORAGES, HAND_ERR, INV_ERR, RATIO_ERR, LIVE)


def live_nxn(device: str) -> int:
    """n×n tensors alive at once at the explicit backward's peak: P, dP and dS; on CUDA also the buffer that
    softmax's backward kernel allocates while it writes dS (one more n×n: the CUDA allocator read op by op on
    an H200, torch 2.11, float32 and bfloat16, n = 2,048 and 4,096; the CPU kernel allocates none)."""
    return 4 if str(device).startswith("cuda") else 3


def live_unit(variant: str, n: int, h: int, dk: int, itemsize: int = 4, device: str = "cpu") -> int:
    """The bytes a path's peak is counted in: the live n×n tensors per head (explicit), one n×d (fused)."""
    return itemsize * h * (live_nxn(device) * n * n if variant.startswith("explicit") else n * dk)


def fit_sizes(ns, fit_from: int) -> list:
    """The sizes the saved-bytes exponent is fitted over (n ≥ fit_from)."""
    return [n for n in ns if n >= fit_from]


# ------------------------------------------------------------------ observation tables
def _keeps(saved: list[dict], p: dict, no_nxn_from: int) -> pd.DataFrame:
    """What the fused paths keep: n×n and per-row storages at every n ≥ no_nxn_from·head size, and the n×d
    storages at the inventory size."""
    h, dk = p["heads"], p["head_dim"]
    rows = []
    for r in saved:
        n = r["config"]["n"]
        for v in FUSED:
            m = r["metrics"]["variants"][v]
            if n >= no_nxn_from * dk:
                rows.append({"variant": v, "what": "n×n", "n": n, "unit": n, "storages": m["n2_storages"]})
                rows.append(
                    {"variant": v, "what": "per row", "n": n, "unit": n, "storages": m["row_storages"]}
                )
            if r["config"]["inventory"]:
                kinds = [
                    classify(t["bytes"] // ITEMSIZE[t["dtype"]], 1, h, n, dk, m.get("kernel", ""))
                    for t in m.get("inventory", [])
                ]
                rows.append({"variant": v, "what": "n×d", "n": n, "unit": n, "storages": kinds.count("n×d")})
    return pd.DataFrame(rows, columns=["variant", "what", "n", "unit", "storages"])


def _fits(wide: pd.DataFrame, pk: pd.DataFrame, fit_from: int) -> pd.DataFrame:
    rows = []
    s = wide[wide.n >= fit_from]
    if len(s) >= 2:
        rows += [
            {
                "quantity": "saved",
                "variant": v,
                "unit": 0,
                "exponent": loglog_fit(s.n, s[v]).slope,
                "range": f"{s.n.min()}–{s.n.max()}",
            }
            for v in VARIANTS
        ]
    if len(pk) >= PEAK_SIZES:
        rng = f"{pk.n.min()}–{pk.n.max()}"
        rows += [
            {
                "quantity": "peak",
                "variant": v,
                "unit": 0,
                "exponent": growth_exponent(pk.n, pk[v]),
                "range": rng,
            }
            for v in PEAKED
        ]
    return pd.DataFrame(rows, columns=["quantity", "variant", "unit", "exponent", "range"])


PEAK_SIZES = 3  # two increments: the fewest an exponent of the growth is fitted from


def growth_exponent(n, peak) -> float:
    """The exponent e of a peak c + a·nᵉ (+ lower powers) from sizes n that double: least squares of log
    increment on log n over successive sizes (an increment grows as nᵉ; the constant c, the model and the
    allocator's working set, cancels). NaN where a peak does not grow."""
    n, peak = np.asarray(n, float), np.asarray(peak, float)
    inc = np.diff(peak[np.argsort(n)])
    if np.any(inc <= 0):
        return float("nan")
    return loglog_fit(np.sort(n)[:-1], inc).slope


def _ratio(df: pd.DataFrame, h: int, dk: int, at, it: int = 4) -> pd.DataFrame:
    """explicit / fused saved bytes against the ratio of their hand formulas (`hand_bytes`, for the fused
    kernel that ran: (3n·d_k + n²)/(4n·d_k + n) for float32 on the CPU), at the sizes `at` that were measured
    (else at the largest n)."""
    by = df.set_index(["variant", "n"])
    ns = sorted(df.n.unique())
    ns = [n for n in at if n in ns] or [int(ns[-1])]
    rows = []
    for n in ns:
        ratio = by.loc[("explicit", n), "saved bytes"] / by.loc[("fused", n), "saved bytes"]
        kernel = by.loc[("fused", n), "kernel"]
        closed = hand_bytes("explicit", 1, h, n, dk, itemsize=it) / hand_bytes(
            "fused", 1, h, n, dk, itemsize=it, kernel=kernel
        )
        rows.append(
            {
                "n": n,
                "unit": n,
                "ratio": float(ratio),
                "closed form": closed,
                "ratio_error": float(ratio) / closed - 1,
            }
        )
    return pd.DataFrame(rows)


def observe(
    runs: list[dict], p: dict, *, fit_from: int, no_nxn_from: int, ratio_at
) -> dict[str, pd.DataFrame]:
    """saved: one row per (variant, n), bytes saved for backward against the hand formula and the inventory;
    keeps: one row per (fused path, n, kind of storage); fits: one row per (saved or peak, variant), the
    exponent in n; ratio: explicit / fused at the sizes of the anchors; wide and peak: bytes by n."""
    saved = sorted(part(runs, "saved"), key=lambda r: r["config"]["n"])
    rows = [
        {
            "variant": v,
            "n": r["config"]["n"],
            "unit": r["config"]["n"],
            "saved bytes": m["bytes"],
            "hand formula": m["hand"],
            "inventory bytes": m["inventory_bytes"],
            "hand_error": m["bytes"] - m["hand"],
            "inventory_error": m["bytes"] - m["inventory_bytes"],
            "cuda peak bytes": m.get("cuda_peak_bytes"),
            "kernel": m.get("kernel", ""),
        }
        for r in saved
        for v, m in r["metrics"]["variants"].items()
    ]
    df = pd.DataFrame(rows)
    wide = df.pivot(index="n", columns="variant", values="saved bytes").reset_index() if len(df) else df
    h, dk, it = p["heads"], p["head_dim"], ITEMSIZE[p["dtype"]]
    peaks = sorted(part(runs, "peak"), key=lambda r: r["config"]["n"])
    pk = pd.DataFrame([{"n": r["config"]["n"], **r["metrics"]["peak_bytes"]} for r in peaks])
    dev = {r["config"]["n"]: r["metrics"].get("device", "cpu") for r in peaks}
    return {
        "saved": df,
        "keeps": _keeps(saved, p, no_nxn_from),
        "fits": _fits(wide, pk, fit_from),
        "ratio": _ratio(df, h, dk, ratio_at, it) if len(df) else pd.DataFrame(),
        "wide": wide,
        "peak": pk,
        "peak_live": pd.DataFrame(
            [
                {
                    "variant": v,
                    "n": r.n,
                    "unit": r.n,
                    "live": getattr(r, v) / live_unit(v, r.n, h, dk, it, dev[r.n]),
                }
                for r in pk.itertuples()
                for v in PEAKED
            ],
            columns=["variant", "n", "unit", "live"],
        ),
    }


# ------------------------------------------------------------------ tables
def _inventory(inv_run: dict, p: dict, out) -> pd.DataFrame:
    h, dk, n0 = p["heads"], p["head_dim"], inv_run["config"]["n"]
    inv = pd.DataFrame(
        [
            {
                "variant": name,
                "kernel (grad_fn)": m.get("kernel", ""),
                "shape": "×".join(map(str, t["shape"])),
                "dtype": t["dtype"],
                "bytes": t["bytes"],
                "kind": classify(t["bytes"] // ITEMSIZE[t["dtype"]], 1, h, n0, dk, m.get("kernel", "")),
            }
            for name, m in inv_run["metrics"]["variants"].items()
            for t in m.get("inventory", [])
        ]
    )
    out.table(
        "saved_tensors", inv, f"Every storage each path keeps for backward at n = {n0}", in_report=False
    )
    summ = [
        {
            "variant": name,
            "backward node": g["kernel (grad_fn)"].iloc[0] or "—",
            "n×n tensors": "; ".join(f"{r.shape} {r.dtype}" for r in g[g.kind == "n×n"].itertuples())
            or "none",
            "n×d tensors": int((g.kind == "n×d").sum()),
            "per-row tensors": "; ".join(
                f"{r.shape} {r.dtype}" for r in g[g.kind == "per row (n)"].itertuples()
            )
            or "none",
            "other": int((g.kind == "other").sum()),
            "total bytes": int(g.bytes.sum()),
        }
        for name, g in inv.groupby("variant", sort=False)
    ]
    out.table(
        "saved_tensors_summary",
        pd.DataFrame(summ),
        f"What each path keeps for backward at n = {n0} (distinct storages, parameters excluded; n×d = q, "
        "k, v, outputs, inputs)",
    )
    return inv


def write_tables(runs, t: dict, p: dict, fit_from: int, out) -> dict:
    """Every table of the claim; returns the numbers the summary quotes (kernel, log-sum-exp, ratios)."""
    h, dk, df, wide, pk = p["heads"], p["head_dim"], t["saved"], t["wide"].copy(), t["peak"].copy()
    wide["explicit / fused"] = wide["explicit"] / wide["fused"]
    wide["module explicit / sdpa"] = wide["module_explicit"] / wide["module_sdpa"]
    equal = bool((df["hand_error"] == 0).all())
    out.table(
        "saved_bytes",
        wide[["n", *VARIANTS, "explicit / fused", "module explicit / sdpa"]],
        f"Bytes saved for backward (batch 1, {h} heads of size {dk}, {p['dtype']}); every value equals its "
        f"hand formula: {equal}",
    )
    cols = [
        "n",
        "variant",
        "kernel",
        "saved bytes",
        "hand formula",
        "equal",
        "cuda peak bytes",
        "inventory bytes",
    ]
    long = df.assign(equal=df["hand_error"] == 0)[cols]
    out.table("saved_bytes_long", long, "Saved bytes vs hand formula, every variant and n", in_report=False)
    fits = t["fits"].assign(description=t["fits"].variant.map(VARIANTS))
    fits = fits[["quantity", "variant", "description", "exponent", "range"]]
    out.table(
        "exponents",
        fits,
        f"Log-log exponent in n of the saved bytes (n ≥ {fit_from}) and of the growth of the peak memory of "
        "forward + backward (its increments from each size to the next)",
    )
    peak_ratio = {}
    if len(pk):
        pk["explicit / fused"] = pk["explicit"] / pk["fused"]
        pk["explicit causal / fused causal"] = pk["explicit_causal"] / pk["fused_causal"]
        peak_ratio = dict(zip(pk.n.astype(int), pk["explicit / fused"]))
        where = part(runs, "peak")[0]["metrics"]["device"]
        how = (
            "torch.cuda.max_memory_allocated"
            if where.startswith("cuda")
            else "the CPU profiler's memory timeline"
        )
        out.table(
            "peak_memory",
            pk,
            f"Peak memory of forward + backward (batch 1, {h} heads of size {dk}, {p['dtype']}, bytes beyond "
            f"what existed before; {how})",
        )
    inv_run = next((r for r in part(runs, "saved") if r["config"]["inventory"]), None)
    inv = _inventory(inv_run, p, out) if inv_run else pd.DataFrame(columns=["variant", "kind"])
    lse = inv[(inv.variant == "fused") & (inv.kind == "per row (n)")]
    fused = inv[inv.variant == "fused"]
    grads = [
        r["metrics"]["max_grad_diff_fused_vs_explicit"]
        for r in part(runs, "saved")
        if r["metrics"]["max_grad_diff_fused_vs_explicit"] is not None
    ]
    return {
        "wide": wide,
        "kernel": fused["kernel (grad_fn)"].iloc[0] if len(fused) else "",
        "lse": f"{lse.iloc[0]['shape']} {lse.iloc[0]['dtype']}" if len(lse) else "none found",
        "ratio": dict(zip(t["ratio"]["n"], t["ratio"]["ratio"])) if len(t["ratio"]) else {},
        "peak_ratio": peak_ratio,
        "max_grad_diff": max(grads) if grads else None,
        "all_equal_hand": equal,
    }


# ------------------------------------------------------------------ figures
STYLES = {
    "explicit": ("C0", "o", "-"),
    "explicit_causal": ("C0", "^", ":"),
    "math": ("C2", "s", "--"),
    "fused": ("C1", "o", "-"),
    "fused_causal": ("C1", "^", ":"),
    "fused_mask": ("C3", "d", "--"),
}


@drawing
def plot_bytes(wide: pd.DataFrame, p: dict, fit_from: int, out) -> None:
    from tfclaims.plotting import subplots

    fig, (a, b) = subplots(2, width=5.0, height=3.9)
    for i, (name, (col, mk, ls)) in enumerate(STYLES.items()):
        if (wide.n >= fit_from).sum() >= 2:  # the fit and its exponent; a colour per path
            loglog(a, wide.n, wide[name] / 2**20, label=name, fit_from=fit_from, color=f"C{i}")
        else:
            a.loglog(wide.n, wide[name] / 2**20, color=col, marker=mk, ls=ls, ms=4, label=name)
    a.set_xscale("log", base=2)
    a.set(xlabel="sequence length n (tokens)", ylabel="bytes saved for backward (MiB)")
    a.set_title(f"Attention core, {p['heads']} heads × {p['head_dim']}, batch 1")
    a.legend(fontsize=6)
    b.semilogx(wide.n, wide["explicit / fused"], "ko-", ms=4, label="core: explicit / fused")
    b.semilogx(
        wide.n,
        wide["module explicit / sdpa"],
        "s--",
        color="C4",
        ms=4,
        label="whole causal module: explicit / SDPA",
    )
    b.scatter(
        [2048, 4096], [10, 20], marker="*", s=90, color="C3", zorder=3, label="FlashAttention paper: 10×, 20×"
    )
    b.set_xscale("log", base=2)
    b.set(
        xlabel="sequence length n (tokens)",
        ylabel="ratio of saved bytes",
        title="How much more the n×n path keeps",
    )
    b.legend(fontsize=7)
    out.figure(
        "saved-bytes",
        fig,
        "Left: bytes autograd saves for backward against n for the explicit path (keeps the n×n "
        "probabilities), SDPA on the MATH kernel (same) and PyTorch's fused kernel without a mask, with "
        "is_causal, and with a mask tensor (which it keeps as float32 n×n); lines are log-log fits over n "
        "≥ 16·head size with the exponent. Right: the ratio explicit/fused for the core and for the whole "
        "causal attention module, beside FlashAttention's reported savings.",
    )


@drawing
def plot_cuda(df: pd.DataFrame, out) -> None:
    cuda = df.dropna(subset=["cuda peak bytes"])
    if not len(cuda):
        return
    from tfclaims.plotting import subplots

    fig, (a,) = subplots(width=5.0, height=3.8)
    for name, g in cuda.groupby("variant"):
        a.loglog(g.n, g["cuda peak bytes"] / 2**20, marker="o", ms=3.5, label=name)
    a.set_xscale("log", base=2)
    a.set(xlabel="sequence length n (tokens)", ylabel="peak allocated, forward + backward (MiB)")
    a.set_title("CUDA peak memory")
    a.legend(fontsize=7)
    out.figure(
        "cuda-peak",
        fig,
        "Peak CUDA memory allocated during forward and backward (torch.cuda.max_memory_allocated after a "
        "reset, inputs excluded), per path.",
    )


def jsonable(obj):
    """NaN -> None (strict JSON), numpy scalars -> Python, recursively; dict keys made plain."""
    if isinstance(obj, float) or hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0:
        v = obj.item() if hasattr(obj, "item") else obj
        return None if isinstance(v, float) and math.isnan(v) else v
    if isinstance(obj, dict):
        return {(k.item() if hasattr(k, "item") else k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj
