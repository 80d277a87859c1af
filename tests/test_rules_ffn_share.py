"""The ffn_share rule on synthetic count records: every outcome each sub-verdict can give.

A counting claim has no seeds and no learned-at-all guard, so there is no 'excluded' cell: every decision is an
exact check (closed form vs instantiated count; share vs 2/3 within the declared tolerance; share vs the notes'
66% floor). The `flops` part's records are the real closed forms (cheap), so its figures and crossovers run too."""

from functools import partial

import pytest

from tfclaims.claims.ffn_share import CATALOGUE
from tfclaims.harness.experiment import RunContext
from tfclaims.harness.registry import load

import rules
from rules import analyse, decisions, record

EXP = load("ffn_share")
P = EXP.profiles["quick"]
TOL, FLOOR = 0.02, 0.66
TEXTBOOK, AT_LEAST, BEYOND = (
    "≈2/3 for textbook dense blocks",
    "≥66% in every block",
    "≈2/3 beyond textbook blocks",
)
subs = partial(rules.subs, key=lambda name: name.split(" (")[0].split(":")[0])  # short name -> verdict
PRESETS = [c["preset"] for c in EXP.grid(P) if c["part"] == "counts"]
ENC_DEC = [n for n in PRESETS if CATALOGUE[n].encoder_decoder]


def metrics(
    d: int,
    ff_ratio: float = 4.0,
    *,
    kv_frac: float = 1.0,
    textbook: bool = True,
    miscount: int = 0,
    enc_dec: bool = False,
    cross: float = 0.0,
):
    """Counts of a block with d_model d: attention (2 + 2·kv_frac)d², FFN 2·ff_ratio·d² (biases left out); an
    encoder–decoder's decoder block adds `cross` times the attention (1.0: a real cross-attention)."""
    attn = int((2 + 2 * kv_frac) * d * d)
    ffn = int(2 * ff_ratio * d * d)
    block = attn + ffn + 4 * d
    closed = {"attention": attn, "ffn": ffn, "block": block, "model": 12 * block}
    counted = {**closed, "block": block + miscount}
    return {
        "d_model": d, "n_heads": 8, "n_kv_heads": max(1, int(8 * kv_frac)), "attn_width": d,
        "d_ff": int(ff_ratio * d), "ffn_kind": "gelu", "gated": False, "n_experts": 0, "layout": "sequential",
        "encoder_decoder": enc_dec, "attention": attn, "ffn": ffn, "ffn_active": ffn, "block": block,
        "decoder_attention": int(attn * (1 + cross)) if enc_dec else None,
        "decoder_block": int(attn * (1 + cross)) + ffn + 6 * d if enc_dec else None,
        "embeddings": 1000 * d, "total": 12 * block + 1000 * d, "ffn_total": 12 * ffn, "standard_width": textbook,
        "closed": closed, "counted": counted, "counts_match": miscount == 0,
        "mismatches": {"block": [block, block + miscount]} if miscount else {},
    }  # fmt: skip


def records(overrides: dict | None = None, *, cross: float = 0.0, flops: dict | None = None):
    """One count record per preset of the quick profile (2/3 blocks; decoder blocks with `cross`), and the real
    FLOP records (`flops` overrides their metrics per preset)."""
    base = {n: metrics(64 * (i + 1), enc_dec=n in ENC_DEC, cross=cross) for i, n in enumerate(PRESETS)}
    base.update(overrides or {})
    out = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "counts":
            m = base[c["preset"]]
        else:
            m = {**EXP.run_one(c, RunContext(device=None)), **(flops or {}).get(c["preset"], {})}
        out.append(record(c, m, f"r{i}"))
    return out


def test_supported_when_counts_match_textbook_shares_are_two_thirds_and_every_block_reaches_66(tmp_path):
    v = analyse(EXP, records(), P, tmp_path, render=True)
    assert v.verdict == "supported"
    assert all(d == "equivalent" for d in decisions(v).values())
    assert subs(v) == {
        "Counts": "supported",
        TEXTBOOK: "supported",
        AT_LEAST: "supported",
        BEYOND: "inconclusive",
    }
    share = next(c for c in v.comparisons if c.id.startswith("share:"))
    assert share.margin == TOL and share.mean_b == pytest.approx(2 / 3)
    # every block is judged against 66%, an encoder–decoder's decoder block as its own cell
    assert set(decisions(v, "atleast66:")) == {f"atleast66:{n}" for n in PRESETS} | {
        f"atleast66:{n}/decoder" for n in ENC_DEC
    }
    assert v.noise_floor == []
    assert any("no noise floor" in c for c in v.caveats)
    assert (tmp_path / "shares.csv").exists() and (tmp_path / "flop-share.csv").exists()
    figures = {p.stem for p in (tmp_path / "figures").glob("*.png")}
    assert figures == {"shares", "share-vs-width", "flop-share-vs-context"}


def test_the_rule_states_its_declared_margins():
    assert f"≤ {TOL:g}" in EXP.rule and f"≥ {FLOOR:g}" in EXP.rule


# ------------------------------------------------------------------ "about 2/3" on textbook blocks
def test_about_two_thirds_refuted_and_verdict_refuted_when_no_textbook_block_reaches_it(tmp_path):
    # ff_ratio 3: share 6/10 = 0.60, outside 2/3 ± 0.02 and under 66%, in every block
    v = analyse(EXP, records({n: metrics(64, 3.0) for n in PRESETS}), P, tmp_path)
    assert subs(v)[TEXTBOOK] == "refuted" and subs(v)[AT_LEAST] == "refuted"
    assert v.verdict == "refuted"


