"""`embedding_scale`: multiplying token embeddings by sqrt(d_model) restores unit variance under a 1/d init."""

from __future__ import annotations

import math

import pandas as pd
import torch

from tfclaims import evidence as ev
from tfclaims.comparison import plot_curves
from tfclaims.config import ModelConfig
from tfclaims.data import eval_windows, load_corpus
from tfclaims.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.models import LM
from tfclaims.small_lm import run_fields, train_profile, train_small

UNIT_TOL = 0.10  # "unit variance": within 1 ± 0.10
MARGIN = 0.02  # nats: |with − without| inside this is "no difference" (TOST)
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000
INITS = (
    "normal",
    "xavier",
)  # N(0, 0.02) embeddings (GPT-2 style, the library's default) and N(0, 1/d) (Xavier-style)
INIT_NAME = {"normal": "N(0, 0.02²)", "xavier": "N(0, 1/d)"}


@torch.no_grad()
def embedding_parts(model: LM, x: torch.Tensor) -> dict:
    """Variances of the (scaled) embedding table's entries and of what enters the first block on x: token part
    (after any sqrt(d) factor), position part, their sum, and the first block's relative update ||block(h) - h|| / ||h||."""
    st = model.stack
    factor = math.sqrt(model.cfg.d_model) if model.cfg.emb_scale else 1.0
    tok = st.tok(x) * factor  # (B, T, d)
    h = st.embed(x)
    pos = h - tok  # learned or sinusoidal position part, broadcast over the batch
    out = model.blocks[0](h)
    return {
        "var_table": float((st.tok.weight * factor).var()), "var_tok": float(tok.var()), "var_pos": float(pos.var()), "var_in": float(h.var()),
        "tok_share": float(tok.var() / (tok.var() + pos.var())), "update": float((out - h).norm() / h.norm()),
    }  # fmt: skip


