"""The byte-level BPE view of the corpus: a deterministic tokenizer with padding at id 0, lossless on any
text, the requested vocabulary, and a cache that is reused and rebuilt when damaged.

Training on the whole corpus takes seconds, so it happens twice in this file at most: once for the shared
corpus fixture (in its own cache directory) and once when a damaged cache file is rebuilt. Everything else
trains on a few sentences, or on short slices of three works standing in for the corpus."""

import pytest
import torch
from tokenizers import Tokenizer

from tfclaims.data import bpe
from tfclaims.data.corpus import VAL_WORKS, Corpus, corpus_files

V = 1000  # not a power of two, so "as asked" is not a coincidence with a default
SMALL_V = 300  # 256 bytes + the padding token + 43 merges

SENTENCES = [
    "To be, or not to be, that is the question:\n",
    "Whether 'tis nobler in the mind to suffer\nThe slings and arrows of outrageous fortune,\n",
    "Or to take arms against a sea of troubles\nAnd by opposing end them. To die: to sleep;\n",
    "No more; and by a sleep to say we end\nThe heart-ache and the thousand natural shocks\n",
]
TEXTS = SENTENCES * 5

ROUND_TRIP = [
    "To be, or not to be, that is the question.",
    "héllo wörld — naïve café, Æsop's fables, ñandú",
    "日本語のテキスト, 中文, 한국어, Ελληνικά, кириллица",
    "emoji 🎭🗡️👑 and a combining accent: é",
    "line one\nline two\n\n\nafter blank lines\r\nwindows ending",
    "\ttabs\tand   runs of   spaces   ",
    "   leading spaces, trailing newline\n",
    "",
    "x",
    "\n",
    "symbols: ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./ 0123456789",
    "\x00\x01 control bytes \x7f",
    "the padding token's spelling is plain text: a <pad> b<pad>",
]


def _small_corpus(tokenizer_json: str) -> bpe.BPECorpus:
    """A BPECorpus around a tokenizer, for its encode/decode (the tensors are placeholders)."""
    tok = Tokenizer.from_str(tokenizer_json)
    ids = torch.zeros(4, dtype=torch.int32)
    return bpe.BPECorpus(ids, ids, tokenizer_json, tok.get_vocab_size(), 4, 4, (), ())


@pytest.fixture(scope="module")
def small_json():
    return bpe.train_tokenizer(TEXTS, SMALL_V)


@pytest.fixture(scope="module")
def bpe_cache(tmp_path_factory):
    """A cache directory holding the corpus tokenised with a V-token BPE (trained once here)."""
    d = tmp_path_factory.mktemp("bpe-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFCLAIMS_CACHE", str(d))
        corpus = bpe.load("bpe", V)
    return d, corpus


@pytest.fixture(scope="module")
def corpus(bpe_cache):
    return bpe_cache[1]


# ------------------------------------------------------------------ the tokenizer
def test_train_tokenizer_is_deterministic(small_json):
    again = bpe.train_tokenizer(TEXTS, SMALL_V)
    assert again == small_json
    # the comparison can tell tokenizers apart: other texts give other merges
    other = bpe.train_tokenizer(
        ["All the world's a stage,\nAnd all the men and women merely players;\n"] * 20, SMALL_V
    )
    assert other != small_json


def test_small_tokenizer_has_the_asked_vocabulary_and_padding_at_zero(small_json):
    tok = Tokenizer.from_str(small_json)
    assert tok.get_vocab_size() == SMALL_V
    assert tok.token_to_id(bpe.PAD_TOKEN) == 0
    assert tok.id_to_token(0) == bpe.PAD_TOKEN
    # every byte is in the alphabet, so nothing is ever unknown
    assert len(tok.get_vocab()) == SMALL_V
    merges = [t for t in tok.get_vocab() if len(t) > 1 and t != bpe.PAD_TOKEN]
    assert merges, "the trainer learned no merges"


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_small_tokenizer_round_trips_arbitrary_text(small_json, text):
    c = _small_corpus(small_json)
    ids = c.encode(text)
    assert ids.dtype == torch.int32
    assert bool((ids > 0).all()), "ordinary text must never encode to the padding id"
    assert c.decode(ids) == text


def test_decode_skips_padding(small_json):
    c = _small_corpus(small_json)
    text = "To be, or not to be"
    ids = c.encode(text)
    padded = torch.cat([torch.zeros(2, dtype=torch.int32), ids, torch.zeros(5, dtype=torch.int32)])
    assert c.decode(padded) == text
    assert c.decode(padded.tolist()) == text


def test_merges_compress_the_training_text(small_json):
    c = _small_corpus(small_json)
    text = "".join(SENTENCES)
    assert c.encode(text).numel() < len(text.encode("utf-8"))


