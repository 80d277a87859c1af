"""Run recipes of `embedding_scale`: what enters the first block as initialised (`init_probe`), and the small
LM trained with one embedding init, position kind, table scale and factor (`train_arm`).

Under Adam a parameter moves by about the learning rate per step whatever its scale, so an embedding used as
sqrt(d)·W moves sqrt(d) times faster in the units the model sees: the factor sets both the input's scale at
init and the embedding's effective step size. The token tables of the untied controls separate the two:
an N(0, 1) table without the factor (unit variance, step ×1) and an N(0, 1/d²) table with it (variance 1/d,
step ×sqrt(d)), beside the N(0, 1/d) table with and without the factor.
"""

from __future__ import annotations

import math

import torch

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM
from tfclaims.train.small_lm import train_small

from .grid import INIT_NAME, INITS

# table -> the token table's standard deviation at width d (None: as the init draws it)
TABLES = {"init": None, "unit": lambda d: 1.0, "small": lambda d: 1.0 / d}
TABLE_NAME = {"unit": "N(0, 1) table", "small": "N(0, 1/d²) table"}


@torch.no_grad()
def embedding_parts(model: LM, x: torch.Tensor) -> dict:
    """Variances of the (scaled) embedding table's entries and of what enters the first block on x: token part
    (after any sqrt(d) factor), position part, their sum, and the first block's relative update
    ||block(h) - h|| / ||h||."""
    st = model.stack
    factor = math.sqrt(model.cfg.d_model) if model.cfg.emb_scale else 1.0
    tok = st.tok(x) * factor  # (B, T, d)
    h = st.embed(x)
    pos = h - tok  # learned or sinusoidal position part, broadcast over the batch
    out = model.blocks[0](h)
    return {
        "var_table": float((st.tok.weight * factor).var()),
        "var_tok": float(tok.var()),
        "var_pos": float(pos.var()),
        "var_in": float(h.var()),
        "tok_share": float(tok.var() / (tok.var() + pos.var())),
        "update": float((out - h).norm() / h.norm()),
    }


def init_probe(cfg: dict, ctx) -> dict:
    """As initialised, on a batch of real text: embedding_parts per width, init, position kind, factor or
    not."""
    corpus = load_corpus()
    x = eval_windows(corpus.val, 1, 16, cfg["seq_len"], seed=99)[0][0]
    rows = []
    for d in cfg["dims"]:
        for init in INITS:
            for pos in ("learned", "sinusoidal"):
                for scale in (False, True):
                    torch.manual_seed(0)
                    mc = ModelConfig(
                        vocab_size=corpus.vocab_size,
                        d_model=d,
                        n_layers=1,
                        n_heads=max(1, d // 64),
                        max_seq_len=cfg["seq_len"],
                        init=init,
                        pos=pos,
                        emb_scale=scale,
                    )
                    parts = embedding_parts(LM(mc).eval(), x)
                    rows.append({"d": d, "init": init, "pos": pos, "scaled": scale, **parts})
    return {"rows": rows}


def arm_label(c: dict) -> str:
    table = TABLE_NAME.get(c["table"], INIT_NAME[c["init"]])
    return (
        f"{table}, {c['pos']}, {'× sqrt(d)' if c['emb_scale'] else 'no factor'}, "
        f"{'tied' if c['tie'] else 'untied'}"
    )


def train_arm(cfg: dict, ctx) -> dict:
    """One training arm: the small LM with one embedding init and position kind, with or without the factor,
    tied or untied, the token table as initialised or re-drawn at another scale (`TABLES`); the embedding
    variances are probed at every evaluation."""
    corpus = load_corpus()
    probe_x = eval_windows(corpus.val, 1, 16, cfg["seq_len"], seed=99)[0][0].to(ctx.device)

    def probe(step, model):
        was = model.training
        model.eval()
        r = embedding_parts(model, probe_x)
        model.train(was)
        return r

    def redraw(model):
        with torch.no_grad():
            torch.nn.init.normal_(model.stack.tok.weight, 0.0, TABLES[cfg["table"]](cfg["d_model"]))

    kw = {"init": cfg["init"], "emb_scale": cfg["emb_scale"], "pos": cfg["pos"], "tie_weights": cfg["tie"]}
    prepare = None if TABLES[cfg["table"]] is None else redraw
    desc = f"{arm_label(cfg)} seed {cfg['seed']}"
    res, _ = train_small(cfg, ctx, model_kw=kw, prepare=prepare, on_eval=probe, desc=desc)
    return res