def init_probe(cfg: dict, ctx) -> dict:
    """As initialised, on a batch of real text: embedding_parts per width, init, position kind, factor or not."""
    corpus = load_corpus()
    x = eval_windows(corpus.val, 1, 16, cfg["seq_len"], seed=99)[0][0]
    rows = []
    for d in cfg["dims"]:
        for init in INITS:
            for pos in ("learned", "sinusoidal"):
                for scale in (False, True):
                    torch.manual_seed(0)
                    mc = ModelConfig(vocab_size=corpus.vocab_size, d_model=d, n_layers=1, n_heads=max(1, d // 64),
                                     max_seq_len=cfg["seq_len"], init=init, pos=pos, emb_scale=scale)  # fmt: skip
                    rows.append(
                        {
                            "d": d,
                            "init": init,
                            "pos": pos,
                            "scaled": scale,
                            **embedding_parts(LM(mc).eval(), x),
                        }
                    )
    return {"rows": rows}


def train_arm(cfg: dict, ctx) -> dict:
    """One training arm: the small LM with sinusoidal positions, one embedding init, with or without the factor;
    the embedding variances are probed at every evaluation."""
    corpus = load_corpus()
    probe_x = eval_windows(corpus.val, 1, 16, cfg["seq_len"], seed=99)[0][0].to(ctx.device)

    def probe(step, model):
        was = model.training
        model.eval()
        r = embedding_parts(model, probe_x)
        model.train(was)
        return r

    kw = {"init": cfg["init"], "emb_scale": cfg["emb_scale"], "pos": "sinusoidal"}
    desc = f"{cfg['init']} {'scaled' if cfg['emb_scale'] else 'unscaled'} seed {cfg['seed']}"
    res, _ = train_small(cfg, ctx, model_kw=kw, on_eval=probe, desc=desc)
    return res


def grid_init(p):
    return [{"dims": p["init_dims"], "seq_len": p["seq_len"], "seed": 0}]


def grid_train(p):
    return [
        {"init": i, "emb_scale": s, **run_fields(p), "seed": sd}
        for i in p["inits"]
        for s in (False, True)
        for sd in p["seeds"]
    ]


def grid_null(p):
    """The null pair: the arm without the factor (the baseline) of each init rerun at seeds s + NULL_OFFSET."""
    return [
        {"init": i, "emb_scale": False, **run_fields(p), "seed": sd + NULL_OFFSET}
        for i in p["inits"]
        for sd in p["seeds"]
    ]


def final(m: dict) -> float | None:
    return m.get("final_val") if m.get("diverged_at") is None else None


def did_learn(m: dict) -> bool:
    return ev.learned(final(m), m["unigram_xent"], LEARN_MARGIN)


class EmbeddingScale(Experiment):
    claim_id = "embedding_scale"
    title = "Scaling embeddings by sqrt(d_model) restores unit variance"
    order = 14
    statement = (
        "Token embeddings initialised with variance 1/d_model (Xavier-style) have unit variance once multiplied by "
        "sqrt(d_model), which is why the original Transformer scales them; at that scale they converge better."
    )
    notes_say = "multiply embeddings by sqrt(d_model): Xavier init gives variance 1/d, the factor restores 1, helps convergence"
    anchors = [
        "Vaswani et al. 2017 §3.4: in the embedding layers the weights are multiplied by sqrt(d_model) (no reason or ablation given); positions are added as sinusoids of amplitude 1 (variance 1/2 per component).",
        "GPT-2 (Radford et al. 2019) and T5 do not scale: GPT-2 draws embeddings from N(0, 0.02²) and adds learned positions of the same scale.",
    ]
    anchor_number = "no published ablation; Transformer base: d = 512, factor 22.6"
    method = (
        "(1) As initialised, on a batch of real text: the variance of the token part of the first block's input (after any "
        "sqrt(d) factor), of the position part, the token share of their sum, and the first block's relative update "
        "||block(h) − h|| / ||h||, over widths, for the library's two embedding inits (N(0, 0.02²) as in GPT-2, and N(0, 1/d) "
        "with Xavier linears), learned and sinusoidal positions, with and without the factor. (2) Training: the character "
        "LM with sinusoidal positions (the setting the factor comes from), both inits, with and without the factor, on the "
        "same seeds (same data order); the embedding variances are probed during training. A null pair (the arm without "
        f"the factor rerun at seeds s + {NULL_OFFSET}, per init) gives the noise floor of the final validation loss."
    )
    rule = (
        f"Variance (exact checks): supported if, under the N(0, 1/d) init, the scaled embedding table's entries have variance "
        f"within 1 ± {UNIT_TOL:g} at every width and position kind, refuted otherwise; the N(0, 0.02²) init and the token "
        "share against sinusoidal positions (> 1/2 with the factor, < 1/2 without) are reported by the same kind of check. "
        "Training, per init: final validation loss with − without the factor, paired by seed (paired t-test; TOST against "
        f"±{MARGIN} nats); a run learned if its final validation loss is at least {LEARN_MARGIN} nats below the unigram "
        "cross-entropy; if neither arm learned in any seed the comparison is excluded, and an arm that learned in no seed is "
        "reported as a failed arm (the loss difference is then not an effect size). Sub-verdict per init by the evidence "
        "ladder: supported if the factor gives a significantly lower loss, refuted if significantly higher, otherwise "
        "inconclusive (no positive control, so equivalence within the margin does not refute). Overall: refuted if the "
        "variance part fails; otherwise the N(0, 1/d) training sub-verdict decides: supported → supported, refuted → mixed, "
        "inconclusive → inconclusive."
    )
    profiles = {
        "quick": train_profile("quick", init_dims=[32, 128], inits=["xavier"]),
        "default": train_profile("default", init_dims=[64, 128, 256, 512, 1024], inits=list(INITS)),
        "full": train_profile("full", init_dims=[64, 128, 256, 512, 1024, 2048, 4096], inits=list(INITS)),
    }
    parts = (
        Part("init", grid_init, init_probe),
        Part("train", grid_train, train_arm),
        Part("null", grid_null, train_arm),
    )

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        idf = pd.DataFrame(self.runs_of(runs, "init")[0]["metrics"]["rows"])
        show = idf.rename(columns={"d": "d_model", "var_table": "Var(table × factor)", "var_tok": "Var(token part)",
                                   "var_pos": "Var(position part)", "var_in": "Var(block input)", "tok_share": "token share",
                                   "update": "block-1 update ‖Δh‖/‖h‖"})  # fmt: skip
        out.table(
            "as_initialised",
            show,
            "As initialised: what enters the first block (a batch of real text)",
            floatfmt=".3g",
        )

        def var_checks(init, rows):
            return [ev.exact_check(f"unit-var:{init}-d{r.d}-{r.pos}", bool(abs(r.var_table - 1) <= UNIT_TOL), sub_claim=f"unit variance ({init})",
                                   metric="variance of the scaled embedding table", observed=float(r.var_table), expected=1.0,
                                   note=f"must lie within 1 ± {UNIT_TOL:g}") for r in rows.itertuples()]  # fmt: skip

        xs, nr = (
            idf[(idf["init"] == "xavier") & idf["scaled"]],
            idf[(idf["init"] == "normal") & idf["scaled"] & (idf["pos"] == "sinusoidal")],
        )
        unit_checks, normal_checks = var_checks("xavier", xs), var_checks("normal", nr)  # fmt: skip
        share_checks = []
        for r in idf[(idf["init"] == "xavier") & (idf["pos"] == "sinusoidal")].itertuples():
            ok = r.tok_share > 0.5 if r.scaled else r.tok_share < 0.5
            share_checks.append(ev.exact_check(f"tok-share:xavier-d{r.d}-{'scaled' if r.scaled else 'unscaled'}", bool(ok),
                                               sub_claim="token share", metric="token share of the first block's input variance",
                                               observed=float(r.tok_share), expected=0.5,
                                               note=f"must be {'>' if r.scaled else '<'} 1/2 {'with' if r.scaled else 'without'} the factor"))  # fmt: skip

        train, null = self.runs_of(runs, "train"), self.runs_of(runs, "null")
        cmps, floors, learned_cmps = {}, [], {}
        for i in p["inits"]:

            def arm(scaled, fn, src=train, i=i):
                return ev.seed_values(src, lambda cfg: cfg["init"] == i and cfg["emb_scale"] == scaled, fn)

            metric = f"final val loss ({INIT_NAME[i]} init)"
            c = ev.paired(f"{i}:with-vs-without-factor", arm(False, final), arm(True, final), metric=metric, better="lower",
                          sub_claim=f"training, {i} init", arm_a="without factor", arm_b="with factor", margin=MARGIN,
                          learned_a=arm(False, did_learn), learned_b=arm(True, did_learn))  # fmt: skip
            fl = ev.noise_floor(f"null:{i}", arm(False, final), arm(False, final, null), seed_offset=NULL_OFFSET, metric=metric,
                                arm="without factor", margin=MARGIN)  # fmt: skip
            floors.append(fl)
            cmps[i] = ev.with_noise([c], [fl])[0]
            learned_cmps[i] = ev.binary(f"{i}:learned-with-vs-without-factor", arm(False, did_learn), arm(True, did_learn),
                                        metric="seeds that learned", sub_claim=f"training, {i} init", arm_a="without factor",
                                        arm_b="with factor")  # fmt: skip
        ladders = {i: ev.ladder([c], "b_better", positive_control=False) for i, c in cmps.items()}
        tdf = pd.DataFrame([{"init": INIT_NAME[i], **{k: c.as_dict()[k] for k in ("mean_a", "mean_b", "diff", "ci_low", "ci_high", "p",
                             "p_equiv", "mde", "noise", "learned_a", "learned_b", "n", "decision")}} for i, c in cmps.items()])  # fmt: skip
        out.table("training", tdf.rename(columns={"mean_a": "without factor", "mean_b": "with factor", "diff": "with − without"}),
                  f"Final validation loss (nats/char), sinusoidal positions, mean over {len(p['seeds'])} seeds; with − without "
                  f"paired by seed; noise = the null pair's largest |CI bound|; learned = seeds at least {LEARN_MARGIN} nats "
                  "below the unigram cross-entropy")  # fmt: skip
        self.plot_init(idf, out)
        self.plot_training(train, p, out)

        def all_ok(cs):
            return "supported" if cs and all(c.decision == "equivalent" for c in cs) else "refuted"

        def failed(c):
            """How the training comparison reads: an arm that learned in no seed is a failed arm, not an effect."""
            if c.excluded:
                return "neither arm learned in any seed"
            fails = [n for n, k in ((c.arm_a, c.learned_a), (c.arm_b, c.learned_b)) if k == 0]
            if fails:
                return (f"{' and '.join(fails)}: a failed arm, learned in no seed (learned {c.learned_a}/{c.n_a} without vs "
                        f"{c.learned_b}/{c.n_b} with the factor), so the loss difference is no effect size; {c.decision}")  # fmt: skip
            return c.text(" nats")

        def headline(c):
            if c.excluded:
                return "neither arm learned (excluded)"
            if 0 in (c.learned_a, c.learned_b) or c.diff is None:
                return f"a failed arm (learned {c.learned_a}/{c.n_a} without vs {c.learned_b}/{c.n_b} with the factor; {c.decision})"
            return f"with − without {c.diff:+.3f} nats ({c.decision})"

        unit_v = all_ok(unit_checks)
        xv = ladders["xavier"].verdict if "xavier" in ladders else "inconclusive"
        verdict = (
            "refuted"
            if unit_v == "refuted"
            else {"supported": "supported", "refuted": "mixed"}.get(xv, "inconclusive")
        )
        xs_sin, xu_sin = (
            xs[xs["pos"] == "sinusoidal"],
            idf[(idf["init"] == "xavier") & ~idf["scaled"] & (idf["pos"] == "sinusoidal")],
        )
        subs = [
            SubVerdict("N(0, 1/d) embeddings × sqrt(d) have unit variance", unit_v,
                       f"Var of the scaled table {xs['var_table'].min():.3f}–{xs['var_table'].max():.3f} over d = {xs['d'].min()}–{xs['d'].max()} "
                       f"(on text, frequency-weighted: {xs['var_tok'].min():.2f}–{xs['var_tok'].max():.2f})", [c.id for c in unit_checks]),
            SubVerdict("Unit variance also under the library's default N(0, 0.02²) init", all_ok(normal_checks),
                       f"Var = 0.0004·d: {nr['var_table'].min():.3g} at d = {nr['d'].min()} to {nr['var_table'].max():.3g} at d = {nr['d'].max()}; "
                       "unit only at d = 2500", [c.id for c in normal_checks]),
            SubVerdict("The factor puts tokens on the positions' scale (sinusoidal, N(0, 1/d))", all_ok(share_checks),
                       f"token share of the input variance {xu_sin['tok_share'].max():.3f} or less without, {xs_sin['tok_share'].min():.2f} or more "
                       "with the factor", [c.id for c in share_checks]),
            *[SubVerdict(f"Training with the factor gives a lower final loss, {INIT_NAME[i]} init", ladders[i].verdict,
                         f"{ladders[i].detail}: {failed(c)}", [c.id]) for i, c in cmps.items()],
        ]  # fmt: skip
        return Verdict(
            verdict=verdict,
            summary=(f"Under N(0, 1/d) embeddings the factor gives the table variance {xs['var_table'].mean():.2f} and lifts the token share of the "
                     f"first block's input from ≤{xu_sin['tok_share'].max():.1%} to ≥{xs_sin['tok_share'].min():.0%} against sinusoidal positions; "
                     "under the library's N(0, 0.02²) the scaled variance is 0.0004·d, not 1. Training (sinusoidal positions): "
                     + "; ".join(f"{INIT_NAME[i]} init: {failed(c)} → {ladders[i].verdict}" for i, c in cmps.items()) + "."),
            key_number="; ".join(f"{INIT_NAME[i]}: {headline(c)}" for i, c in cmps.items()),
            evidence={"unit_variance": unit_v == "supported", "var_scaled_xavier": xs["var_table"].tolist(), "margin": MARGIN,
                      "learn_margin": LEARN_MARGIN, "training": {i: lad.verdict for i, lad in ladders.items()}},
            sub_verdicts=subs,
            comparisons=[*unit_checks, *normal_checks, *share_checks, *cmps.values(), *learned_cmps.values()],
            noise_floor=floors,
            caveats=[
                "The library ties the output projection to the token embedding; the factor scales the input side only, so it also changes the ratio between the input scale and the output logits' scale.",
                f"Pre-norm blocks normalise their input, so the factor matters through the token:position ratio and the residual stream's scale relative to the blocks' updates, not through the first LayerNorm's input variance. Small models ({p['steps']} steps, d = {p['d_model']}).",
                "The variance and token-share parts are exact checks on the models as initialised (no noise floor); the null pair is the training noise floor. "
                "The counts of seeds that learned are compared by Fisher's exact test (reported beside the loss comparison).",
            ],
        )  # fmt: skip

    def plot_init(self, idf, out):
        from tfclaims.plotting import log_ticks, subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        for (init, scaled), g in idf[idf["pos"] == "sinusoidal"].groupby(["init", "scaled"]):
            lab = f"{'N(0,1/d)' if init == 'xavier' else 'N(0,0.02²)'}, {'× sqrt(d)' if scaled else 'no factor'}"
            ls = "-" if scaled else "--"
            c = "C0" if init == "xavier" else "C1"
            a.loglog(g["d"], g["var_table"], marker="o", ms=3.5, ls=ls, color=c, label=lab)
            b.semilogx(g["d"], g["tok_share"], marker="o", ms=3.5, ls=ls, color=c, label=lab)
        log_ticks(a, idf["d"])
        log_ticks(b, idf["d"])
        a.axhline(1, color="k", lw=0.8, ls=":")
        a.axhline(0.5, color="gray", lw=0.8, ls="-.", label="sinusoidal position variance (1/2)")
        a.set_xlabel("d_model")
        a.set_ylabel("variance of the embedding table (× factor)")
        a.set_title("Token embeddings at init")
        a.legend(fontsize=6.5)
        b.set_xlabel("d_model")
        b.set_ylabel("token share of input variance")
        b.set_title("Tokens vs sinusoidal positions")
        b.set_ylim(-0.02, 1.02)
        out.figure(
            "as-initialised",
            fig,
            "As initialised: the variance of the token part of the first block's input (left) and its share against sinusoidal positions (right) vs width, for the two embedding inits with and without the sqrt(d) factor.",
        )

    def plot_training(self, train, p, out):
        from tfclaims.plotting import subplots

        fig, axes = subplots(len(p["inits"]), width=4.4, height=3.5)
        for ax, init in zip(axes, p["inits"]):
            groups = {
                f"{'× sqrt(d)' if s else 'no factor'}": [
                    r for r in train if r["config"]["init"] == init and r["config"]["emb_scale"] == s
                ]
                for s in (False, True)
            }
            plot_curves(ax, groups)
            ax.set_xlabel("training step")
            ax.set_ylabel("validation loss (nats/char)")
            ax.set_title(
                f"{'N(0, 1/d)' if init == 'xavier' else 'N(0, 0.02²)'} embeddings, sinusoidal positions"
            )
            ax.legend()
        out.figure(
            "training",
            fig,
            f"Validation loss with and without the sqrt(d) factor for each embedding init (mean and 95% band over {len(p['seeds'])} seeds).",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(EmbeddingScale)
