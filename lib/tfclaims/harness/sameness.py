"""When a re-analysis reproduces a published result: the same decisions, texts and table shapes, and every
number equal within a tolerance far below any printed digit.

Bit-equality of floats is not something one analysis can promise across CPUs: numpy, scipy and pandas
reduce in an order that depends on the SIMD unit, so the same records give, say, a mean difference of
-1.7064451057631547 on one machine and -1.7064451057631553 on another. Those are the same result.

The tolerance. Such drifts are a few units in the 16th digit (a relative 1e-15, at most about 1e-12 after a
tail probability of a t statistic near 50 or a sum of thousands of terms). The finest digit anything prints
is the 6th significant one (figures' SVG coordinates; tables and texts print 3 to 4). `REL_TOL = 1e-9`
sits a thousandfold above the drift and a thousandfold below that digit. Quantities that cancel to about
zero (a difference of two equal means) drift in absolute terms instead, by the operands' rounding:
`ABS_TOL = 1e-12` covers that, and no decision here can move below it (a p-value or probability of 1e-12 is
eight orders below the smallest Holm level in use; readouts are nats, seconds, bytes or ratios, for which
1e-12 is below the rounding of the sums that produce them).

What is compared:
- JSON values (result.json, the fields `check-results` re-analyses): the same structure, keys, strings,
  booleans and integers; floats within the tolerance (NaN equals NaN, an infinity only itself).
- CSV tables: the same header, rows and cells; a cell that differs as text must read as numbers within the
  tolerance on both sides.
- CSV tables: the same header, rows and cells; a cell that differs as text must hold the same text around
  numbers within the tolerance (a cell may hold a list of numbers).
- SVG figures: the same text once every number in it is read within the tolerance; matplotlib prints
  coordinates to six decimals, so a drift that crosses a rounding boundary moves one by 1e-6 of a point,
  hence an absolute allowance of `SVG_ABS = 2e-6` there. Element ids are compared by their order of first
  appearance, not their spelling (matplotlib names a clip path by a hash of its rectangle's floats, so a
  drift renames it), and an embedded image (imshow's) as a PNG.
- PNG figures: the same size and every pixel's channels within `PNG_LEVELS = 4` of 255. Agg renders edges
  at sub-pixel positions, and a coordinate's drift that crosses one of its steps changes an anti-aliased
  edge pixel by a level or two (seen: at most 2, on 134 of 334k pixels); a pixel on up to four such edges
  (a line's two sides, a marker's) moves by at most 4. Anything one can see changes pixels by far more (a
  line moved by a tenth of a pixel, by about 25 levels; a letter, by up to 255).
- Any other file: the same bytes.
"""

from __future__ import annotations

import base64
import csv
import io
import math
import re
from pathlib import Path

REL_TOL = 1e-9
ABS_TOL = 1e-12
SVG_ABS = 2e-6  # one unit of the SVG's sixth decimal, twice: a rounding boundary crossed either way
PNG_LEVELS = 4  # of 255, per channel

_NUMBER = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SVG_ID = re.compile(rb'\bid="([^"]+)"')
_SVG_IMAGE = re.compile(rb"data:image/png;base64,([A-Za-z0-9+/=\s]+)")


