"""`flash_speed`'s paths, steps and grid as data (torch-free: the grid, the declarations and the analysis read
them before anything runs; the recipe names its callables with them)."""

from __future__ import annotations

from tfclaims.measure.attention_units import ITEMSIZE, fill_batch, unit_config

EXPLICIT = "explicit"  # the library's explicit attention: softmax(QKᵀ·s) materialised (n×n), then P·V
BACKENDS = ("flash", "efficient", "cudnn", "math")  # SDPA's backends, each forced with sdpa_kernel
FUSED = ("flash", "efficient", "cudnn")  # the ones that never hold the n×n scores (MATH materialises them)
FORWARD, BOTH = "forward", "forward+backward"
AA = "explicit, timed again"  # the explicit forward+backward timed under a second name: the A/A pair
TWICE = "explicit, twice"  # the positive control: the explicit forward+backward called twice per call
MASKS = {False: "nomask", True: "causal"}  # cell labels
KEYS = "ns heads head_dim dtype backends fill_rows check_max_n warmup repeats threads".split()
# n×n tensors alive at once in an explicit forward+backward, rounded up: the scores and the scaled scores (or
# the masked ones), P, dP, dS and the buffer softmax's backward allocates on CUDA (see flash_memory)
LIVE_NXN = 6


def time_grid(p: dict) -> list[dict]:
    """One run per mask (none, causal): every path, step and n of it timed round by round together."""
    unit_config(p["heads"] * p["head_dim"], p["heads"], max(p["ns"]))  # validates the sizes
    unknown = set(p["backends"]) - set(BACKENDS)
    if unknown or "flash" not in p["backends"]:
        raise ValueError(f"backends must include 'flash' and be among {BACKENDS}, got {p['backends']}")
    return [{"causal": c, **{k: p[k] for k in KEYS}, "seed": 0} for c in MASKS]


def key(path: str, step: str, n: int) -> str:
    """The name one callable is timed under."""
    return f"{path}|{step}|{n}"


def peak_bytes(p: dict) -> dict[str, int]:
    """The largest allocations of a run, estimated before it runs (a GPU's budget): the explicit path's n×n
    tensors at the largest n, MATH's (half types computed in float32), and the float64 reference's at the
    largest checked n; each with the sequences a call runs (`fill_batch`)."""
    h, it = p["heads"], ITEMSIZE[p["dtype"]]

    def nxn(n: int) -> int:
        return fill_batch(h, n, p["fill_rows"]) * h * n * n

    top, checked = max(p["ns"]), max(n for n in p["ns"] if n <= p["check_max_n"])
    return {
        "explicit forward+backward at max n": LIVE_NXN * it * nxn(top),
        "math forward+backward at max n": LIVE_NXN * max(it, 4) * nxn(top),
        "float64 reference at the largest checked n": LIVE_NXN * 8 * nxn(checked),
    }
