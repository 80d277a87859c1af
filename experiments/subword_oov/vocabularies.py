"""Word, byte-level BPE and WordPiece vocabularies of one size, trained with Hugging Face `tokenizers` on the
same pre-tokens, and a merge learner that picks each merge by frequency (BPE) or by the WordPiece likelihood
score. Torch-free.

Every vocabulary sees the same pre-tokens: `pre_tokenizers.Whitespace` (runs of word characters, runs of other
non-space characters). The BPE then writes each pre-token as its UTF-8 bytes (GPT-2's byte-to-character
map), so its alphabet is the 256 bytes and no text can fall outside it; the WordPiece alphabet is the
characters seen in training, each also as a continuation piece ('##c'); the word vocabulary keeps the most
frequent pre-tokens. Each holds one '[UNK]' entry, counted in its size.

Hugging Face's WordPiece trainer is its BPE trainer with a '##' continuation prefix: merges picked by pair
frequency, ties broken by the smaller pair of ids. It gives a continuation piece its id in the order it meets
words in a hash map, so the ids, and with them the ties, change from one process to the next. `train` fixes
them by declaring every continuation piece, sorted, as a special token before training (they get the ids
after '[UNK]' in that order); the result is rebuilt as a plain WordPiece model, so the pieces are ordinary
vocabulary.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tfclaims.data.files import VAL_WORKS, CorpusError, corpus_files

UNK = "[UNK]"
PREFIX = "##"  # WordPiece's continuation prefix
KINDS = ("word", "bpe", "wordpiece")
RULES = ("frequency", "likelihood")
FOLIO = "_gut_f.txt"  # the First-Folio spelling of a play, beside its Gutenberg text


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def training_texts() -> list[str]:
    """The training works, one text each (the validation works left out)."""
    return [_read(p) for p in corpus_files() if p.name not in VAL_WORKS]


def heldout_texts() -> dict[str, str]:
    """The held-out works: 'modern', the validation plays as the training works are spelled; 'folio', the same
    plays in their First-Folio spelling (shipped beside them), which no vocabulary saw in any spelling."""
    root = corpus_files()[0].parent
    folio = [root / w.replace("_gut.txt", FOLIO) for w in VAL_WORKS]
    missing = [p.name for p in folio if not p.is_file()]
    if missing:
        raise CorpusError(f"the First-Folio texts {missing} are missing under {root}")
    return {
        "modern": "\n\n".join(_read(root / w) for w in VAL_WORKS),
        "folio": "\n\n".join(_read(p) for p in folio),
    }


@contextmanager
def serial():
    """Hugging Face `tokenizers` without its thread pool while inside (the library's own switch), so that
    nothing it computes depends on scheduling."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def pre_tokenizer():
    """The pre-tokenizer every vocabulary shares: word-character runs and other non-space runs."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Whitespace()


def pre_tokens(text: str) -> list[str]:
    return [w for w, _ in pre_tokenizer().pre_tokenize_str(text)]


def word_counts(texts: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    for t in texts:
        counts.update(pre_tokens(t))
    return counts


def alphabet(counts: Mapping[str, int]) -> list[str]:
    """The characters of the pre-tokens, by code point (the order Hugging Face's trainers give them ids)."""
    return sorted({c for w in counts for c in w})


def text_alphabet(texts: Iterable[str]) -> list[str]:
    """`alphabet` of the texts' pre-tokens without cutting them: every character the pre-tokenizer keeps."""
    return sorted(c for c in set().union(*map(set, texts)) if pre_tokens(c))


def train(kind: str, texts: list[str], size: int):
    """A `tokenizers.Tokenizer` of `size` entries ('[UNK]' included) of the given kind, trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    with serial():
        if kind == "word":
            tok = Tokenizer(models.WordLevel(unk_token=UNK))
            trainer = trainers.WordLevelTrainer(vocab_size=size, special_tokens=[UNK], show_progress=False)
        elif kind == "bpe":
            tok = Tokenizer(models.BPE(unk_token=UNK))
            trainer = trainers.BpeTrainer(
                vocab_size=size,
                special_tokens=[UNK],
                show_progress=False,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            )
        else:
            pieces = [PREFIX + c for c in text_alphabet(texts)]  # fixed ids: see the module's note
            tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix=PREFIX))
            trainer = trainers.WordPieceTrainer(
                vocab_size=size,
                special_tokens=[UNK, *pieces],
                continuing_subword_prefix=PREFIX,
                show_progress=False,
            )
        tok.pre_tokenizer = pre_tokenizer()
        tok.train_from_iterator(texts, trainer=trainer)
    if kind == "bpe":  # the same pre-tokens, then each written as its bytes
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizer(), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
        tok.decoder = decoders.ByteLevel()
    if kind == "wordpiece":
        vocab = tok.get_vocab(with_added_tokens=False)
        tok = Tokenizer(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix=PREFIX))
        tok.pre_tokenizer = pre_tokenizer()
        tok.decoder = decoders.WordPiece(prefix=PREFIX)
    return tok


def hf_wordpiece_tokens(texts: list[str], n: int) -> list[str]:
    """The first `n` new tokens of Hugging Face's WordPiece trainer (through `train`), in id order."""
    base = 1 + 2 * len(text_alphabet(texts))  # [UNK], the continuation pieces, the alphabet
    vocab = train("wordpiece", texts, base + n).get_vocab()
    return [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i >= base]


def hf_char_merges(texts: list[str], n: int) -> list[tuple[str, str]]:
    """The first `n` merges of Hugging Face's BPE trainer on the characters of the pre-tokens (no bytes, no
    prefix, no special token)."""
    import json

    from tokenizers import Tokenizer, models, trainers

    size = len(text_alphabet(texts)) + n
    with serial():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizer()
        tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(vocab_size=size, show_progress=False))
    merges = json.loads(tok.to_str())["model"]["merges"]  # "a b" strings or [a, b] pairs, by version
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges][:n]