def close(a: float, b: float, abs_tol: float = ABS_TOL) -> bool:
    """Two floats equal within the tolerance; NaN equals NaN; an infinity equals only itself."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=abs_tol)


def first_difference(a, b, where: str = "") -> str | None:
    """Where two JSON values first differ beyond the tolerance ("comparisons[3].diff: -1.7 → -1.71"),
    None when they are the same result."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            extra = sorted(set(a) ^ set(b), key=str)
            return f"{where or 'the top level'}: keys {extra} in one only"
        for k in a:
            if (d := first_difference(a[k], b[k], f"{where}.{k}" if where else str(k))) is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} → {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            if (d := first_difference(x, y, f"{where}[{i}]")) is not None:
                return d
        return None
    if _is_float(a) and _is_float(b) and (isinstance(a, float) or isinstance(b, float)):
        return None if close(float(a), float(b)) else f"{where}: {a!r} → {b!r}"
    if type(a) is not type(b) or a != b:
        return f"{where}: {_short(a)} → {_short(b)}"
    return None


def same_values(a, b) -> bool:
    return first_difference(a, b) is None


def _is_float(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _short(v, n: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= n else text[: n - 1] + "…"


def csv_difference(a: str, b: str) -> str | None:
    """Where two CSV texts first differ beyond the tolerance, None when they hold the same table."""
    rows_a, rows_b = list(csv.reader(io.StringIO(a))), list(csv.reader(io.StringIO(b)))
    if len(rows_a) != len(rows_b):
        return f"{len(rows_a) - 1} → {len(rows_b) - 1} rows"
    if rows_a and rows_a[0] != rows_b[0]:
        return f"columns {rows_a[0]} → {rows_b[0]}"
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
        if len(ra) != len(rb):
            return f"row {i}: {len(ra)} → {len(rb)} cells"
        for j, (x, y) in enumerate(zip(ra, rb)):
            if x != y and not _close_text(x, y):
                column = rows_a[0][j] if rows_a and j < len(rows_a[0]) else j
                return f"row {i}, column {column}: {x!r} → {y!r}"
    return None


def _close_text(x: str, y: str) -> bool:
    return _numbers_difference(x.encode(), y.encode(), ABS_TOL) is None


def _numbers_difference(a: bytes, b: bytes, abs_tol: float) -> str | None:
    """Where two texts differ once each number in them is read within the tolerance: their text around the
    numbers, or the first pair of numbers that are not close."""
    if _NUMBER.sub(b"#", a) != _NUMBER.sub(b"#", b):
        return "its text"
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b)):
        if x != y and not close(float(x), float(y), abs_tol=abs_tol):
            return f"a number {x.decode()} → {y.decode()}"
    return None


def svg_difference(a: bytes, b: bytes) -> str | None:
    """Where two SVG figures first differ (see the module's note), None when they draw the same."""
    a, b = _svg_ids(a), _svg_ids(b)
    images_a, images_b = _SVG_IMAGE.findall(a), _SVG_IMAGE.findall(b)
    if len(images_a) != len(images_b):
        return "its images"
    for x, y in zip(images_a, images_b):
        if x != y and (d := png_difference(base64.b64decode(x), base64.b64decode(y))) is not None:
            return f"an embedded image's {d}"
    return _numbers_difference(_SVG_IMAGE.sub(b"#", a), _SVG_IMAGE.sub(b"#", b), SVG_ABS)


def _svg_ids(svg: bytes) -> bytes:
    """The SVG with each element id, and each reference to it, replaced by its order of first appearance."""
    ids = dict.fromkeys(_SVG_ID.findall(svg))
    if not ids:
        return svg
    names = {k: b"@%d" % i for i, k in enumerate(ids)}
    pattern = re.compile(
        rb'(?<=["#])(' + b"|".join(map(re.escape, sorted(ids, key=len, reverse=True))) + rb')(?=[")])'
    )
    return pattern.sub(lambda m: names[m.group(1)], svg)


def png_difference(a: bytes, b: bytes) -> str | None:
    """Where two PNG images differ beyond PNG_LEVELS, None when they show the same figure."""
    import numpy as np
    from PIL import Image

    try:
        x, y = (np.asarray(Image.open(io.BytesIO(d)).convert("RGBA"), dtype=np.int16) for d in (a, b))
    except OSError:
        return "not an image"
    if x.shape != y.shape:
        return f"its size {x.shape[1]}×{x.shape[0]} → {y.shape[1]}×{y.shape[0]} px"
    worst = int(np.abs(x - y).max())
    return None if worst <= PNG_LEVELS else f"pixels by up to {worst} levels"


def file_difference(a: Path, b: Path) -> str | None:
    """Where file `b` differs from file `a` beyond the tolerance (by kind, as above); None when it holds the
    same; 'missing' when either cannot be read."""
    try:
        if a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes():
            return None
        da, db = a.read_bytes(), b.read_bytes()
    except OSError:
        return "missing"
    if a.suffix == ".csv":
        try:
            return csv_difference(da.decode("utf-8"), db.decode("utf-8"))
        except UnicodeDecodeError:
            return "not text"
    if a.suffix == ".svg":
        return svg_difference(da, db)
    if a.suffix == ".png":
        return png_difference(da, db)
    return "other bytes"