# ------------------------------------------------------------------ the corpus
@pytest.mark.slow
def test_load_bpe_gives_the_asked_vocabulary_and_ids_in_range(corpus):
    assert isinstance(corpus, bpe.BPECorpus)
    assert corpus.vocab_size == V
    assert corpus.tokenizer().get_vocab_size() == V
    assert corpus.tokenizer().token_to_id(bpe.PAD_TOKEN) == 0
    for split in (corpus.train, corpus.val):
        assert split.dim() == 1 and split.dtype == torch.int32 and split.numel() > 10_000
        assert int(split.min()) >= 1  # the text holds no padding
        assert int(split.max()) < corpus.vocab_size
    assert set(corpus.val_works) == set(VAL_WORKS)
    assert not set(corpus.val_works) & set(corpus.train_works)
    assert len(corpus.train_works) + len(corpus.val_works) == len(corpus_files())


def test_load_char_gives_the_character_corpus():
    c = bpe.load("char")
    assert isinstance(c, Corpus)
    assert c.vocab_size == len(c.chars) + 1
    for split in (c.train, c.val):
        assert split.dim() == 1 and split.numel() > 10_000
        assert int(split.min()) >= 1 and int(split.max()) < c.vocab_size


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_corpus_tokenizer_round_trips_arbitrary_text(corpus, text):
    ids = corpus.encode(text)
    assert all(0 < i < corpus.vocab_size for i in ids.tolist())
    assert corpus.decode(ids) == text


def test_corpus_decodes_its_own_validation_text(corpus):
    """The first validation tokens decode to the start of the first validation work."""
    first = next(p for p in corpus_files() if p.name == corpus.val_works[0])
    head = corpus.decode(corpus.val[:200])
    assert len(head) > 200  # several characters per token
    assert first.read_text(encoding="utf-8", errors="replace").startswith(head)


def test_describe_reports_compression(corpus):
    d = corpus.describe()
    assert d["tokenizer"] == "byte-level BPE"
    assert d["vocab_size"] == V
    assert d["train_tokens"] == corpus.train.numel() and d["val_tokens"] == corpus.val.numel()
    assert d["chars_per_token"] == pytest.approx(corpus.val_chars / corpus.val.numel())
    assert 1.5 < d["chars_per_token"] < 8  # English under a 1000-token BPE: a few characters per token
    assert corpus.train_chars > corpus.val_chars > 0


# ------------------------------------------------------------------ invalid arguments
@pytest.mark.parametrize("bad", [0, 256, bpe.MIN_VOCAB - 1, bpe.MAX_VOCAB + 1, 4096.0, "4096", None])
def test_invalid_vocabulary_raises(bad, monkeypatch):
    def no_training(*a, **k):
        raise AssertionError("an invalid vocabulary must be rejected before any training")

    monkeypatch.setattr(bpe, "train_tokenizer", no_training)
    msg = rf"BPE vocabulary must be an integer in \[{bpe.MIN_VOCAB}, {bpe.MAX_VOCAB}\], got {bad!r}"
    with pytest.raises(ValueError, match=msg):
        bpe.load_bpe_corpus(bad)
    with pytest.raises(ValueError, match="BPE vocabulary must be an integer"):
        bpe.load("bpe", bad)


@pytest.mark.parametrize("kind", ["word", "BPE", "", "chars"])
def test_unknown_kind_raises(kind):
    with pytest.raises(ValueError, match=r"tokenizer must be one of \('char', 'bpe'\), got " + repr(kind)):
        bpe.load(kind)


# ------------------------------------------------------------------ the cache
def _cache_files(d, vocab=V):
    pts = sorted(d.glob(f"shakespeare-bpe{vocab}-*.pt"))
    assert len(pts) == 1, pts
    return pts[0], pts[0].with_suffix(".tokenizer.json")


def _no_training(*a, **k):
    raise AssertionError("a cached tokenizer must not be retrained")


def test_cache_is_written_and_reused_without_retraining(bpe_cache, monkeypatch):
    d, corpus = bpe_cache
    pt, tj = _cache_files(d)
    assert tj.read_text() == corpus.tokenizer_json
    monkeypatch.setattr(bpe, "train_tokenizer", _no_training)
    monkeypatch.setenv("TFCLAIMS_CACHE", str(d))
    again = bpe.load("bpe", V)
    assert torch.equal(again.train, corpus.train) and torch.equal(again.val, corpus.val)
    assert again.tokenizer_json == corpus.tokenizer_json
    assert again.describe() == corpus.describe()
    assert again.train_works == corpus.train_works and again.val_works == corpus.val_works