def test_about_two_thirds_mixed_when_one_textbook_block_leaves_the_band(tmp_path):
    first = PRESETS[0]
    # ff_ratio 4.6: share 9.2/13.2 = 0.697, outside 2/3 ± 0.02 (above: still ≥ 66%)
    v = analyse(EXP, records({first: metrics(64, 4.6)}), P, tmp_path)
    assert decisions(v)[f"share:{first}"] == "undecided"
    assert subs(v)[TEXTBOOK] == "mixed" and subs(v)[AT_LEAST] == "supported"
    assert v.verdict == "mixed"
    assert f"{first} 69.7% (outside)" in rules.find_sub(v, TEXTBOOK).detail


def test_about_two_thirds_tolerance_is_the_declared_one(tmp_path):
    first = PRESETS[0]
    # ff_ratio 4.3: share 8.6/12.6 = 0.683, inside ± 0.02 (a rule with a tighter band would not be supported)
    v = analyse(EXP, records({first: metrics(64, 4.3)}), P, tmp_path)
    assert decisions(v)[f"share:{first}"] == "equivalent"
    assert v.verdict == "supported"


def test_gqa_outside_the_band_does_not_count_against_the_claim(tmp_path):
    last = PRESETS[-2]
    v = analyse(EXP, records({last: metrics(64, 3.5, kv_frac=0.125, textbook=False)}), P, tmp_path)
    assert v.verdict == "supported"
    assert decisions(v)[f"share:{last}"] == "undecided"
    assert subs(v)[BEYOND] == "refuted"
    assert subs(v)[AT_LEAST] == "supported"  # 7/(7 + 2.25) = 0.76: GQA only raises the share


def test_inconclusive_without_a_textbook_configuration(tmp_path):
    v = analyse(
        EXP, records({n: metrics(64, 3.5, kv_frac=0.125, textbook=False) for n in PRESETS}), P, tmp_path
    )
    assert subs(v)[TEXTBOOK] == "inconclusive"
    assert v.verdict == "inconclusive"


# ------------------------------------------------------------------ "66% or more" in every block
def test_at_least_66_mixed_when_cross_attention_decoder_blocks_hold_half(tmp_path):
    v = analyse(EXP, records(cross=1.0), P, tmp_path)  # decoder block: attention 8d², FFN 8d²: 50%
    assert subs(v)[TEXTBOOK] == "supported"
    assert subs(v)[AT_LEAST] == "mixed"
    assert v.verdict == "mixed"
    below = {f"atleast66:{n}/decoder" for n in ENC_DEC}
    assert {k for k, d in decisions(v, "atleast66:").items() if d != "equivalent"} == below
    detail = rules.find_sub(v, AT_LEAST).detail
    assert all(f"{n}/decoder 50.0%" in detail for n in ENC_DEC) and "cross-attention" in detail
    assert v.evidence["below_at_least"] == [f"{n}/decoder" for n in ENC_DEC]


def test_at_least_66_is_a_floor_not_a_band(tmp_path):
    first = PRESETS[0]
    # ff_ratio 3.797: share 0.655, inside 2/3 ± 0.02 but under 66%: the two wordings part
    v = analyse(EXP, records({first: metrics(64, 3.797)}), P, tmp_path)
    assert decisions(v)[f"share:{first}"] == "equivalent"
    assert decisions(v)[f"atleast66:{first}"] == "undecided"
    assert subs(v)[TEXTBOOK] == "supported" and subs(v)[AT_LEAST] == "mixed"
    assert v.verdict == "mixed"
    assert "narrow FFN" in rules.find_sub(v, AT_LEAST).detail


def test_at_least_66_passes_at_exactly_66(tmp_path):
    first = PRESETS[0]
    m = metrics(100)
    m["attention"], m["ffn"], m["ffn_active"] = 34_000, 66_000, 66_000  # 66000 / 100000 = 0.66
    v = analyse(EXP, records({first: m}), P, tmp_path)
    c = rules.comparison(v, f"atleast66:{first}")
    assert c.mean_b >= FLOOR and c.decision == "equivalent"


def test_at_least_66_refuted_beside_two_thirds_supported_gives_mixed(tmp_path):
    # every block at 0.655: about 2/3 holds, 66% holds nowhere: combine → mixed
    v = analyse(EXP, records({n: metrics(64, 3.797) for n in PRESETS}), P, tmp_path)
    assert subs(v)[TEXTBOOK] == "supported" and subs(v)[AT_LEAST] == "refuted"
    assert v.verdict == "mixed"


# ------------------------------------------------------------------ counts guard
def test_inconclusive_when_a_count_disagrees(tmp_path):
    first = PRESETS[0]
    v = analyse(EXP, records({first: metrics(64, miscount=1)}), P, tmp_path)
    assert v.verdict == "inconclusive"
    assert decisions(v)[f"count:{first}"] == "undecided"
    assert subs(v)["Counts"] == "refuted"


# ------------------------------------------------------------------ FLOP crossovers: reported from the records
def test_flop_crossovers_come_from_the_records(tmp_path):
    v = analyse(EXP, records(flops={"llama3-8b": {"crossover": None}}), P, tmp_path)
    xo = v.evidence["flop_crossover_context"]
    assert xo["llama3-8b"] is None and "never for llama3-8b" in v.summary
    assert xo["gpt2-small"] == pytest.approx(3071.0)  # 2·(16d² − 8d²)/(4d) − 1 at d = 768
    assert v.verdict == "supported"  # reported, not judged
