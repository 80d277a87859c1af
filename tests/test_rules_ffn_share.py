"""The ffn_share rule on synthetic count records: every outcome each sub-claim can give.

A counting claim has no seeds, no null pair and no learned-at-all guard: every decision reads an exact
number against declared bounds (closed form vs instantiated count, a check; share vs 2/3 within the declared
tolerance and share vs the notes' 66% floor, effects). Which configurations are textbook dense blocks is
declared from the catalogue before counting (quick profile: gpt2-small, bert-base, transformer-base, llama-7b,
t5-v1.1-base; beyond: llama3-8b, falcon-7b). The `flops` part's records are the real closed forms (cheap), so
its figures and crossovers run too."""

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.experiment import RunContext
from tfclaims.harness.registry import load

from experiments.ffn_share.recipes import CATALOGUE
from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("ffn_share")
P = EXP.profiles["quick"]
TOL, FLOOR = 0.02, 0.66
PRESETS = [c["preset"] for c in EXP.grid(P) if c["part"] == "counts"]
ENC_DEC = [n for n in PRESETS if CATALOGUE[n].encoder_decoder]
BOOK = ["gpt2-small", "bert-base", "transformer-base", "llama-7b", "t5-v1.1-base"]
OTHER = ["llama3-8b", "falcon-7b"]


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
        "d_model": d,
        "n_heads": 8,
        "n_kv_heads": max(1, int(8 * kv_frac)),
        "attn_width": d,
        "d_ff": int(ff_ratio * d),
        "ffn_kind": "gelu",
        "gated": False,
        "n_experts": 0,
        "layout": "sequential",
        "encoder_decoder": enc_dec,
        "attention": attn,
        "ffn": ffn,
        "ffn_active": ffn,
        "block": block,
        "decoder_attention": int(attn * (1 + cross)) if enc_dec else None,
        "decoder_block": int(attn * (1 + cross)) + ffn + 6 * d if enc_dec else None,
        "embeddings": 1000 * d,
        "total": 12 * block + 1000 * d,
        "ffn_total": 12 * ffn,
        "standard_width": textbook,
        "closed": closed,
        "counted": counted,
        "counts_match": miscount == 0,
        "mismatches": {"block": [block, block + miscount]} if miscount else {},
    }


def records(overrides: dict | None = None, *, cross: float = 0.0, flops: dict | None = None, params=P):
    """One count record per preset of the profile (2/3 blocks; decoder blocks with `cross`), and the real FLOP
    records (`flops` overrides their metrics per preset)."""
    presets = [c["preset"] for c in EXP.grid(params) if c["part"] == "counts"]
    base = {
        n: metrics(64 * (i + 1), enc_dec=CATALOGUE[n].encoder_decoder, cross=cross)
        for i, n in enumerate(presets)
    }
    base.update(overrides or {})
    out = []
    for i, c in enumerate(EXP.grid(params)):
        if c["part"] == "counts":
            m = base[c["preset"]]
        else:
            m = {**EXP.run_one(c, RunContext(device=None)), **(flops or {}).get(c["preset"], {})}
        out.append(record(c, m, f"r{i}"))
    return out


def gqa(**kw):
    """A GQA block with a 3.5·d FFN: 7/(7 + 2.25) = 0.757, outside 2/3 ± 0.02 and above 66%."""
    return metrics(64, 3.5, kv_frac=0.125, textbook=False, **kw)


def test_the_declared_cells_come_from_the_catalogue():
    decl = EXP.declare(P)
    assert [c.label for c in decl.sub("textbook").cells] == BOOK
    assert [c.label for c in decl.sub("beyond").cells] == OTHER
    blocks = [c.label for c in decl.sub("at-least-66").cells]
    assert blocks == [b for n in PRESETS for b in ([n, f"{n}-decoder"] if n in ENC_DEC else [n])]
    assert [s.id for s in decl.subclaims if s.kind == "effect" and s.counts] == ["textbook", "at-least-66"]
    assert decl.sub("counts").kind == "check" and not decl.sub("beyond").counts


