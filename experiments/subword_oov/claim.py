"""`subword_oov`: BPE and WordPiece vocabularies leave far fewer held-out words unknown than a word vocabulary
of the same size."""

from __future__ import annotations

import math

from tfclaims.evidence.declare import CellRule, Declaration, SubClaim, bound, cell, check
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from

from experiments.subword_oov import analysis as view
from experiments.subword_oov.vocabularies import KINDS

SO = recipes("experiments.subword_oov.recipes")  # loaded when a run starts

# Pre-registered (fixed before running).
CUT = 10.0  # "drastically": each subword vocabulary leaves at least 10× fewer held-out pre-tokens unknown
SUBWORD_MAX_PCT = 0.1  # and at most 0.1% of them
WORD_MIN_PCT = 1.0  # positive control: the word vocabulary leaves at least 1% unknown (else: shown only)
FALL_MAX = 0.99  # a larger word vocabulary leaves fewer unknown (at least 1% fewer)
COST_MIN = 1.01  # the subword vocabularies pay with at least 1% more tokens
OVERLAP_MAX = 0.5  # at most half of the likelihood rule's first merges are also the frequency rule's
RARER = 10.0  # the likelihood rule's first merges join pairs at least 10× rarer (median count)
SIZE_RANGE = (512, 65535)  # 256 bytes + [UNK] + merges fit; ids below 2^16
SHOWN = 20  # merges printed per rule


def oov_grid(p):
    bad = [s for s in p["sizes"] if not SIZE_RANGE[0] <= s <= SIZE_RANGE[1]]
    if bad:
        raise ValueError(f"vocabulary sizes must lie in {SIZE_RANGE}, got {bad}")
    return [{"kind": k, "size": s} for s in p["sizes"] for k in KINDS]


def merges_grid(p):
    return [{"merges": p["merges"]}]


def _cells(p, kinds):
    return tuple(
        cell(f"{h}-{k}-{s}", heldout=h, kind=k, size=s)
        for h in view.HELDOUT
        for k in kinds
        for s in p["sizes"]
    )


CONTROL = CellRule(
    f"the word vocabulary of that size leaves at least {WORD_MIN_PCT:g}% of the held-out pre-tokens unknown "
    "(the positive control)",
    lambda a, b: len(b) > 0 and bool((b.word_pct >= WORD_MIN_PCT).all()),
)


def _check_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """Checks: vocabulary sizes, token accounting, lossless BPE, and the frequency rule's merges."""
    k = p["merges"]
    return (
        check(
            "sizes",
            "Every vocabulary has exactly its declared number of entries, [UNK] included",
            view.SIZE_GAP,
            bound(0, 0),
            table="rates",
        ),
        check(
            "accounting",
            "Per-type counts add up to the tokenizer's own count of the whole text, and "
            "an [UNK] appears exactly where its vocabulary has no way to write the pre-token",
            (view.TOKEN_GAP, view.UNK_GAP),
            bound(0, 0),
            table="rates",
        ),
        check(
            "lossless",
            "The byte-level BPE never emits [UNK] and decodes every held-out pre-token back",
            (view.UNK_TOKENS, view.ROUNDTRIP),
            bound(0, 0),
            table="rates",
            cells=(cell("bpe", kind="bpe"),),
        ),
        check(
            "learner",
            f"The frequency rule, on characters, makes the same first {k} merges as "
            "Hugging Face's BPE trainer",
            view.LEARNER,
            bound(0, 0),
            table="merges",
        ),
    )


def _unknown_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """Unknown pre-tokens: the cut against the word vocabulary, the rates, and the cost in length."""
    sub, word = _cells(p, view.SUBWORD), _cells(p, ("word",))
    steps = tuple(cell(f"{h}-{s}", heldout=h, size=s) for h in view.HELDOUT for s in p["sizes"][1:])
    unk = (view.UNK_PCT, view.UNK_TYPE_PCT, view.UNK_TOKEN_PCT)
    return (
        SubClaim(
            "cut",
            f"At every size and on both held-out texts, BPE and WordPiece leave at least "
            f"{CUT:g}× fewer held-out pre-tokens unknown than the word vocabulary of the same size",
            bound(math.log10(CUT), None),
            (view.CUT,),
            table="cut",
            cells=sub,
            where="all",
            count_if=CONTROL,
            note="Counts, no sampling: each cell is its number against the bound. "
            "A cell whose word vocabulary leaves almost nothing unknown could not show a cut, so it "
            "is reported, not counted.",
        ),
        SubClaim(
            "rare",
            f"BPE and WordPiece leave at most {SUBWORD_MAX_PCT:g}% of held-out pre-tokens "
            "unknown at every size",
            bound(None, SUBWORD_MAX_PCT),
            unk,
            table="rates",
            cells=sub,
            where="all",
            primary=True,
        ),
        SubClaim(
            "control",
            f"Positive control: the word vocabulary leaves at least {WORD_MIN_PCT:g}% "
            "of held-out pre-tokens unknown at every size",
            bound(WORD_MIN_PCT, None),
            unk,
            table="rates",
            cells=word,
            where="all",
            primary=True,
            counts=False,
        ),
        SubClaim(
            "falls",
            "A larger word vocabulary leaves fewer held-out pre-tokens unknown (each size "
            f"at most {FALL_MAX:g}× the next smaller size's count)",
            bound(None, FALL_MAX),
            (view.STEP,),
            table="steps",
            cells=steps,
            where="all",
            counts=False,
        ),
        SubClaim(
            "cost",
            f"The subword vocabularies pay with length: at least {COST_MIN:g}× the word "
            "vocabulary's tokens on the same held-out text",
            bound(COST_MIN, None),
            (view.LENGTH,),
            table="length",
            cells=sub,
            where="all",
            counts=False,
        ),
    )


