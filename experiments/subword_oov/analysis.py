"""`subword_oov`'s observation tables (held-out counts per vocabulary, the cut against the word vocabulary of
the same size, the merge rules), its tables and figures."""

from __future__ import annotations

import math
import re
import statistics

import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.plotting import log_ticks, subplots

HELDOUT = ("modern", "folio")
SUBWORD = ("bpe", "wordpiece")
LABELS = {"word": "word", "bpe": "byte-level BPE", "wordpiece": "WordPiece"}
SETS = {"modern": "held-out plays, training spelling", "folio": "the same plays, First-Folio spelling"}

UNK_PCT = Readout(
    "unk_pct",
    "held-out pre-tokens with an [UNK]",
    "%",
    fmt=".3f",
    definition="occurrences of held-out pre-tokens (words and punctuation runs) whose encoding "
    "holds an [UNK], over all",
)
UNK_TYPE_PCT = Readout("unk_type_pct", "held-out pre-token types with an [UNK]", "%", fmt=".3f")
UNK_TOKEN_PCT = Readout("unk_token_pct", "held-out tokens that are [UNK]", "%", fmt=".3f")
CUT = Readout(
    "log10_cut",
    "log10(word [UNK] share ÷ subword [UNK] share)",
    better="higher",
    fmt=".2f",
    definition="of held-out pre-tokens, at the same size; each count floored at one pre-token, so "
    "that none is a division by zero",
)
STEP = Readout(
    "step", "word [UNK] share ÷ the next smaller size's", definition="on the same held-out text", fmt=".3f"
)
LENGTH = Readout(
    "length_ratio",
    "subword tokens ÷ word tokens",
    fmt=".3f",
    definition="on the same held-out text at the same size (the word vocabulary gives one token per "
    "pre-token)",
)
SIZE_GAP = Readout("size_gap", "entries − declared size", fmt=".0f")
TOKEN_GAP = Readout("token_gap", "whole-text tokens − per-type sum", fmt=".0f")
UNK_GAP = Readout(
    "unk_gap",
    "pre-tokens with an [UNK] − those that must have one",
    fmt=".0f",
    definition="must: outside the word vocabulary; for WordPiece, holding a character unseen "
    "in training (or longer than its limit); for the byte-level BPE, none",
)
ROUNDTRIP = Readout("roundtrip_errors", "held-out pre-token types the BPE does not decode back", fmt=".0f")
UNK_TOKENS = Readout("unk_tokens", "[UNK] tokens", fmt=".0f")
LEARNER = Readout(
    "learner_mismatch",
    "merges where the frequency rule differs from Hugging Face's BPE trainer",
    fmt=".0f",
    definition="position by position over the first K, on characters without a prefix",
)
HF_WORDPIECE = Readout(
    "hf_mismatch",
    "new tokens where Hugging Face's WordPiece trainer differs from the frequency rule",
    definition="position by position over its first K",
    fmt=".0f",
)
OVERLAP = Readout(
    "overlap",
    "share of the likelihood rule's first K tokens that the frequency rule also makes in its first K",
    fmt=".3f",
)
RARER = Readout(
    "log10_rarer",
    "log10(median pair count of the frequency rule's first K merges ÷ the likelihood rule's)",
    better="higher",
    fmt=".2f",
)


def rate_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per (held-out text, vocabulary kind, size): its counts and shares."""
    rows = []
    for r in part(runs, "oov"):
        c, m = r["config"], r["metrics"]
        for h, s in m["sets"].items():
            occ = s["occurrences"]
            rows.append(
                {
                    "heldout": h,
                    "kind": c["kind"],
                    "size": c["size"],
                    "unit": 0,
                    "unk_pct": 100 * s["unk_occurrences"] / occ,
                    "unk_type_pct": 100 * s["unk_types"] / s["types"],
                    "unk_token_pct": 100 * s["unk_tokens"] / s["tokens"],
                    "tokens_per_char": s["tokens"] / s["chars"],
                    "tokens_per_word": s["tokens"] / occ,
                    "used_pct": 100 * s["used"] / m["vocab_size"],
                    "unk_occurrences": s["unk_occurrences"],
                    "occurrences": occ,
                    "tokens": s["tokens"],
                    "size_gap": m["vocab_size"] - c["size"],
                    "token_gap": s["whole_text_tokens"] - s["tokens"],
                    "unk_gap": s["unk_occurrences"] - s["predicted_unk"],
                    "roundtrip_errors": s["roundtrip_errors"],
                    "unk_tokens": s["unk_tokens"],
                    "unk_examples": s["unk_examples"],
                }
            )
    return pd.DataFrame(rows).sort_values(["heldout", "kind", "size"]).reset_index(drop=True)


def against_word(rates: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cut, length): each subword row beside the word vocabulary's row of the same text and size."""
    key = ["heldout", "size"]
    word = rates[rates.kind == "word"][[*key, "unk_occurrences", "unk_pct", "tokens"]]
    sub = rates[rates.kind.isin(SUBWORD)].merge(word, on=key, suffixes=("", "_word"))
    pairs = zip(sub.unk_occurrences_word, sub.unk_occurrences)
    cut = sub.assign(
        log10_cut=[math.log10(max(w, 1) / max(s, 1)) for w, s in pairs], word_pct=sub.unk_pct_word
    )[["heldout", "kind", "size", "unit", "log10_cut", "word_pct", "unk_pct"]]
    length = sub.assign(length_ratio=sub.tokens / sub.tokens_word)[
        ["heldout", "kind", "size", "unit", "length_ratio", "tokens_per_char", "tokens_per_word"]
    ]
    return cut.reset_index(drop=True), length.reset_index(drop=True)


