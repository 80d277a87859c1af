"""`harness.sameness`: what counts as the same result when a re-analysis runs on another CPU."""

import base64
import io
import math

import numpy as np
import pytest
from PIL import Image

from tfclaims.harness import sameness as S


def test_close_is_relative_with_an_absolute_floor_and_exact_for_nan_and_infinities():
    x = -1.7064451057631547
    assert S.close(x, -1.7064451057631553)  # the drift seen between two CPUs
    assert S.close(x, x * (1 + 0.9 * S.REL_TOL)) and not S.close(x, x * (1 + 2 * S.REL_TOL))
    assert S.close(0.0, 1e-17) and not S.close(0.0, 1e-10)
    assert S.close(math.nan, math.nan) and not S.close(math.nan, 1.0)
    assert S.close(math.inf, math.inf) and not S.close(math.inf, -math.inf) and not S.close(math.inf, 1e308)


def test_json_values_match_in_structure_texts_and_integers_and_name_the_first_difference():
    a = {
        "verdict": "supported",
        "n": 5,
        "comparisons": [{"id": "x", "diff": -1.7064451057631547, "p": 8.2e-116}],
    }
    b = {
        "verdict": "supported",
        "n": 5,
        "comparisons": [{"id": "x", "diff": -1.7064451057631553, "p": 8.2e-116}],
    }
    assert S.same_values(a, b)
    assert S.first_difference(a, {**b, "verdict": "mixed"}) == "verdict: 'supported' → 'mixed'"
    assert S.first_difference(a, {**b, "n": 6}) == "n: 5 → 6"
    moved = {**b, "comparisons": [{**b["comparisons"][0], "diff": -1.7065}]}
    assert S.first_difference(a, moved) == "comparisons[0].diff: -1.7064451057631547 → -1.7065"
    assert S.first_difference(a, {**b, "comparisons": []}) == "comparisons: 1 → 0 entries"
    assert "keys" in S.first_difference(a, {**b, "extra": 1})
    assert S.first_difference({"x": True}, {"x": 1}) is not None  # a boolean is not a number
    assert S.first_difference({"x": "1.0"}, {"x": "1.00"}) is not None  # texts compare exactly


def test_csv_cells_compare_as_numbers_lists_included_and_shapes_exactly():
    a = 'id,diff,times\nx,-1.7064451057631547,"[0.00012348680174909533, 2.0]"\n'
    b = 'id,diff,times\nx,-1.7064451057631553,"[0.0001234868017490953, 2.0]"\n'
    assert S.csv_difference(a, b) is None
    assert S.csv_difference(a, b.replace("-1.7064451057631553", "-1.7")) == (
        "row 1, column diff: '-1.7064451057631547' → '-1.7'"
    )
    assert S.csv_difference(a, b.replace("x,", "y,")) is not None
    assert S.csv_difference(a, b.replace("2.0]", "2.0, 3.0]")) is not None
    assert S.csv_difference(a, b + "z,1,\n") == "1 → 2 rows"
    assert S.csv_difference(a, b.replace("id,diff", "id,delta")).startswith("columns")


def _png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buf, format="png")
    return buf.getvalue()


def test_png_pixels_may_move_by_an_anti_aliasing_level_not_by_a_visible_change():
    img = np.full((20, 30, 4), 255)
    img[5:15, 10, :3] = 0  # a line
    edge = img.copy()
    edge[5:15, 11, :3] = 255 - S.PNG_LEVELS  # its anti-aliased edge one step over
    assert S.png_difference(_png(img), _png(img)) is None
    assert S.png_difference(_png(img), _png(edge)) is None
    moved = img.copy()
    moved[5:15, 11, :3] = 200  # a tenth of a pixel's move: visible
    assert S.png_difference(_png(img), _png(moved)) == "pixels by up to 55 levels"
    assert "size" in S.png_difference(_png(img), _png(img[:, :29]))


def _svg(clip_id: str, x: str, image: bytes = b"") -> bytes:
    embedded = (
        f'<image xlink:href="data:image/png;base64,{base64.b64encode(image).decode()}"/>' if image else ""
    )
    return (
        f'<svg><defs><clipPath id="{clip_id}"><rect x="{x}" y="1"/></clipPath></defs>'
        f'<g clip-path="url(#{clip_id})"><path d="M {x} 2 L 3 4" style="fill: #1f77b4"/>{embedded}</g></svg>'
    ).encode()


def test_svg_figures_compare_ids_by_order_numbers_to_their_printed_digit_and_images_as_pngs():
    assert S.svg_difference(_svg("p64154b3343", "57.6"), _svg("p077f0d49da", "57.600001")) is None
    assert S.svg_difference(_svg("p1", "57.6"), _svg("p1", "57.61")) == "a number 57.6 → 57.61"
    recoloured = _svg("p1", "57.6").replace(b"1f77b4", b"ff7f0e")
    assert S.svg_difference(_svg("p1", "57.6"), recoloured) is not None
    img = np.full((4, 4, 4), 128)
    assert S.svg_difference(_svg("p1", "1", _png(img)), _svg("p2", "1", _png(img + 1))) is None
    assert "embedded image" in S.svg_difference(_svg("p1", "1", _png(img)), _svg("p1", "1", _png(img + 60)))


@pytest.mark.parametrize("suffix", [".json", ".md", ".bib"])
def test_other_files_compare_byte_for_byte(tmp_path, suffix):
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    a.write_text("x 1.0000000000000002\n")
    b.write_text("x 1.0000000000000002\n")
    assert S.file_difference(a, b) is None
    b.write_text("x 1.0\n")
    assert S.file_difference(a, b) == "other bytes"
    assert S.file_difference(a, tmp_path / "missing.csv") == "missing"