def _merge_rule_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The merge rules: Hugging Face's WordPiece trainer, and the likelihood rule against frequency."""
    k = p["merges"]
    return (
        SubClaim(
            "hf-wordpiece",
            f"Hugging Face's WordPiece trainer picks merges by frequency: its first "
            f"{k} new tokens are the frequency rule's, in order",
            bound(0, 0),
            (view.HF_WORDPIECE,),
            table="merges",
            counts=False,
            note="Google never released its WordPiece trainer; the "
            "library's trainer is its BPE trainer with a continuation prefix.",
        ),
        SubClaim(
            "rule",
            f"The likelihood rule (WordPiece's score) picks other merges than the frequency "
            f"rule (BPE's): at most {OVERLAP_MAX:g} of its first {k} tokens are among the frequency "
            f"rule's first {k}",
            bound(None, OVERLAP_MAX),
            (view.OVERLAP,),
            table="merges",
            counts=False,
        ),
        SubClaim(
            "rarer",
            f"The likelihood rule merges rarer pairs first: the median pair count of its "
            f"first {k} merges is at least {RARER:g}× below the frequency rule's",
            bound(math.log10(RARER), None),
            (view.RARER,),
            table="merges",
            counts=False,
        ),
    )


class SubwordOOV(Experiment):
    claim_id = "subword_oov"
    title = "BPE and WordPiece leave far fewer held-out words unknown than a word vocabulary"
    headline = "cut"
    order = 29
    profiles = {
        "quick": {"sizes": [512, 2048], "merges": 40},
        "default": {"sizes": [1024, 2048, 4096, 8192, 16384], "merges": 500},
        "full": {"sizes": [512, 1024, 2048, 4096, 8192, 16384, 24576], "merges": 1000},
    }  # fmt: skip
    parts = (Part("oov", oov_grid, SO.run_oov), Part("merges", merges_grid, SO.run_merges))

    def declare(self, p: dict) -> Declaration:
        return Declaration((*_check_subclaims(p), *_unknown_subclaims(p), *_merge_rule_subclaims(p)))

    def analyse(self, runs, p, out: Output):
        t = view.observe(runs)
        result = evaluate(self.declare(p), t)
        nums = view.write_tables(t, runs, out, SHOWN)
        view.plot_rates(t["rates"], out)
        view.plot_merges(runs, out)
        lo, hi = min(p["sizes"]), max(p["sizes"])
        word = nums["word_unk_pct"]
        span = "; ".join(
            f"{h} {word[f'{h}/{lo}']:.1f}% → {word[f'{h}/{hi}']:.1f}%"
            for h in view.HELDOUT
            if f"{h}/{lo}" in word and f"{h}/{hi}" in word
        )
        sub = ", ".join(f"{h} at most {u:,} of {n:,}" for h, (u, n) in nums["subword_max_unk"].items())
        cost = " and ".join(
            f"{a:.2f}–{b:.2f} at {n} entries"
            for n, (a, b) in nums["subword_tokens_per_word"].items()
            if n in (lo, hi)
        )
        m = t["merges"]
        rarer = f"{10 ** float(m.log10_rarer.iloc[0]):,.0f}×" if len(m) else "not run"
        return verdict_from(
            result,
            key_number=f"held-out pre-tokens unknown, word vocabulary {lo}→{hi}: {span}; subwords: {sub}",
            summary=(
                f"A word vocabulary of {lo}–{hi} entries fitted on the training works left {span} of the "
                f"held-out pre-tokens unknown; byte-level BPE and WordPiece of the same sizes left {sub} "
                "(BPE none, by construction; WordPiece only words with a character unseen in training), at a "
                f"cost in length: {cost} (tokens per pre-token; the word vocabulary's is 1). The likelihood "
                f"rule's first merges join pairs {rarer} rarer (median count) than the frequency rule's."
            ),
            evidence=nums,
            caveats=self.caveats(p),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(SubwordOOV)