# ------------------------------------------------------------------ the merge rules
@dataclass(frozen=True)
class Merge:
    """One merge: the two units joined, the token they make, and the counts it was chosen on (occurrences in
    the current segmentation of the training pre-tokens, each weighted by its pre-token's count)."""

    left: str
    right: str
    token: str
    pair: int
    left_count: int
    right_count: int

    @property
    def score(self) -> float:
        """WordPiece's likelihood score: freq(ab) / (freq(a)·freq(b))."""
        return self.pair / (self.left_count * self.right_count)


def learn_merges(
    counts: Mapping[str, int], n: int, rule: str, *, prefix: str | None = PREFIX, specials: tuple = (UNK,)
) -> list[Merge]:
    """The first `n` merges over the pre-token counts, each the pair with the highest frequency ('frequency',
    BPE's rule) or the highest freq(ab)/(freq(a)·freq(b)) ('likelihood', WordPiece's as Hugging Face's course
    states it). With `prefix`, a pre-token starts as its first character then continuation pieces ('w ##o ##r
    ##d'), as WordPiece splits it; without, as its characters. Ties go to the smaller pair of ids, the ids
    given as Hugging Face's trainers give them: `specials`, then (with `prefix`) every continuation piece,
    then the alphabet, each by code point, then each new token in the order it is made."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    chars = alphabet(counts)
    names = list(specials) + ([prefix + c for c in chars] if prefix else []) + chars
    ids = {s: i for i, s in enumerate(names)}
    words = [[ids[w[0]]] + [ids[(prefix or "") + c] for c in w[1:]] for w in counts]
    freq = list(counts.values())
    units: Counter = Counter()
    pairs: Counter = Counter()
    where: dict[tuple[int, int], set[int]] = {}

    def tally(i: int, sign: int) -> None:  # add (+1) or remove (−1) pre-token i's units and pairs
        w, f = words[i], freq[i] * sign
        for u in w:
            units[u] += f
        for p in zip(w, w[1:]):
            pairs[p] += f
            if sign > 0:
                where.setdefault(p, set()).add(i)

    for i in range(len(words)):
        tally(i, +1)

    def key(item):
        (a, b), c = item
        value = c if rule == "frequency" else c / (units[a] * units[b])
        return value, -a, -b

    out = []
    while len(out) < n:
        live = [(p, c) for p, c in pairs.items() if c > 0]
        if not live:
            break
        (a, b), c = max(live, key=key)
        right = names[b][len(prefix) :] if prefix and names[b].startswith(prefix) else names[b]
        token = names[a] + right
        if token not in ids:
            ids[token] = len(names)
            names.append(token)
        out.append(Merge(names[a], names[b], token, c, units[a], units[b]))
        new = ids[token]
        for i in sorted(where.pop((a, b), ())):
            tally(i, -1)
            w, merged, j = words[i], [], 0
            while j < len(w):  # left to right, non-overlapping, as the trainers merge a word
                if j + 1 < len(w) and (w[j], w[j + 1]) == (a, b):
                    merged.append(new)
                    j += 2
                else:
                    merged.append(w[j])
                    j += 1
            words[i] = merged
            tally(i, +1)
    return out
