"""Run recipes of `subword_oov`: one vocabulary trained on the training works and counted on the held-out
works (`run_oov`), and the first merges of the frequency and likelihood rules beside Hugging Face's trainers
(`run_merges`). Every number is a count: deterministic, no seed.

A held-out text is counted per pre-token type (each type encoded once, weighted by its occurrences), and the
whole text is encoded once more to check that the per-type sums are the tokenizer's own count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from .vocabularies import (
    RULES,
    UNK,
    heldout_texts,
    hf_char_merges,
    hf_wordpiece_tokens,
    learn_merges,
    serial,
    text_alphabet,
    train,
    training_texts,
    word_counts,
)

EXAMPLES = 8  # the most frequent held-out pre-tokens with an [UNK] kept in the record


def count_heldout(tok, kind: str, text: str, seen: set[str]) -> dict:
    """What the tokenizer does to one held-out text: pre-tokens, tokens and [UNK]s, each [UNK] set against the
    pre-tokens that must give one (word: outside the vocabulary; WordPiece: a character not seen in training,
    or longer than the model's limit; byte-level BPE: none)."""
    counts = word_counts([text])
    types = list(counts)
    unk, vocab = tok.token_to_id(UNK), tok.get_vocab()
    limit = getattr(tok.model, "max_input_chars_per_word", None)
    with serial():
        encs = tok.encode_batch(types)
        whole = len(tok.encode(text).ids)
    rows = {"occurrences": 0, "types": len(types), "chars": len(text), "tokens": 0, "unk_tokens": 0,
            "unk_occurrences": 0, "unk_types": 0, "predicted_unk": 0, "roundtrip_errors": 0}  # fmt: skip
    used, unknown = set(), Counter()
    for w, e in zip(types, encs):
        c, ids = counts[w], e.ids
        n_unk = ids.count(unk)
        rows["occurrences"] += c
        rows["tokens"] += c * len(ids)
        rows["unk_tokens"] += c * n_unk
        rows["unk_occurrences"] += c * (n_unk > 0)
        rows["unk_types"] += n_unk > 0
        if n_unk:
            unknown[w] = c
        used.update(ids)
        if kind == "word":
            must = w not in vocab
        elif kind == "wordpiece":
            must = any(ch not in seen for ch in w) or len(w) > limit
        else:
            must = False
            rows["roundtrip_errors"] += tok.decode(ids) != w
        rows["predicted_unk"] += c * must
    rows["whole_text_tokens"] = whole
    rows["used"] = len(used)
    rows["unk_examples"] = unknown.most_common(EXAMPLES)
    return rows


def run_oov(cfg: dict, ctx) -> dict:
    """One vocabulary (cfg: kind, size) trained on the training works, counted on each held-out text."""
    texts = training_texts()
    tok = train(cfg["kind"], texts, cfg["size"])
    wordpiece = cfg["kind"] == "wordpiece"
    seen = set(text_alphabet(texts)) if wordpiece else set()  # only WordPiece's [UNK]s depend on it
    sets = {name: count_heldout(tok, cfg["kind"], t, seen) for name, t in heldout_texts().items()}
    return {"vocab_size": tok.get_vocab_size(), "sets": sets}


def run_merges(cfg: dict, ctx) -> dict:
    """The first cfg['merges'] merges of each rule on the training pre-tokens (WordPiece's split: '##'
    continuation pieces), the new tokens of Hugging Face's WordPiece trainer in id order, and the frequency
    rule without a prefix beside Hugging Face's BPE trainer on characters (the learner's own check)."""
    texts = training_texts()
    counts, k = word_counts(texts), cfg["merges"]
    rules = {r: [asdict(m) for m in learn_merges(counts, k, r)] for r in RULES}
    plain = [[m.left, m.right] for m in learn_merges(counts, k, "frequency", prefix=None, specials=())]
    return {
        "rules": rules,
        "hf_wordpiece": hf_wordpiece_tokens(texts, k),
        "plain": plain,
        "hf_bpe": [list(m) for m in hf_char_merges(texts, k)],
    }
