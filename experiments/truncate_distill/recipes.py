"""Run recipes of `truncate_distill`: a teacher LM trained per seed and the students cut from it (fine-tuned
with or without distillation) or trained from scratch beside it; parameters and FLOPs of teacher and students;
their forward time."""

from __future__ import annotations

import torch

from tfclaims.data.corpus import load_corpus
from tfclaims.measure.counting import block_flops, matmul_flops, model_params
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.models import LM, Encoder, n_params
from tfclaims.train.profiles import model_config, train_config

from .distill import train_student, truncate
from .grid import AA, NULL_OFFSET, VOCAB, size_config, size_depths


def _build(name: str, cfg: dict, layers: int):
    c, kind = size_config(name, cfg, layers)
    return c, kind, (LM(c) if kind == "lm" else Encoder(c))


def run_counts(cfg: dict, ctx) -> dict:
    """Per size and depth (teacher, then each student): parameters of the model built on the meta device and
    in closed form (an LM's head is tied; an encoder has none), and the forward FLOPs of one window of the
    training length."""
    rows, T = [], cfg["seq_len"]
    for name in cfg["sizes"]:
        for model, L in size_depths(name, cfg):
            with torch.device("meta"):
                c, kind, m = _build(name, cfg, L)
            head = matmul_flops(T, c.d_model, c.vocab_size) if kind == "lm" else 0
            rows.append(
                {
                    "size": name,
                    "model": model,
                    "depth": L,
                    "params": n_params(m),
                    "closed": model_params(c, lm_head=kind == "lm"),
                    "flops": L * block_flops(c, T) + head,
                }
            )
    return {"rows": rows}


def _forward(model: torch.nn.Module, idx: torch.Tensor):
    model.eval()
    return lambda: model(idx)


def run_timing(cfg: dict, ctx) -> dict:
    """Per size: a forward in inference (batch_timing × the training length) of the teacher and each student
    depth, in interleaved rounds on `threads` threads; the teacher timed twice (AA, the timer's own
    spread)."""
    dev, rows, T = ctx.device, [], cfg["seq_len"]
    with intra_op_threads(cfg["threads"]) as n_threads, torch.no_grad():
        for name in cfg["sizes"]:
            idx = torch.randint(1, VOCAB, (cfg["batch_timing"], T), device=dev)
            with torch.device(dev):
                fns = {model: _forward(_build(name, cfg, L)[2], idx) for model, L in size_depths(name, cfg)}
            fns[AA] = fns["teacher"]
            t = time_interleaved(fns, device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
            rows.append(
                {
                    "size": name,
                    "tokens": cfg["batch_timing"] * T,
                    "times": {k: v["times"] for k, v in t.items()},
                    "load": t["teacher"]["load"],
                }
            )
    return {"rows": rows, "threads": n_threads}


def _student(cfg: dict, s: dict, teacher: LM, corpus, ctx) -> dict:
    """One student of a run: cut from the teacher (or k fresh blocks from the seed), fine-tuned for
    student_steps at its own rate; a rerun takes the data order (and a scratch student its init) of s +
    NULL_OFFSET."""
    seed = cfg["seed"] + (NULL_OFFSET if s.get("rerun") else 0)
    torch.manual_seed(seed)
    k = s["keep"]
    if s["student"] == "scratch":
        student = LM(model_config({**cfg, "n_layers": k}, corpus.vocab_size))
    else:
        student = truncate(teacher, k)
    fields = {
        "steps": cfg["student_steps"],
        "lr": s["lr"],
        "eval_every": cfg["student_eval_every"],
        "seed": seed,
    }
    distil = s["student"] == "distil"
    res = train_student(
        student,
        train_config({**cfg, **fields}),
        corpus,
        ctx.device,
        teacher=teacher if distil else None,
        alpha=cfg["alpha"] if distil else 0.0,
        tau=cfg["tau"],
    )
    return {**res, "n_params": n_params(student)}


def train_students(cfg: dict, ctx) -> dict:
    """metrics: the teacher's training record (the shared recipe, from the run's seed; per-step losses left
    out), the corpus's unigram level, and per listed student its record (`train.distill.train_student`)."""
    from tfclaims.train.small_lm import train_small  # torch loads when a run starts

    res, teacher = train_small(cfg, ctx, desc=f"teacher {cfg['seed']}")
    corpus = load_corpus()
    keep = (
        "eval_steps",
        "val_loss",
        "final_val",
        "best_val",
        "diverged_at",
        "seconds",
        "steps_per_s",
        "n_params",
    )
    students = [_student(cfg, s, teacher, corpus, ctx) for s in cfg["students"]]
    return {"teacher": {k: res[k] for k in keep}, "unigram_xent": res["unigram_xent"], "students": students}
