"""The vocabularies of `subword_oov` and its merge learner against independent implementations: a
from-scratch recount of every step, Hugging Face's trainers and the worked example of its course, a greedy
longest-match WordPiece written here, the word vocabulary as a sort of counts; the byte-level BPE on text
outside its training alphabet; the held-out counts by hand; determinism in one process and across
processes."""

import json
import random
import re
import subprocess
import sys
from collections import Counter

import pytest

from experiments.subword_oov import vocabularies as V
from experiments.subword_oov.recipes import count_heldout

# the words of Hugging Face's course example, with their counts
COURSE = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}


def toy_texts(n_words=3000, seed=0) -> list[str]:
    """Pseudo-words from a Zipf-like draw over a small syllable set: many pairs tie at low counts."""
    rng = random.Random(seed)
    sylls = ["ka", "ri", "to", "men", "sa", "lo", "qu", "ex", "th", "e", "in", "ng"]
    lexicon = ["".join(rng.choice(sylls) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    weights = [1 / (i + 1) for i in range(len(lexicon))]
    words = rng.choices(lexicon, weights, k=n_words)
    return [" ".join(words[i : i + 50]) + " ." for i in range(0, n_words, 50)]


def recount_merges(counts, n, rule, prefix):
    """The same rules from scratch, in the original paper's style: a segmentation is its units joined by
    spaces, a merge a regular-expression substitution, and every step recounts every pair and unit; ties to
    the smaller pair of ids in Hugging Face's order."""
    chars = sorted({c for w in counts for c in w})
    ids = {s: i for i, s in enumerate(["[UNK]"] + ([prefix + c for c in chars] if prefix else []) + chars)}
    segs = {w: " ".join([w[0]] + [(prefix or "") + c for c in w[1:]]) for w in counts}
    out = []
    for _ in range(n):
        units, pairs = Counter(), Counter()
        for w, s in segs.items():
            us = s.split(" ")
            for u in us:
                units[u] += counts[w]
            for p in zip(us, us[1:]):
                pairs[p] += counts[w]
        if not pairs:
            break
        scores = {p: c if rule == "frequency" else c / (units[p[0]] * units[p[1]]) for p, c in pairs.items()}
        a, b = max(pairs, key=lambda p: (scores[p], -ids[p[0]], -ids[p[1]]))
        tok = a + (b[len(prefix) :] if prefix and b.startswith(prefix) else b)
        ids.setdefault(tok, len(ids))
        out.append((a, b, tok, pairs[(a, b)]))
        pattern = re.compile(r"(?<!\S)" + re.escape(a + " " + b) + r"(?!\S)")
        segs = {w: pattern.sub(tok, s) for w, s in segs.items()}
    return out


def test_the_course_example_bpe_merges_ug_then_un_then_hug():
    got = [m.token for m in V.learn_merges(COURSE, 3, "frequency", prefix=None, specials=())]
    assert got == ["ug", "un", "hug"]


def test_the_course_example_likelihood_rule_first_merges_g_and_s():
    """('##g', '##s'): 5 / (20 · 5) = 1/20, the only pair without '##u' (which occurs 36 times)."""
    first = V.learn_merges(COURSE, 1, "likelihood")[0]
    assert (first.left, first.right, first.token) == ("##g", "##s", "##gs")
    assert first.score == pytest.approx(1 / 20)


@pytest.mark.parametrize("rule", V.RULES)
@pytest.mark.parametrize("prefix", [V.PREFIX, None])
def test_the_incremental_learner_equals_a_full_recount_at_every_step(rule, prefix):
    counts = V.word_counts(toy_texts())
    got = [(m.left, m.right, m.token, m.pair) for m in V.learn_merges(counts, 60, rule, prefix=prefix)]
    assert got == recount_merges(counts, 60, rule, prefix)


def test_the_frequency_rule_is_hugging_faces_bpe_and_wordpiece_trainers():
    """On ties-heavy toy text: the plain rule merge by merge against BpeTrainer; with '##', the new tokens of
    the WordPiece trainer, in id order."""
    texts, k = toy_texts(), 80
    counts = V.word_counts(texts)
    hf = V.hf_char_merges(texts, k)
    assert [(m.left, m.right) for m in V.learn_merges(counts, k, "frequency", prefix=None, specials=())] == hf
    new = V.hf_wordpiece_tokens(texts, k)
    made = list(dict.fromkeys(m.token for m in V.learn_merges(counts, 3 * k, "frequency")))
    assert len(new) == k and new == made[:k]


def test_the_alphabet_of_the_texts_is_the_alphabet_of_their_pre_tokens():
    """Characters the pre-tokenizer drops (Unicode white space, as its regex reads it) stay out of both."""
    texts = [*toy_texts(), "a\x1cb\u00a0c\u2003d\x85e\tf—g Ω.", "Cæsar |x| 100%"]
    assert V.text_alphabet(texts) == V.alphabet(V.word_counts(texts))


@pytest.mark.parametrize("kind", V.KINDS)
def test_each_vocabulary_has_exactly_its_size_and_one_unk(kind):
    size = 200 if kind == "word" else 300  # the toy text has about 250 word types; the BPE needs 257 entries
    tok = V.train(kind, toy_texts(), size)
    vocab = tok.get_vocab()
    assert tok.get_vocab_size() == size and V.UNK in vocab and len(vocab) == size


def test_the_word_vocabulary_is_the_most_frequent_pre_tokens_ties_by_spelling():
    texts = toy_texts()
    counts = V.word_counts(texts)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:199]
    assert set(V.train("word", texts, 200).get_vocab()) == {V.UNK, *(w for w, _ in top)}


def test_the_byte_level_bpe_writes_unseen_characters_and_decodes_them_back():
    tok = V.train("bpe", toy_texts(), 400)
    for w in ["Ωmega", "naïve", "😀", "kaqu", "жук"]:
        e = tok.encode(w)
        assert V.UNK not in e.tokens and tok.decode(e.ids) == w


def greedy_wordpiece(word, vocab, prefix="##"):
    """Longest match first from the left; a word with a position nothing matches is one [UNK]."""
    out, i = [], 0
    while i < len(word):
        for j in range(len(word), i, -1):
            piece = (prefix if i else "") + word[i:j]
            if piece in vocab:
                out.append(piece)
                i = j
                break
        else:
            return ["[UNK]"]
    return out


def test_wordpiece_is_greedy_longest_match_and_unknown_only_for_unseen_characters():
    texts = toy_texts()
    tok = V.train("wordpiece", texts, 300)
    vocab = tok.get_vocab()
    seen = set(V.alphabet(V.word_counts(texts)))
    words = ["kaqu", "thexing", "menlo", "Zkari", "kaΩ", "ngngng", "e", "qqqq"]
    for w in words:
        assert tok.encode(w).tokens == greedy_wordpiece(w, vocab)
        assert (tok.encode(w).tokens == [V.UNK]) == any(c not in seen for c in w)


def test_held_out_counts_by_hand():
    """'aa aa b ccc Ω': four types, five occurrences; the word vocabulary knows 'aa' and 'b'."""
    tok = V.train("word", ["aa aa aa b b"], 3)
    text = "aa aa b ccc Ω"
    got = count_heldout(tok, "word", text, set())
    assert got["occurrences"] == 5 and got["types"] == 4 and got["chars"] == len(text)
    assert got["tokens"] == got["whole_text_tokens"] == 5
    assert got["unk_occurrences"] == got["predicted_unk"] == got["unk_tokens"] == 2 and got["unk_types"] == 2
    assert got["used"] == 3 and [w for w, _ in got["unk_examples"]] == ["ccc", "Ω"]


def test_serial_switches_the_thread_pool_off_and_restores_the_setting(monkeypatch):
    import os

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    with V.serial():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    with V.serial():
        pass
    assert "TOKENIZERS_PARALLELISM" not in os.environ


DUMP = """
import hashlib, json, sys
import tfclaims.harness.folders  # makes experiments.<claim> importable
from experiments.subword_oov import vocabularies as V
sys.path.insert(0, {tests!r})
from test_subword_oov import toy_texts
texts = toy_texts(6000, seed=3)
digest = {{k: hashlib.sha256(V.train(k, texts, 500).to_str().encode()).hexdigest() for k in V.KINDS}}
print(json.dumps(digest))
"""


def test_every_vocabulary_is_the_same_in_every_process_and_every_call():
    """Hugging Face's WordPiece trainer alone gives its continuation pieces ids in hash-map order, which
    moves the ties from one process to the next; declaring them first fixes the ids. Two fresh interpreters
    (with the thread pool allowed) and two calls here must agree byte for byte."""
    import os
    from pathlib import Path

    code = DUMP.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        for _ in range(2)
    ]
    a, b = (json.loads(r.stdout) for r in runs)
    assert a == b
    texts = toy_texts(6000, seed=3)
    for kind in V.KINDS:
        assert V.train(kind, texts, 500).to_str() == V.train(kind, texts, 500).to_str()
