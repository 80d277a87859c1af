"""The declared rule of `subword_oov`, fed synthetic held-out counts and merge lists. Every number is a count:
each sub-claim is a bound on every row of its cells; a cell whose word vocabulary leaves under 1% unknown is
reported, not counted (the positive control), and a broken identity stops the claim."""

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, record, sub, verdicts

CLAIM = "subword_oov"
OCC = 100_000  # held-out pre-token occurrences per text


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def word_unk(h, size):
    """A word vocabulary's [UNK] occurrences: a quarter at 512 entries, fewer at larger sizes, more on the
    folio."""
    return int(OCC * (0.25 if h == "modern" else 0.35) * (512 / size) ** 0.4)


def held(kind, h, size, unk):
    tokens = OCC if kind == "word" else int(OCC * (1 + 200 / size**0.5))
    return {
        "occurrences": OCC,
        "types": 10_000,
        "chars": 4 * OCC,
        "tokens": tokens,
        "unk_tokens": unk,
        "unk_occurrences": unk,
        "unk_types": min(unk, 10_000),
        "predicted_unk": unk,
        "roundtrip_errors": 0,
        "whole_text_tokens": tokens,
        "used": size // 2,
        "unk_examples": [["haue", 3]] if unk else [],
    }


def merges(k, *, same=False, hf_off=0, learner_off=0):
    freq = [
        {
            "left": f"f{i}",
            "right": f"##x{i}",
            "token": f"f{i}x{i}",
            "pair": 60_000 - 100 * i,
            "left_count": 90_000,
            "right_count": 150_000,
        }
        for i in range(k)
    ]
    lik = (
        freq
        if same
        else [
            {
                "left": f"l{i}",
                "right": f"##y{i}",
                "token": f"l{i}y{i}",
                "pair": 2,
                "left_count": 2,
                "right_count": 3,
            }
            for i in range(k)
        ]
    )
    hf = [m["token"] for m in freq]
    hf[:hf_off] = ["other"] * hf_off
    plain = [[f"a{i}", f"b{i}"] for i in range(k)]
    bpe = [list(p) for p in plain]
    bpe[:learner_off] = [["x", "y"]] * learner_off
    return {
        "rules": {"frequency": freq, "likelihood": lik},
        "hf_wordpiece": hf,
        "plain": plain,
        "hf_bpe": bpe,
    }


def records(exp, params="quick", *, unk=None, size_gap=0, bpe_unk=0, token_gap=0, **merge_kw):
    """unk(kind, heldout, size) overrides an [UNK] count (default: the word curve above, WordPiece 3 on the
    folio, the BPE none)."""
    p = exp.profiles[params]
    recs = []
    for i, cfg in enumerate(exp.grid(p)):
        if cfg["part"] == "merges":
            recs.append(record(cfg, merges(cfg["merges"], **merge_kw), f"m{i}"))
            continue
        kind, size, sets = cfg["kind"], cfg["size"], {}
        for h in ("modern", "folio"):
            default = {"word": word_unk(h, size), "wordpiece": 3 if h == "folio" else 0, "bpe": bpe_unk}[kind]
            sets[h] = held(kind, h, size, unk(kind, h, size) if unk else default)
            sets[h]["whole_text_tokens"] += token_gap
        recs.append(record(cfg, {"vocab_size": size + size_gap, "sets": sets}, f"o{i}"))
    return recs


def test_subword_vocabularies_that_leave_almost_nothing_unknown_support_the_claim(exp, tmp_path):
    v = analyse(exp, records(exp, "default"), "default", tmp_path)
    ids = ("sizes accounting lossless learner cut rare control falls cost hf-wordpiece rule rarer").split()
    assert verdicts(v) == dict.fromkeys(ids, "supported")
    assert v.verdict == "supported" and "nan" not in v.key_number