def word_steps(rates: pd.DataFrame) -> pd.DataFrame:
    """The word vocabulary's [UNK] count at each size over the next smaller size's (each floored at one)."""
    rows = []
    for h, g in rates[rates.kind == "word"].groupby("heldout"):
        g = g.sort_values("size")
        for (_, a), (_, b) in zip(g.iloc[:-1].iterrows(), g.iloc[1:].iterrows()):
            rows.append(
                {
                    "heldout": h,
                    "size": b["size"],
                    "from_size": a["size"],
                    "unit": 0,
                    "step": max(b.unk_occurrences, 1) / max(a.unk_occurrences, 1),
                }
            )
    return pd.DataFrame(rows, columns=["heldout", "size", "from_size", "unit", "step"])


def _short(token: str, most: int = 14) -> str:
    return token if len(token) <= most else f"{token[:8]}…({len(token)} chars)"


def _merge(m: dict) -> str:
    return f"{_short(m['left'])} + {_short(m['right'])} → {_short(m['token'])}"


def new_tokens(merges: list[dict]) -> list[str]:
    """The tokens the merges make, in order, each once (a merge can remake a token another merge made)."""
    return list(dict.fromkeys(m["token"] for m in merges))


def _mismatch(a: list, b: list) -> int:
    return sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))


def merge_rows(runs: list[dict]) -> pd.DataFrame:
    rows = []
    for r in part(runs, "merges"):
        m, k = r["metrics"], r["config"]["merges"]
        freq, lik = m["rules"]["frequency"], m["rules"]["likelihood"]
        f_new, l_new = new_tokens(freq), new_tokens(lik)
        med = statistics.median(x["pair"] for x in freq) / statistics.median(x["pair"] for x in lik)
        rows.append(
            {
                "unit": 0,
                "merges": k,
                "overlap": len(set(l_new) & set(f_new)) / len(l_new),
                "log10_rarer": math.log10(med),
                "hf_mismatch": _mismatch(m["hf_wordpiece"], f_new[: len(m["hf_wordpiece"])]),
                "learner_mismatch": _mismatch([list(x) for x in m["plain"]], [list(x) for x in m["hf_bpe"]]),
            }
        )
    return pd.DataFrame(rows)


def observe(runs: list[dict]) -> dict[str, pd.DataFrame]:
    rates = rate_rows(runs)
    cut, length = against_word(rates)
    steps, merges = word_steps(rates), merge_rows(runs)
    return {"rates": rates, "cut": cut, "length": length, "steps": steps, "merges": merges}


