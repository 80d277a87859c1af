"""A student LM cut from a deeper teacher and fine-tuned with or without knowledge distillation.

`truncate` keeps the teacher's embeddings, its first k blocks, its final norm and its head (copies). The
distillation loss is Hinton et al. (2015)'s: (1 − α) · cross-entropy with the data's next tokens + α · τ² ·
KL(teacher ‖ student), both distributions softened by the temperature τ (the τ² keeps the soft term's gradient
on the scale of the hard one's as τ grows). `train_student` runs the library's recipe (AdamW, warm-up then
cosine decay, the same data windows and evaluation as `train.loop.train_lm`) with that loss; at α = 0 it is
`train_lm` step for step, so the students with and without a teacher differ only in their loss.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from tfclaims.data.corpus import Corpus, eval_windows, random_windows
from tfclaims.device import synchronize
from tfclaims.nn.config import TrainConfig
from tfclaims.nn.models import LM, lm_loss
from tfclaims.train.loop import evaluate, lr_at, make_optimizer


def _deeper(name: str, k: int) -> bool:
    """Whether a state-dict entry belongs to block k or later ("stack.blocks.<i>.…")."""
    parts = name.split(".")
    return parts[:2] == ["stack", "blocks"] and int(parts[2]) >= k


def truncate(teacher: LM, k: int) -> LM:
    """A new LM of the teacher's first k blocks with its embeddings, final norm and head, on its device; the
    load is strict, so every tensor of the student comes from the teacher."""
    if not 1 <= k <= teacher.cfg.n_layers:
        raise ValueError(f"truncate: keep 1 to {teacher.cfg.n_layers} blocks, got {k}")
    device = next(teacher.parameters()).device
    student = LM(teacher.cfg.replace(n_layers=k)).to(device)
    student.load_state_dict({n: v for n, v in teacher.state_dict().items() if not _deeper(n, k)})
    return student


def distill_loss(
    student: torch.Tensor, teacher: torch.Tensor | None, targets: torch.Tensor, alpha: float, tau: float
) -> torch.Tensor:
    """(1 − α) · CE(student logits (B, T, V), targets (B, T)) + α · τ² · KL(softmax(teacher/τ) ‖
    softmax(student/τ)), the KL averaged over tokens; at α = 0 (teacher may be None) the cross-entropy
    alone."""
    ce = lm_loss(student.float(), targets)
    if alpha == 0:
        return ce
    log_s = F.log_softmax(student.float().flatten(0, 1) / tau, dim=-1)  # (B·T, V)
    log_t = F.log_softmax(teacher.float().flatten(0, 1) / tau, dim=-1)
    kl = F.kl_div(log_s, log_t, reduction="batchmean", log_target=True)  # batchmean over B·T rows: per token
    return (1 - alpha) * ce + alpha * tau**2 * kl


def train_student(
    student: LM,
    t: TrainConfig,
    corpus: Corpus,
    device,
    *,
    teacher: LM | None = None,
    alpha: float = 0.0,
    tau: float = 1.0,
) -> dict:
    """Train `student` with `distill_loss` against `teacher` (frozen, eval mode; needed when α > 0) on the
    training text's random windows; evaluate it on the fixed validation windows at step 0, every `eval_every`
    steps and at the end. Returns eval_steps, val_loss, final_val (None if it diverged), diverged_at (the
    first step whose loss or gradient is not finite), seconds and steps_per_s."""
    if alpha > 0 and teacher is None:
        raise ValueError("train_student: distillation (alpha > 0) needs a teacher")
    student.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    gen = torch.Generator().manual_seed(t.seed)
    val = eval_windows(corpus.val, t.eval_batches, t.batch_size, t.seq_len)
    opt = make_optimizer(student, t)
    out = {"eval_steps": [0], "val_loss": [evaluate(student, val, device)], "diverged_at": None}
    synchronize(device)
    t0 = time.perf_counter()
    done = 0
    for step in range(t.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, t)
        x, y = (v.to(device) for v in random_windows(corpus.train, t.batch_size, t.seq_len, gen))
        logits = student(x)
        with torch.no_grad():
            soft = teacher(x) if alpha > 0 else None
        loss = distill_loss(logits, soft, y, alpha, tau)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in student.parameters() if p.grad is not None])
        )
        if not (math.isfinite(float(loss.detach())) and math.isfinite(float(gnorm))):
            out["diverged_at"] = step
            break
        opt.step()
        done = step + 1
        if done % t.eval_every == 0 or done == t.steps:
            out["eval_steps"].append(done)
            out["val_loss"].append(evaluate(student, val, device))
            if not math.isfinite(out["val_loss"][-1]):
                out["diverged_at"] = done
                break
    synchronize(device)
    seconds = time.perf_counter() - t0
    out["val_loss"] = [v if math.isfinite(v) else None for v in out["val_loss"]]
    out["final_val"] = out["val_loss"][-1] if out["diverged_at"] is None else None
    out["seconds"] = seconds
    out["steps_per_s"] = done / seconds if seconds > 0 else None
    return out