def test_supported_when_counts_match_textbook_shares_are_two_thirds_and_every_block_reaches_66(tmp_path):
    v = analyse(EXP, records(), P, tmp_path, render=True)
    assert v.verdict == "supported"
    assert set(decisions(v).values()) == {"equivalent"}
    assert verdicts(v) == {
        "counts": "supported",
        "textbook": "supported",
        "at-least-66": "supported",
        "beyond": "supported",
    }
    share = comparison(v, "textbook/gpt2-small")
    assert share.test == "exact" and (share.lo, share.hi) == pytest.approx((2 / 3 - TOL, 2 / 3 + TOL))
    assert share.mean_b == pytest.approx(2 / 3)
    # every block is judged against 66%, an encoder–decoder's decoder block as its own cell
    assert set(decisions(v, "at-least-66/")) == {f"at-least-66/{n}" for n in PRESETS} | {
        f"at-least-66/{n}-decoder" for n in ENC_DEC
    }
    assert {s.id: s.kind for s in v.sub_verdicts}["counts"] == "check"
    assert v.noise_floor == []
    assert any("no null pair" in c for c in v.caveats)
    assert (tmp_path / "shares.csv").exists() and (tmp_path / "flop-share.csv").exists()
    figures = {p.stem for p in (tmp_path / "figures").glob("*.png")}
    assert figures == {"shares", "share-vs-width", "flop-share-vs-context"}


def test_the_rule_states_its_declared_bounds():
    text = EXP.rule_text(P)
    assert f"[{2 / 3 - TOL:.4g}, {2 / 3 + TOL:.4g}]" in text and f"[{FLOOR:g}, ∞]" in text
    assert "(textbook, at-least-66) combined" in text and "The checks (counts) must pass" in text


# ------------------------------------------------------------------ "about 2/3" on textbook blocks
def test_about_two_thirds_refuted_and_verdict_refuted_when_no_textbook_block_reaches_it(tmp_path):
    # ff_ratio 3: share 6/10 = 0.60, outside 2/3 ± 0.02 and under 66%, in every block
    v = analyse(EXP, records({n: metrics(64, 3.0, enc_dec=n in ENC_DEC) for n in PRESETS}), P, tmp_path)
    assert verdicts(v)["textbook"] == "refuted" and verdicts(v)["at-least-66"] == "refuted"
    assert set(decisions(v, "textbook/").values()) == {"a_better"}  # below the band
    assert v.verdict == "refuted"


def test_about_two_thirds_mixed_when_one_textbook_block_leaves_the_band(tmp_path):
    first = PRESETS[0]
    # ff_ratio 4.6: share 9.2/13.2 = 0.697, above 2/3 ± 0.02 (still ≥ 66%)
    v = analyse(EXP, records({first: metrics(64, 4.6)}), P, tmp_path)
    assert decisions(v)[f"textbook/{first}"] == "b_better"  # above the band
    assert verdicts(v)["textbook"] == "mixed" and verdicts(v)["at-least-66"] == "supported"
    assert v.verdict == "mixed"
    assert f"fails in {first}" in sub(v, "textbook").detail


def test_about_two_thirds_tolerance_is_the_declared_one(tmp_path):
    first = PRESETS[0]
    # ff_ratio 4.3: share 8.6/12.6 = 0.683, inside ± 0.02 (a rule with a tighter band would not be supported)
    v = analyse(EXP, records({first: metrics(64, 4.3)}), P, tmp_path)
    assert decisions(v)[f"textbook/{first}"] == "equivalent"
    assert v.verdict == "supported"


def test_gqa_outside_the_band_does_not_count_against_the_claim(tmp_path):
    v = analyse(EXP, records({n: gqa() for n in OTHER}), P, tmp_path)
    assert v.verdict == "supported"
    assert set(decisions(v, "beyond/").values()) == {"b_better"}
    assert verdicts(v)["beyond"] == "refuted"
    assert verdicts(v)["at-least-66"] == "supported"  # GQA only raises the share


def test_the_record_does_not_move_a_block_between_textbook_and_beyond(tmp_path):
    # a record calling gpt2-small non-textbook (and 0.757) still has it judged as textbook: declared before
    v = analyse(EXP, records({"gpt2-small": gqa()}), P, tmp_path)
    assert decisions(v)["textbook/gpt2-small"] == "b_better" and "beyond/gpt2-small" not in decisions(v)
    assert verdicts(v)["textbook"] == "mixed"