@pytest.mark.slow
def test_damaged_cache_of_the_corpus_is_rebuilt_identically(bpe_cache, tmp_path, monkeypatch):
    """A real retraining on the whole corpus: the rebuilt tokenizer and tensors equal the first build's."""
    d, corpus = bpe_cache
    pt, _ = _cache_files(d)
    (tmp_path / pt.name).write_bytes(b"not a torch file")
    monkeypatch.setenv("TFCLAIMS_CACHE", str(tmp_path))
    real, calls = bpe.train_tokenizer, []
    monkeypatch.setattr(bpe, "train_tokenizer", lambda texts, v: calls.append(v) or real(texts, v))
    rebuilt = bpe.load("bpe", V)
    assert calls == [V]
    assert rebuilt.tokenizer_json == corpus.tokenizer_json
    assert torch.equal(rebuilt.train, corpus.train) and torch.equal(rebuilt.val, corpus.val)
    assert torch.load(tmp_path / pt.name, weights_only=True)["val"].numel() == corpus.val.numel()


@pytest.fixture
def mini_works(tmp_path, monkeypatch):
    """A corpus of three short works (slices of real ones, one of them a validation work) in a fresh cache:
    the cache's behaviour without the cost of the whole corpus."""
    real = {p.name: p for p in corpus_files()}
    works = tmp_path / "works"
    works.mkdir()
    val = VAL_WORKS[0]
    train = [n for n in sorted(real) if n not in VAL_WORKS][:2]
    for name, n in [(train[0], 40_000), (train[1], 40_000), (val, 20_000)]:
        (works / name).write_text(
            real[name].read_text(encoding="utf-8", errors="replace")[:n], encoding="utf-8"
        )
    monkeypatch.setattr(bpe, "corpus_files", lambda: sorted(works.glob("*_gut.txt")))
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFCLAIMS_CACHE", str(cache))
    return cache


def test_mini_corpus_is_built_and_cached(mini_works, monkeypatch):
    c = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    assert c.vocab_size == bpe.MIN_VOCAB
    assert c.val_works == (VAL_WORKS[0],) and len(c.train_works) == 2
    assert c.val_chars == 20_000 and c.train_chars == 40_000 * 2 + 2  # the works joined by a blank line
    pt, tj = _cache_files(mini_works, bpe.MIN_VOCAB)
    assert tj.read_text() == c.tokenizer_json
    monkeypatch.setattr(bpe, "train_tokenizer", _no_training)
    again = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    assert torch.equal(again.train, c.train) and again.tokenizer_json == c.tokenizer_json


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated", "missing key"])
def test_damaged_cache_is_rebuilt(mini_works, monkeypatch, damage):
    first = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    pt, _ = _cache_files(mini_works, bpe.MIN_VOCAB)
    if damage == "garbage":
        pt.write_bytes(b"not a torch file")
    elif damage == "empty":
        pt.write_bytes(b"")
    elif damage == "truncated":
        pt.write_bytes(pt.read_bytes()[:1000])
    else:
        saved = torch.load(pt, weights_only=True)
        del saved["val"]
        torch.save(saved, pt)
    real, calls = bpe.train_tokenizer, []
    monkeypatch.setattr(bpe, "train_tokenizer", lambda texts, v: calls.append(v) or real(texts, v))
    rebuilt = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    assert calls == [bpe.MIN_VOCAB]
    assert rebuilt.tokenizer_json == first.tokenizer_json  # deterministic training
    assert torch.equal(rebuilt.train, first.train) and torch.equal(rebuilt.val, first.val)
    # the damaged file was replaced by a sound one, which the next load reads without training
    monkeypatch.setattr(bpe, "train_tokenizer", _no_training)
    assert torch.equal(bpe.load_bpe_corpus(bpe.MIN_VOCAB).val, first.val)


def test_each_vocabulary_has_its_own_cache_file(mini_works, monkeypatch):
    a = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    real, calls = bpe.train_tokenizer, []
    monkeypatch.setattr(bpe, "train_tokenizer", lambda texts, v: calls.append(v) or real(texts, v))
    b = bpe.load_bpe_corpus(bpe.MIN_VOCAB + 100)
    assert calls == [bpe.MIN_VOCAB + 100]  # the other vocabulary's cache was not taken
    assert b.vocab_size == bpe.MIN_VOCAB + 100 and a.tokenizer_json != b.tokenizer_json
    assert b.val.numel() < a.val.numel()  # more merges, fewer tokens
    assert len(list(mini_works.glob("shakespeare-bpe*.pt"))) == 2


def test_cache_key_follows_the_corpus_files(mini_works, monkeypatch):
    """Editing a work (its size changes) makes a new cache entry rather than serving stale tokens."""
    a = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    work = bpe.corpus_files()[0]
    work.write_text(work.read_text(encoding="utf-8") + "\nExeunt.\n", encoding="utf-8")
    b = bpe.load_bpe_corpus(bpe.MIN_VOCAB)
    assert b.train_chars == a.train_chars + len("\nExeunt.\n")
    assert len(list(mini_works.glob(f"shakespeare-bpe{bpe.MIN_VOCAB}-*.pt"))) == 2
