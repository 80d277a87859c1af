"""One figure style for every claim; figures are saved as PNG (for the report) and SVG (for print)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update(
    {
        "figure.dpi": 110,
        "savefig.dpi": 130,
        "font.size": 9.5,
        "axes.titlesize": 10.5,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.fontsize": 8.5,
        "legend.frameon": False,
        "svg.hashsalt": "tfclaims",  # stable SVG ids: regenerated figures diff cleanly
        "svg.fonttype": "none",
    }
)


def subplots(ncols: int = 1, nrows: int = 1, *, width: float = 4.6, height: float = 3.4, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
    return fig, axes.ravel()


def band(ax, x, mean, lo, hi, *, label=None, color=None, marker="o", **kw):
    """A line of means with a shaded confidence band."""
    (line,) = ax.plot(x, mean, marker=marker, ms=3.5, label=label, color=color, **kw)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
    return line


def save_figure(fig, folder: Path, name: str) -> tuple[Path, Path]:
    import io

    from .io import atomic_write_bytes

    folder.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = (folder / f"{name}.png", folder / f"{name}.svg")
    for path, fmt in zip(paths, ("png", "svg")):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt == "svg" else {"Software": None})
        atomic_write_bytes(path, buf.getvalue())
    plt.close(fig)
    return paths


def log_ticks(ax, values, axis: str = "x") -> None:
    """Log scale (base 2) with a plain tick label at each measured value."""
    from matplotlib.ticker import FixedLocator, NullLocator

    values = sorted(set(values))
    getattr(ax, f"set_{axis}scale")("log", base=2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(values))
    target.set_minor_locator(NullLocator())
    getattr(ax, f"set_{axis}ticklabels")([f"{v:g}" for v in values])
