"""The ffn_share rule on synthetic count records: every outcome it can give.

A counting claim has no seeds and no learned-at-all guard, so there is no 'excluded' cell: every decision is an
exact check (closed form vs instantiated count, share vs 2/3 within the declared tolerance)."""

from functools import partial

import pytest

from tfclaims.registry import load

import rules
from rules import analyse, decisions, record

EXP = load("ffn_share")
P = EXP.profiles["quick"]
TOL = 0.02
subs = partial(rules.subs, key=lambda name: name.split(" (")[0].split(":")[0])  # short name -> verdict


def metrics(d: int, ff_ratio: float = 4.0, *, kv_frac: float = 1.0, textbook: bool = True, miscount: int = 0):
    """Counts of a block with d_model d: attention (2 + 2·kv_frac)d², FFN 2·ff_ratio·d² (biases left out)."""
    attn = int((2 + 2 * kv_frac) * d * d)
    ffn = int(2 * ff_ratio * d * d)
    block = attn + ffn + 4 * d
    closed = {"attention": attn, "ffn": ffn, "block": block, "model": 12 * block}
    counted = {**closed, "block": block + miscount}
    return {
        "d_model": d, "n_heads": 8, "n_kv_heads": max(1, int(8 * kv_frac)), "d_ff": int(ff_ratio * d),
        "ffn_kind": "gelu", "n_experts": 0, "attention": attn, "ffn": ffn, "ffn_active": ffn, "block": block,
        "embeddings": 1000 * d, "total": 12 * block + 1000 * d, "ffn_total": 12 * ffn, "standard_width": textbook,
        "closed": closed, "counted": counted, "counts_match": miscount == 0,
        "mismatches": {"block": [block, block + miscount]} if miscount else {},
    }  # fmt: skip


def records(overrides: dict | None = None):
    cfgs = EXP.grid(P)
    base = {c["preset"]: metrics(64 * (i + 1)) for i, c in enumerate(cfgs)}
    base.update(overrides or {})
    return [record(c, base[c["preset"]], f"r{i}") for i, c in enumerate(cfgs)]


def test_ffn_share_rule_supported_when_counts_match_and_textbook_shares_are_two_thirds(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    assert all(d == "equivalent" for d in decisions(v).values())
    assert {s.verdict for s in v.sub_verdicts[:2]} == {"supported"}
    share = next(c for c in v.comparisons if c.id.startswith("share:"))
    assert share.margin == TOL and share.mean_b == pytest.approx(2 / 3)
    assert v.noise_floor == []
    assert any("no noise floor" in c for c in v.caveats)


def test_ffn_share_rule_refuted_when_a_textbook_share_leaves_the_band(tmp_path):
    first = EXP.grid(P)[0]["preset"]
    # ff_ratio 4.6: share 9.2/13.2 = 0.697, outside 2/3 ± 0.02; still flagged textbook (the rule's scope)
    v = analyse(EXP, records({first: metrics(64, 4.6)}), P, tmp_path)
    assert v.verdict == "refuted"
    assert decisions(v)[f"share:{first}"] == "undecided"
    assert subs(v)["≈2/3 for textbook dense blocks"] == "refuted"


def test_ffn_share_rule_tolerance_is_the_declared_one(tmp_path):
    first = EXP.grid(P)[0]["preset"]
    # ff_ratio 4.3: share 8.6/12.6 = 0.683, inside ± 0.02 (a rule with a tighter band would refute)
    v = analyse(EXP, records({first: metrics(64, 4.3)}), P, tmp_path)
    assert v.verdict == "supported"


def test_ffn_share_rule_inconclusive_when_a_count_disagrees(tmp_path):
    first = EXP.grid(P)[0]["preset"]
    v = analyse(EXP, records({first: metrics(64, miscount=1)}), P, tmp_path)
    assert v.verdict == "inconclusive"
    assert decisions(v)[f"count:{first}"] == "undecided"
    assert subs(v)["Counts"] == "refuted"


def test_ffn_share_rule_gqa_outside_the_band_does_not_count_against_the_claim(tmp_path):
    last = EXP.grid(P)[-1]["preset"]
    v = analyse(EXP, records({last: metrics(64, 3.5, kv_frac=0.125, textbook=False)}), P, tmp_path)
    assert v.verdict == "supported"
    assert decisions(v)[f"share:{last}"] == "undecided"
    assert subs(v)["≈2/3 beyond textbook blocks"] == "refuted"


def test_ffn_share_rule_inconclusive_without_a_textbook_configuration(tmp_path):
    cfgs = EXP.grid(P)
    v = analyse(
        EXP,
        records({c["preset"]: metrics(64, 3.5, kv_frac=0.125, textbook=False) for c in cfgs}),
        P,
        tmp_path,
    )
    assert v.verdict == "inconclusive"
