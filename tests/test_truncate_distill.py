"""truncate_distill's library: the distillation loss against its closed form and gradient, the cut model
against the teacher with its deeper blocks deleted, the student loop against `train_lm`, the counts against
Hugging Face's BERT and DistilBERT, and the staged grid."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
import transformers

from tfclaims.data.corpus import load_corpus
from tfclaims.harness.registry import load
from tfclaims.measure.counting import lm_forward_flops, model_params
from tfclaims.measure.residual_stream import layer_order
from tfclaims.nn.config import ConfigError, ModelConfig, TrainConfig
from tfclaims.nn.models import LM, n_params
from tfclaims.train.loop import train_lm
from tfclaims.train.profiles import model_config

from experiments.truncate_distill.distill import distill_loss, train_student, truncate
from experiments.truncate_distill.grid import NULL_OFFSET, grid_students, student_records
from experiments.truncate_distill.recipes import run_counts, train_students

P = load("truncate_distill").profiles["quick"]


class Ctx:
    device = torch.device("cpu")
    progress = False


def _lm(L: int = 4, seed: int = 0) -> LM:
    torch.manual_seed(seed)
    return LM(ModelConfig(vocab_size=40, d_model=32, n_layers=L, n_heads=4, max_seq_len=16))


def test_distill_loss_without_the_soft_term_is_cross_entropy():
    s, t, y = torch.randn(2, 5, 7), torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    ce = F.cross_entropy(s.reshape(-1, 7), y.reshape(-1))
    assert torch.allclose(distill_loss(s, None, y, 0.0, 2.0), ce)
    assert torch.allclose(distill_loss(s, t, y, 0.0, 2.0), ce)


@pytest.mark.parametrize("tau", [1.0, 2.0, 4.0])
def test_distill_loss_soft_term_and_its_gradient_follow_the_closed_forms(tau):
    """α · τ² · mean over tokens of Σ_v p_t (log p_t − log p_s) at temperature τ, plus (1 − α) · CE; the soft
    term's gradient in the student's logits is α · τ · (p_s − p_t) / N (Hinton et al.'s)."""
    torch.manual_seed(1)
    s = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    t, y = torch.randn(3, 4, 6, dtype=torch.float64), torch.randint(0, 6, (3, 4))
    alpha, n = 0.3, 12
    p_s, p_t = torch.softmax(s.detach() / tau, -1), torch.softmax(t / tau, -1)
    kl = (p_t * (p_t.log() - p_s.log())).sum(-1).mean()
    ce = F.cross_entropy(s.detach().reshape(-1, 6), y.reshape(-1))
    loss = distill_loss(s, t, y, alpha, tau)
    assert math.isclose(
        float(loss.detach()), (1 - alpha) * float(ce) + alpha * tau**2 * float(kl), rel_tol=1e-6
    )
    loss.backward()
    hard = (torch.softmax(s.detach(), -1) - F.one_hot(y, 6)) / n
    expected = (1 - alpha) * hard + alpha * tau * (p_s - p_t) / n
    assert torch.allclose(s.grad.double(), expected, atol=1e-6)


def test_distill_loss_soft_term_vanishes_when_the_student_is_the_teacher():
    s = torch.randn(2, 3, 5, requires_grad=True)
    loss = distill_loss(s, s.detach().clone(), torch.zeros(2, 3, dtype=torch.long), 1.0, 2.0)
    loss.backward()
    assert abs(float(loss.detach())) < 1e-6 and float(s.grad.abs().max()) < 1e-6


@pytest.mark.parametrize("k", [1, 2, 3])
def test_cut_model_is_the_teacher_with_its_deeper_blocks_deleted(k):
    teacher, idx = _lm().eval(), torch.randint(0, 40, (2, 16))
    student = truncate(teacher, k).eval()
    with torch.no_grad(), layer_order(teacher, range(k)):
        expected = teacher(idx)
    with torch.no_grad():
        assert torch.equal(student(idx), expected)
    assert n_params(student) == model_params(teacher.cfg.replace(n_layers=k)) and student.cfg.n_layers == k
    assert student.head.weight is student.stack.tok.weight  # still tied
    with torch.no_grad():  # copies: training the student leaves the teacher as it was
        before = teacher.stack.tok.weight.clone()
        student.stack.tok.weight.add_(1.0)
        assert torch.equal(teacher.stack.tok.weight, before)


@pytest.mark.parametrize("k", [0, 5])
def test_cut_depth_must_lie_inside_the_teacher(k):
    with pytest.raises(ValueError, match="keep 1 to 4"):
        truncate(_lm(), k)


def _train(steps: int = 6, seed: int = 3) -> TrainConfig:
    return TrainConfig(
        steps=steps, batch_size=4, seq_len=16, lr=3e-3, warmup=1, eval_every=3, eval_batches=2, seed=seed
    )


def test_student_loop_without_a_teacher_is_train_lm_step_for_step():
    """The student loop at α = 0 and the library's loop make the same updates: same held-out losses, same
    weights at the end."""
    corpus = load_corpus()
    torch.manual_seed(0)
    a = LM(ModelConfig(vocab_size=corpus.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=16))
    b = copy.deepcopy(a)
    ref = train_lm(a, _train(), corpus, "cpu", progress=False)
    got = train_student(b, _train(), corpus, "cpu")
    assert got["val_loss"] == ref["val_loss"] and got["eval_steps"] == ref["eval_steps"]
    assert got["final_val"] == ref["final_val"] and got["diverged_at"] is None
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_distillation_pulls_the_student_towards_its_teacher_and_repeats():
    """With α = 1 the student learns the teacher's distribution alone: its KL to the teacher on held-out
    windows falls; the same seed gives the same run."""
    corpus = load_corpus()
    cfg = ModelConfig(vocab_size=corpus.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    torch.manual_seed(0)
    teacher, fresh = LM(cfg).eval(), LM(cfg)
    x = corpus.val[:64].long().view(4, 16)

    def kl(m):
        with torch.no_grad():
            return float(distill_loss(m(x), teacher(x), torch.zeros_like(x), 1.0, 1.0))

    runs = []
    for _ in range(2):
        student = copy.deepcopy(fresh)
        before = kl(student)
        runs.append(
            train_student(student, _train(steps=20), corpus, "cpu", teacher=teacher, alpha=1.0, tau=1.0)
        )
        assert kl(student) < 0.5 * before
    assert runs[0]["val_loss"] == runs[1]["val_loss"]
    with pytest.raises(ValueError, match="needs a teacher"):
        train_student(copy.deepcopy(fresh), _train(), corpus, "cpu", alpha=0.5)


def test_counts_match_hugging_face_bert_and_distilbert():
    """BERT-base cut to 6 layers is BertModel with 6 layers (no pooler), and DistilBERT's 66M plus its missing
    segment table; the trained LM's FLOPs are the library's closed form."""
    rows = run_counts({**P, "sizes": ["trained", "bert-base"], "keep": [1]}, None)["rows"]
    by = {(r["size"], r["depth"]): r for r in rows}
    cfg = dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072)
    with torch.device("meta"):
        bert6 = transformers.BertModel(
            transformers.BertConfig(num_hidden_layers=6, **cfg), add_pooling_layer=False
        )
        distil = transformers.DistilBertModel(transformers.DistilBertConfig())
    assert by[("bert-base", 6)]["params"] == by[("bert-base", 6)]["closed"] == n_params(bert6)
    assert n_params(distil) + 2 * 768 == by[("bert-base", 6)]["closed"]
    assert 0.60 < by[("bert-base", 6)]["closed"] / by[("bert-base", 12)]["closed"] < 0.62
    c = model_config(P, 85)
    assert by[("trained", 2)]["flops"] == lm_forward_flops(c, P["seq_len"])
    assert by[("trained", 1)]["flops"] == lm_forward_flops(c.replace(n_layers=1), P["seq_len"])


def test_grid_runs_selection_then_fresh_seeds_with_the_null_rerun():
    first = grid_students(P, [])
    assert [c["seed"] for c in first] == P["selection_seeds"]
    assert len(first[0]["students"]) == 3 * len(P["keep"]) * len(P["rates"])
    with pytest.raises(ConfigError, match="null pair"):
        grid_students({**P, "seeds": [0, NULL_OFFSET]}, [])
    for bad in ([], [2], [1, 1], [0]):
        with pytest.raises(ConfigError, match="keep"):
            grid_students({**P, "keep": bad}, [])


def test_students_run_shares_one_teacher_and_one_cut():
    """A run's cut students start from the same weights (the same loss at step 0, whatever the arm or rate);
    the rerun starts there too and then sees other data; a scratch student starts from its seed."""
    cfg = {
        **grid_students(P, [])[0],
        "students": [
            {"student": "distil", "keep": 1, "lr": 3e-3},
            {"student": "plain", "keep": 1, "lr": 1.5e-3},
            {"student": "plain", "keep": 1, "lr": 1.5e-3, "rerun": True},
            {"student": "scratch", "keep": 1, "lr": 3e-3},
        ],
    }
    torch.manual_seed(cfg["seed"])
    m = train_students(cfg, Ctx())
    d, p, r, s = m["students"]
    assert d["val_loss"][0] == p["val_loss"][0] == r["val_loss"][0] != s["val_loss"][0]
    assert p["final_val"] != r["final_val"] and all(x["diverged_at"] is None for x in m["students"])
    recs = student_records([{"config": cfg, "metrics": m, "run_id": "x"}])
    assert [x["config"]["seed"] for x in recs] == [cfg["seed"]] * 2 + [cfg["seed"] + NULL_OFFSET, cfg["seed"]]
    assert all(x["metrics"]["teacher_final"] == m["teacher"]["final_val"] for x in recs)