def test_inconclusive_without_a_textbook_configuration(tmp_path):
    p = {**P, "presets": OTHER}
    v = analyse(EXP, records({n: gqa() for n in OTHER}, params=p), p, tmp_path)
    assert verdicts(v)["textbook"] == "inconclusive" and "no comparison" in sub(v, "textbook").detail
    assert verdicts(v)["at-least-66"] == "supported"
    assert v.verdict == "inconclusive"


# ------------------------------------------------------------------ "66% or more" in every block
def test_at_least_66_mixed_when_cross_attention_decoder_blocks_hold_half(tmp_path):
    v = analyse(EXP, records(cross=1.0), P, tmp_path)  # decoder block: attention 8d², FFN 8d²: 50%
    assert verdicts(v)["textbook"] == "supported"
    assert verdicts(v)["at-least-66"] == "mixed"
    assert v.verdict == "mixed"
    below = {f"at-least-66/{n}-decoder" for n in ENC_DEC}
    assert {k for k, d in decisions(v, "at-least-66/").items() if d != "equivalent"} == below
    assert all(comparison(v, b).mean_b == pytest.approx(0.5) for b in below)
    assert all(f"{n}-decoder (50.0%)" in v.summary for n in ENC_DEC) and "cross-attention" in v.summary
    assert v.evidence["below_at_least"] == [f"{n}-decoder" for n in ENC_DEC]
    assert "below 66%: 2 cross-attention decoder blocks" in v.key_number


def test_at_least_66_is_a_floor_not_a_band(tmp_path):
    first = PRESETS[0]
    # ff_ratio 3.797: share 0.655, inside 2/3 ± 0.02 but under 66%: the two wordings part
    v = analyse(EXP, records({first: metrics(64, 3.797)}), P, tmp_path)
    assert decisions(v)[f"textbook/{first}"] == "equivalent"
    assert decisions(v)[f"at-least-66/{first}"] == "a_better"  # below the floor
    assert verdicts(v)["textbook"] == "supported" and verdicts(v)["at-least-66"] == "mixed"
    assert v.verdict == "mixed"
    assert "narrow FFN" in v.summary


def test_at_least_66_passes_at_exactly_66(tmp_path):
    first = PRESETS[0]
    m = metrics(100)
    m["attention"], m["ffn"], m["ffn_active"] = 34_000, 66_000, 66_000  # 66000 / 100000 = 0.66
    v = analyse(EXP, records({first: m}), P, tmp_path)
    c = comparison(v, f"at-least-66/{first}")
    assert c.mean_b >= FLOOR and c.decision == "equivalent"


def test_at_least_66_refuted_beside_two_thirds_supported_gives_mixed(tmp_path):
    # every block at 0.655: about 2/3 holds, 66% holds nowhere: combine → mixed
    v = analyse(EXP, records({n: metrics(64, 3.797, enc_dec=n in ENC_DEC) for n in PRESETS}), P, tmp_path)
    assert verdicts(v)["textbook"] == "supported" and verdicts(v)["at-least-66"] == "refuted"
    assert v.verdict == "mixed"


# ------------------------------------------------------------------ the counts: a check
def test_a_count_that_disagrees_with_its_closed_form_stops_the_claim(tmp_path):
    """Closed form = instantiated is what the shares rely on: a mismatch is a bug, not evidence."""
    first = PRESETS[0]
    with pytest.raises(CheckFailed, match=f"counts/{first}"):
        analyse(EXP, records({first: metrics(64, miscount=1)}), P, tmp_path)


# ------------------------------------------------------------------ FLOP crossovers: reported from the
# records
def test_flop_crossovers_come_from_the_records(tmp_path):
    v = analyse(EXP, records(flops={"llama3-8b": {"crossover": None}}), P, tmp_path)
    xo = v.evidence["flop_crossover_context"]
    assert xo["llama3-8b"] is None and "never for llama3-8b" in v.summary
    assert xo["gpt2-small"] == pytest.approx(3071.0)  # 2·(16d² − 8d²)/(4d) − 1 at d = 768
    assert v.verdict == "supported"  # reported, not judged
