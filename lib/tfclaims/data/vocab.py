"""The subword vocabulary, torch-free: its size and the tokenizer trained to it, which grids and profiles read
before anything runs."""

from __future__ import annotations

import os

from .files import CorpusError

DEFAULT_VOCAB = 4096
PAD_TOKEN = "<pad>"
MIN_VOCAB, MAX_VOCAB = 512, 65535  # 256 bytes + merges; ids are stored as int32 but kept below 2^16


def _tokenizer(tj: str):
    """A trained tokenizer from its JSON, reading text literally: '<pad>' in a text is five characters, not
    the padding token (the flag is not part of the JSON, so it is set at every load)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tj)
    tok.encode_special_tokens = True
    return tok


def train_tokenizer(texts: list[str], vocab_size: int) -> str:
    """A byte-level BPE tokenizer trained on `texts`, as JSON. Deterministic: one thread, no randomness."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # merge order must not depend on thread scheduling
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN],  # id 0, the padding token of the character corpus too
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.token_to_id(PAD_TOKEN) != 0:
        raise CorpusError("the BPE padding token did not get id 0")
    return tok.to_str()