def test_a_wordpiece_that_leaves_two_percent_unknown_on_the_folio_fails_rare_there_only(exp, tmp_path):
    """2% unknown is still over 10× below the word vocabulary's 25–35%: the cut holds, the bound on the share
    does not, in the folio's WordPiece cells."""

    def unk(kind, h, size):
        return 2000 if (kind, h) == ("wordpiece", "folio") else {"word": word_unk(h, size)}.get(kind, 0)

    v = analyse(exp, records(exp, unk=unk), "quick", tmp_path)
    assert sub(v, "cut").verdict == "supported"
    s = sub(v, "rare")
    assert s.verdict == "mixed" and not any(c.startswith("folio-wordpiece") for c in s.holds)
    assert v.verdict == "mixed"


def test_a_wordpiece_only_three_times_below_the_word_vocabulary_fails_the_cut_in_its_cells(exp, tmp_path):
    """The byte-level BPE cannot fail: an [UNK] from it stops the claim (the `lossless` check)."""

    def unk(kind, h, size):
        return {"word": word_unk(h, size), "wordpiece": word_unk(h, size) // 3}.get(kind, 0)

    v = analyse(exp, records(exp, unk=unk), "quick", tmp_path)
    for s in ("cut", "rare"):
        assert sub(v, s).verdict == "mixed" and all("bpe" in c for c in sub(v, s).holds)
    assert v.verdict == "mixed"


def test_a_word_vocabulary_that_misses_nothing_leaves_the_cut_undecided(exp, tmp_path):
    """Held-out text the word vocabulary covers (under 1% unknown): no cut could show, so the cells are
    reported, not counted, and the positive control fails."""

    def unk(kind, h, size):
        return 500 if kind == "word" else 0

    v = analyse(exp, records(exp, unk=unk), "quick", tmp_path)
    assert sub(v, "cut").verdict == "inconclusive" and "Reported, not counted" in sub(v, "cut").detail
    assert sub(v, "control").verdict == "refuted"
    assert v.verdict == "inconclusive"


def test_a_word_vocabulary_that_does_not_improve_with_size_fails_falls(exp, tmp_path):
    def unk(kind, h, size):
        return 20_000 if kind == "word" else 0

    v = analyse(exp, records(exp, unk=unk), "quick", tmp_path)
    assert sub(v, "falls").verdict == "refuted" and v.verdict == "supported"


def test_no_extra_length_fails_cost_and_is_reported_only(exp, tmp_path):
    recs = records(exp)
    for r in recs:
        for s in r["metrics"].get("sets", {}).values():
            s["tokens"] = s["whole_text_tokens"] = s["occurrences"]
    v = analyse(exp, recs, "quick", tmp_path)
    assert sub(v, "cost").verdict == "refuted" and v.verdict == "supported"


def test_merge_rules_that_agree_refute_the_contrast_and_a_trainer_off_the_rule_is_seen(exp, tmp_path):
    v = analyse(exp, records(exp, same=True, hf_off=3), "quick", tmp_path)
    assert sub(v, "rule").verdict == "refuted" and sub(v, "rarer").verdict == "refuted"
    assert sub(v, "hf-wordpiece").verdict == "refuted"
    assert v.verdict == "supported"  # the merge sub-claims are reported beside the verdict


@pytest.mark.parametrize(
    "fault, name",
    [
        ({"size_gap": 1}, "sizes"),
        ({"token_gap": 2}, "accounting"),
        ({"bpe_unk": 1}, "lossless"),
        ({"learner_off": 1}, "learner"),
    ],
)
def test_a_broken_identity_stops_the_claim(exp, tmp_path, fault, name):
    with pytest.raises(CheckFailed, match=name):
        analyse(exp, records(exp, **fault), "quick", tmp_path)


def test_without_the_merges_part_its_sub_claims_decide_nothing(exp, tmp_path):
    recs = [r for r in records(exp) if r["config"]["part"] == "oov"]
    v = analyse(exp, recs, "quick", tmp_path)
    assert {sub(v, s).verdict for s in ("hf-wordpiece", "rule", "rarer")} == {"inconclusive"}
    assert v.verdict == "supported"
