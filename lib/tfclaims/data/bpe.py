"""A subword view of the corpus: a byte-level BPE tokenizer trained on the training works only.

The tokenizer (Hugging Face `tokenizers`, byte-level pre-tokenisation as GPT-2) is trained locally at first
use, so nothing is downloaded; it and the tokenised tensors are cached beside the character corpus, keyed
by the corpus files, the split and the vocabulary size. Token 0 is the padding token, as in the character
corpus; the 256 byte symbols and the merges fill the rest. `load(kind)` offers either view.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch

from ..io import atomic_torch_save, atomic_write_text
from .corpus import VAL_WORKS, Corpus, cache_dir, corpus_files, load_corpus
from .vocab import DEFAULT_VOCAB, MAX_VOCAB, MIN_VOCAB, _tokenizer, train_tokenizer
from .vocab import PAD_TOKEN as PAD_TOKEN  # re-exported: the padding token of the BPE view

KINDS = ("char", "bpe")


@dataclass(frozen=True)
class BPECorpus:
    """The corpus as BPE ids; duck-types `corpus.Corpus` where training needs it (train, val, vocab_size)."""

    train: torch.Tensor  # (N_train,) int32 token ids
    val: torch.Tensor  # (N_val,) int32
    tokenizer_json: str  # the trained tokenizer, serialised
    vocab_size: int
    train_chars: int  # characters the splits hold, for the compression ratio
    val_chars: int
    train_works: tuple[str, ...]
    val_works: tuple[str, ...]

    @property
    def chars_per_token(self) -> float:
        """Compression on the validation works (held out from the tokenizer's training)."""
        return self.val_chars / self.val.numel()

    def tokenizer(self):
        return _tokenizer(self.tokenizer_json)

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer().encode(text).ids, dtype=torch.int32)

    def decode(self, ids) -> str:
        return self.tokenizer().decode([int(i) for i in ids if int(i) != 0])

    def describe(self) -> dict:
        return {
            "tokenizer": "byte-level BPE",
            "vocab_size": self.vocab_size,
            "chars_per_token": self.chars_per_token,
            "train_tokens": self.train.numel(),
            "val_tokens": self.val.numel(),
        }


def load_bpe_corpus(vocab_size: int = DEFAULT_VOCAB) -> BPECorpus:
    if not isinstance(vocab_size, int) or not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
        raise ValueError(
            f"BPE vocabulary must be an integer in [{MIN_VOCAB}, {MAX_VOCAB}], got {vocab_size!r}"
        )
    files = corpus_files()
    key = hashlib.sha256(
        json.dumps(
            [(p.name, p.stat().st_size) for p in files] + list(VAL_WORKS) + ["bpe", vocab_size]
        ).encode()
    ).hexdigest()[:16]
    path = cache_dir() / f"shakespeare-bpe{vocab_size}-{key}.pt"
    if path.exists():
        try:
            d = torch.load(path, weights_only=True)
            return BPECorpus(
                d["train"],
                d["val"],
                d["tokenizer"],
                d["vocab_size"],
                d["train_chars"],
                d["val_chars"],
                tuple(d["train_works"]),
                tuple(d["val_works"]),
            )
        except Exception:
            path.unlink(missing_ok=True)  # a damaged cache is rebuilt
    texts = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in files}
    val_works = tuple(n for n in texts if n in VAL_WORKS)
    train_works = tuple(n for n in texts if n not in VAL_WORKS)
    train_text = "\n\n".join(texts[n] for n in train_works)
    val_text = "\n\n".join(texts[n] for n in val_works)
    tj = train_tokenizer([texts[n] for n in train_works], vocab_size)
    tok = _tokenizer(tj)

    def encode(text):
        return torch.tensor(tok.encode(text).ids, dtype=torch.int32)

    corpus = BPECorpus(
        encode(train_text),
        encode(val_text),
        tj,
        tok.get_vocab_size(),
        len(train_text),
        len(val_text),
        train_works,
        val_works,
    )
    atomic_torch_save(
        {
            "train": corpus.train,
            "val": corpus.val,
            "tokenizer": tj,
            "vocab_size": corpus.vocab_size,
            "train_chars": corpus.train_chars,
            "val_chars": corpus.val_chars,
            "train_works": list(train_works),
            "val_works": list(val_works),
        },
        path,
    )
    atomic_write_text(path.with_suffix(".tokenizer.json"), tj)  # inspectable beside the tensors
    return corpus


def load(kind: str = "char", vocab_size: int = DEFAULT_VOCAB) -> Corpus | BPECorpus:
    """The corpus as characters (`corpus.load_corpus`) or as byte-level BPE tokens of `vocab_size`."""
    if kind == "char":
        return load_corpus()
    if kind == "bpe":
        return load_bpe_corpus(vocab_size)
    raise ValueError(f"tokenizer must be one of {KINDS}, got {kind!r}")