# ------------------------------------------------------------------ the report's tables
def write_tables(t: dict, runs: list[dict], out, shown: int) -> dict:
    """The rates per vocabulary, the held-out words each could not encode at its largest size, and the
    first `shown` merges of each rule. Returns the numbers the summary quotes."""
    r = t["rates"]
    cols = ["heldout", "kind", "size", "unk_pct", "unk_type_pct", "unk_token_pct", "tokens_per_char",
            "tokens_per_word", "used_pct"]  # fmt: skip
    out.table(
        "rates",
        r[cols],
        "Held-out [UNK] shares (%), tokens per character and per pre-token, and the "
        "share of the vocabulary the held-out text uses (%)",
    )
    big = r[(r["size"] == r["size"].max()) & (r.unk_occurrences > 0)]
    unk = pd.DataFrame(
        [
            {
                "heldout": x.heldout,
                "kind": x.kind,
                "size": x.size,
                "most frequent pre-tokens with an [UNK]": ", ".join(f"{w} ×{c}" for w, c in x.unk_examples),
            }
            for x in big.itertuples()
        ]
    )
    if len(unk):
        out.table("unk_words", unk, "What each vocabulary could not encode at its largest size")
    mr = part(runs, "merges")
    if mr:
        rules = mr[0]["metrics"]["rules"]
        hf = mr[0]["metrics"]["hf_wordpiece"]
        rows = []
        for i in range(min(shown, len(rules["frequency"]), len(rules["likelihood"]))):
            f, li = rules["frequency"][i], rules["likelihood"][i]
            rows.append(
                {
                    "rank": i + 1,
                    "frequency rule": _merge(f),
                    "pair count": f["pair"],
                    "likelihood rule": _merge(li),
                    "pair count ": li["pair"],
                    "score": li["pair"] / (li["left_count"] * li["right_count"]),
                    "HF WordPiece trainer": _short(hf[i]) if i < len(hf) else "—",
                }
            )
        out.table(
            "merges",
            pd.DataFrame(rows),
            "The first merges of the frequency rule (BPE) and the "
            "likelihood rule (WordPiece) on the same training pre-tokens, beside Hugging Face's "
            "WordPiece trainer",
        )
        letters = [m for m in rules["likelihood"] if re.fullmatch(r"(##)?[A-Za-z]+", m["token"])][:shown]
        out.table(
            "likelihood_letters",
            pd.DataFrame(
                [
                    {
                        "rank": rules["likelihood"].index(m) + 1,
                        "merge": _merge(m),
                        "pair count": m["pair"],
                        "count of left": m["left_count"],
                        "count of right": m["right_count"],
                    }
                    for m in letters
                ]
            ),
            "The likelihood rule's first merges that make a token of letters only",
        )
    word = r[r.kind == "word"].set_index(["heldout", "size"]).unk_pct
    most = {"unk": ("unk_occurrences", "max"), "of": ("occurrences", "max")}
    sub = r[r.kind.isin(SUBWORD)].groupby("heldout").agg(**most)
    per_word = r[r.kind.isin(SUBWORD)].groupby("size").tokens_per_word.agg(["min", "max"])
    return {
        "word_unk_pct": {f"{h}/{s}": v for (h, s), v in word.items()},
        "subword_max_unk": {h: [int(x.unk), int(x.of)] for h, x in sub.iterrows()},
        "subword_tokens_per_word": {int(s): [x["min"], x["max"]] for s, x in per_word.iterrows()},
    }


# ------------------------------------------------------------------ figures
STYLE = {
    "word": ("o", "-"),
    "bpe": ("s", "-"),
    "wordpiece": ("^", "--"),
}  # marker, line: BPE and WordPiece overlap


def _by_kind(ax, df: pd.DataFrame, y: str) -> None:
    for kind in ("word", *SUBWORD):
        g = df[df.kind == kind].sort_values("size")
        marker, ls = STYLE[kind]
        ax.plot(g["size"], g[y], marker=marker, ls=ls, ms=4, label=LABELS[kind])


@drawing
def plot_rates(rates: pd.DataFrame, out) -> None:
    """[UNK] share and tokens per character against vocabulary size, per held-out text."""
    sets = [h for h in HELDOUT if h in set(rates.heldout)]
    fig, axes = subplots(len(sets), 2, width=4.6, height=3.3)
    for col, h in enumerate(sets):
        d = rates[rates.heldout == h]
        for row, (y, label) in enumerate(
            (("unk_pct", "pre-tokens with an [UNK] (%)"), ("tokens_per_char", "tokens per character"))
        ):
            ax = axes[row * len(sets) + col]
            _by_kind(ax, d, y)
            log_ticks(ax, d["size"].unique())
            ax.set(xlabel="vocabulary size (entries)", ylabel=label, title=f"{h}: {SETS[h]}")
            ax.legend(fontsize=7)
    out.figure(
        "rates",
        fig,
        "Held-out [UNK] share (top) and its cost, tokens per character (bottom), "
        "against vocabulary size: word, byte-level BPE and WordPiece vocabularies of equal size "
        "fitted on the training works.",
    )


@drawing
def plot_merges(runs: list[dict], out) -> None:
    """The pair count behind each merge, by rank, for the two rules (log scale)."""
    mr = part(runs, "merges")
    if not mr:
        return
    rules = mr[0]["metrics"]["rules"]
    fig, axes = subplots(1, 1, width=6.0, height=3.4)
    ax = axes[0]
    for rule, label in (("frequency", "frequency rule (BPE)"), ("likelihood", "likelihood rule (WordPiece)")):
        ax.plot(range(1, len(rules[rule]) + 1), [m["pair"] for m in rules[rule]], lw=1.2, label=label)
    ax.set(
        yscale="log",
        xlabel="merge rank",
        ylabel="count of the merged pair (occurrences)",
        title="What each rule merges first, on the same training pre-tokens",
    )
    ax.legend(fontsize=8)
    out.figure(
        "merges",
        fig,
        "Count of the pair each merge joins, by rank: the frequency rule takes the "
        "commonest pair; the likelihood rule takes pairs whose parts rarely occur apart, however rare "
        "the pair.",
    )
