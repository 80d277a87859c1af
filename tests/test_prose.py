"""A claim's prose in markdown beside its experiment: read into the same strings the code reports, filled from
the experiment module's constants, and malformed files stopped with one line naming the file."""

import pytest

from tfclaims.harness import prose
from tfclaims.harness.experiment import Experiment
from tfclaims.harness.registry import REPO_ROOT, load_all

EXPS = load_all()
TEXT = (
    "A sentence long enough to wrap at the width of the file, with an interval [0.1, 0.2], a {{brace}} kept, "
    "and the offset {OFFSET} and the margin {MARGIN:g} filled in from the experiment's constants, so that "
    "the words cannot drift from the numbers."
)


def test_write_then_read_gives_the_same_strings_and_fills_constants(tmp_path):
    fields = {
        "statement": "One line.",
        "anchors": ["Someone et al. 2020: " + "a long anchor " * 12, "Another, short."],
        "method": "(1) First part. " + TEXT + " (2) Second part, its own paragraph.",
    }
    md = prose.write("# toy: a toy claim", fields, {"method": ["(2) "]})
    assert all(len(line) <= prose.WIDTH for line in md.splitlines())
    assert "\n\n(2) Second part" in md  # a paragraph for the reader, one string for the code
    path = tmp_path / "toy.md"
    path.write_text(md)
    got = prose.read(path, {"OFFSET": 1000, "MARGIN": 0.05})
    assert set(got) == {"statement", "anchors", "method"}
    assert got["anchors"] == ["Someone et al. 2020: " + ("a long anchor " * 12).strip(), "Another, short."]
    assert "the offset 1000 and the margin 0.05 filled" in got["method"] and "a {brace} kept" in got["method"]
    assert got["method"].startswith("(1) First part.") and got["method"].endswith("its own paragraph.")


@pytest.mark.parametrize(
    "text, fault",
    [
        ("## Statement\nx\n## Statement\ny\n", "repeated section"),
        ("## Results\nx\n", "unknown or repeated section"),
        ("stray text\n## Statement\nx\n", "before the first"),
        ("## Method\nthe offset {MISSING}\n", "cannot fill"),
        ("## Anchors\n  a continuation with no item\n", "starts with '- '"),
    ],
)
def test_a_malformed_file_is_one_line_naming_it(tmp_path, text, fault):
    path = tmp_path / "bad.md"
    path.write_text("# bad: title\n" + text)
    with pytest.raises(prose.ProseError) as e:
        prose.read(path, {})
    assert fault in str(e.value) and "bad.md" in str(e.value) and "\n" not in str(e.value)


def test_every_claim_has_all_its_prose_in_markdown_beside_its_experiment():
    import inspect
    import sys
    from pathlib import Path

    for cid, exp in EXPS.items():
        md = Path(inspect.getsourcefile(type(exp))).with_suffix(".md")
        assert md == REPO_ROOT / "experiments" / cid / "claim.md" and md.read_text().startswith(
            f"# {cid}: {exp.title}\n"
        )
        got = prose.read(md, vars(sys.modules[type(exp).__module__]))
        required = set(prose.SECTIONS.values()) - {"caveat_templates"}  # caveats: not yet in every claim.md
        assert required <= set(got), cid  # every field, each from the file
        for key, value in got.items():
            assert value and value == getattr(exp, key), (cid, key)
            assert all(v.strip() == v and "  " not in v for v in (value if key in prose.LISTS else [value]))


def test_caveats_are_filled_when_the_claim_is_analysed(tmp_path, monkeypatch):
    """`## Caveats` items are templates: module constants and the profile now, measured facts from analyse;
    a name the analysis does not give is one line that names the claim."""
    import sys
    import types

    mod = types.ModuleType("toy_caveats")
    mod.__file__ = str(tmp_path / "toy_caveats.py")
    mod.WIDTH = 64
    (tmp_path / "toy_caveats.md").write_text(
        "# toy: t\n\n## Statement\ns\n\n## Caveats\n- Width {WIDTH}, {p[steps]} steps, {p[scales][0][1]}\n"
        "  layers; fell by {drop:.2f} {{nats}}.\n- A second one.\n"
    )
    monkeypatch.setitem(sys.modules, "toy_caveats", mod)
    exec(
        "from tfclaims.harness.experiment import Experiment\nclass Toy(Experiment):\n    claim_id = 'toy'\n",
        mod.__dict__,
    )
    toy = mod.Toy()
    assert toy.caveat_templates[0].startswith("Width {WIDTH}, {p[steps]}")
    p = {"steps": 400, "scales": [[64, 2]]}
    assert toy.caveats(p, drop=0.0349) == [
        "Width 64, 400 steps, 2 layers; fell by 0.03 {nats}.",
        "A second one.",
    ]
    with pytest.raises(prose.ProseError, match="toy: ## Caveats: cannot fill .*drop"):
        toy.caveats(p)


def test_prose_in_both_places_is_refused(tmp_path, monkeypatch):
    """A class that also sets a field its markdown gives would have two sources for one text."""
    import sys
    import types

    mod = types.ModuleType("toy_both")
    mod.__file__ = str(tmp_path / "toy_both.py")
    (tmp_path / "toy_both.md").write_text("# toy: t\n\n## Statement\nfrom the file\n")
    monkeypatch.setitem(sys.modules, "toy_both", mod)
    with pytest.raises(prose.ProseError, match="both in the class"):
        type("Toy", (Experiment,), {"__module__": "toy_both", "statement": "from the class"})
    toy = type("Toy", (Experiment,), {"__module__": "toy_both"})
    assert toy.statement == "from the file"
