"""The corpus: offline, split by whole works, cached, with real padding for line batches."""

import torch

from tfclaims.data.corpus import PAD, VAL_WORKS, corpus_files, load_corpus, pad_batch, random_windows


def test_split_by_whole_works_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCLAIMS_CACHE", str(tmp_path))
    c = load_corpus()
    assert set(c.val_works) == set(VAL_WORKS) and not set(c.val_works) & set(c.train_works)
    assert (
        len(c.train_works) + len(c.val_works) == len(corpus_files()) == 42
    )  # every *_gut.txt work, none twice
    assert 0.08 < c.val.numel() / (c.train.numel() + c.val.numel()) < 0.15
    assert len(list(tmp_path.glob("shakespeare-*.pt"))) == 1
    c2 = load_corpus()
    assert torch.equal(c.train, c2.train) and c.chars == c2.chars
    assert c.decode(c.encode("To be, or not to be")) == "To be, or not to be"
    assert int(c.train.min()) >= 1 and int(c.train.max()) < c.vocab_size


def test_windows_and_padded_lines():
    c = load_corpus()
    x, y = random_windows(c.train, 4, 10, torch.Generator().manual_seed(0))
    assert x.shape == (4, 10) and torch.equal(x[:, 1:], y[:, :-1])
    lines = c.lines("val", 8, 40)
    assert all(8 <= len(line) <= 40 for line in lines[:100])
    x, y, m = pad_batch(lines[:5])
    assert torch.equal(m, x != PAD) and bool((y[~m] == -1).all())
    assert m.sum(1).tolist() == [len(line) - 1 for line in lines[:5]]
