"""`norm_padding`: Transformers use LayerNorm, not BatchNorm, because of padding and batch statistics."""

from __future__ import annotations

from tfclaims.analysis import norm_padding as view
from tfclaims.claims.norm_padding import INV_KEYS, LM_KEYS, NORMS, bn_mlp, build_lm, padded_lm
from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, arm, bound, cell, check
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, verdict_from
from tfclaims.nn.config import ConfigError

MARGIN = 0.02  # nats/char: TOST margin reported beside every loss comparison
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000
INVARIANT = 1e-10  # float64 relative change that counts as "unchanged" (rounding is ~1e-15)
DEPENDENT = 1e-4  # relative change that counts as a real dependence
FLUCT_FACTOR = 2.0  # "fluctuates much more": above 2x the control's multiple of i.i.d. sampling noise

LEARNED = rd.learned(LEARN_MARGIN, key="eval_mixed", what="eval-mode validation loss")
LOSS, GAP, MODE, FLUCT = view.LOSS, view.GAP, view.MODE, view.FLUCT_READOUTS
PADS_T, PADS_E, NB_T, NB_E, LEAK_T, LEAK_E = view.PROBE_READOUTS


def _lm_common(p):
    return {**{k: p[k] for k in LM_KEYS}, **{k: p[k] for k in INV_KEYS}}


def _arms(p, key) -> list[tuple[str, int, str]]:
    """A profile's declared arms, [placement, batch, norm] each, validated."""
    return view.arms(p, key, NORMS)


def grid_lines(p):
    common = _lm_common(p)
    arms = _arms(p, "line_arms")
    for pl in {a[0] for a in arms}:
        build_lm({**common, "norm": "layer", "placement": pl}, 96)  # validates sizes before anything runs
    fr = p["pad_fracs"]
    if not 0 < min(fr) or max(fr) >= 1 or p["inv_T0"] / (1 - max(fr)) > p["max_len"] - 1:
        raise ConfigError(
            "pad_fracs must lie in (0, 1) and inv_T0 / (1 - max(pad_fracs)) fit in max_len - 1 positions"
        )
    return [
        {"data": "lines", "norm": n, "batch": b, "placement": pl, **common, "seed": s}
        for pl, b, n in arms
        for s in p["seeds"]
    ]


def grid_null(p):
    """The null pairs: the LN arm of each declared (data, placement, batch) cell rerun at seeds s + 1000."""
    out = []
    for data, pl, b in p["null_cells"]:
        if data not in ("lines", "windows"):
            raise ConfigError(f"null_cells: data must be 'lines' or 'windows', got {data!r}")
        key = "line_arms" if data == "lines" else "window_arms"
        if (pl, b, "layer") not in _arms(p, key):
            raise ConfigError(f"null_cells: {[data, pl, b]} has no LN arm in {key}")
        common = _lm_common(p) if data == "lines" else {k: p[k] for k in LM_KEYS}
        out += [
            {"data": data, "norm": "layer", "batch": b, "placement": pl, **common, "seed": s + NULL_OFFSET}
            for s in p["seeds"]
        ]
    return out


def grid_windows(p):
    """The same LM on fixed-length contiguous windows: no padding at all."""
    common = {k: p[k] for k in LM_KEYS}
    return [
        {"data": "windows", "norm": n, "batch": b, "placement": pl, **common, "seed": s}
        for pl, b, n in _arms(p, "window_arms")
        for s in p["seeds"]
    ]


def grid_mlp(p):
    keys = ("steps", "lr", "warmup", "stat_every", "threads")
    mlp = {"batch": p["mlp_batch"], "width": p["mlp_width"], "d_in": p["mlp_in"]}
    return [{**mlp, **{k: p[k] for k in keys}, "seed": s} for s in p["seeds"]]


class NormPadding(Experiment):
    claim_id = "norm_padding"
    title = "LayerNorm rather than BatchNorm: padding vs batch statistics"
    order = 3
    statement = (
        "Transformers normalise each token over its own features (LayerNorm) rather than each feature over "
        "the batch (BatchNorm) because, on text, BatchNorm's batch statistics are spoiled: pad positions "
        "enter them, statistics computed on training batches differ from those used at inference, and "
        "small batches make them noisy; so BatchNorm gives worse models."
    )
    notes_say = (
        "padding corrupts BN's statistics, train/inference statistics differ, small batches are noisy: so LN"
    )
    anchors = [
        "Shen et al. 2020 (PowerNorm): BatchNorm in Transformers underperforms LayerNorm on translation "
        "(IWSLT14, post-norm encoder-decoder) although their BatchNorm already excludes pad tokens from "
        "its statistics; they attribute it to batch statistics that fluctuate strongly during training "
        "(distance of batch mean/variance from the running statistics far larger than for ResNet on "
        "CIFAR-10).",
        "PowerNorm (no centring, running quadratic mean in the forward pass, approximate backward) beats "
        "LayerNorm by 0.4 BLEU on IWSLT14 and 0.6 BLEU on WMT14 in their Table 1.",
        "No paper isolates the padding effect alone (pads counted vs masked) — this experiment does.",
    ]
    anchor_number = "PowerNorm − LayerNorm: +0.4 BLEU (IWSLT14), +0.6 BLEU (WMT14); BN (pads masked) below LN"
    method = (
        "Character LM on the Shakespeare texts. Three reasons the notes give are separated, each by its "
        "own comparison at equal everything else (data, placement, batch size, seeds, initial weights and "
        "data order): (a) padding: trained on whole lines of 8–96 characters padded to each batch's "
        "longest line, BatchNorm over all B·T positions (pads counted) against BatchNorm over real tokens "
        "only (pads masked); (b) batch statistics without any padding: the same network on fixed-length "
        "contiguous windows, BatchNorm (nothing to mask) against LayerNorm; (c) small batches: (BN masked "
        "− LN) on lines at a genuinely small batch (2 lines, about 90 real tokens) against 16 lines; (d) "
        "train/inference mismatch: the same trained BN model evaluated with its batch statistics (train "
        "mode) and with its running statistics (eval mode). BatchNorm in train mode lets an output see "
        "later tokens of its batch through the statistics (a causal LM can exploit that leak in training "
        "and lose it at inference), so a leak-free batch-statistics arm is added: BatchNorm that "
        "normalises each batch with the previous training batch's statistics (still noisy and "
        "batch-dependent, never the batch's own), on lines and on windows; PowerNorm (the authors' "
        "released design: group scaling per head, running quadratic mean in the forward pass after a "
        "warm-up, approximate backward) is the anchors' arm. Placement: pre-norm everywhere; post-norm, "
        "the anchors' placement, at 16 lines for LN and both BNs, and on windows. Default profile: d = 64, "
        "2 layers, 4 heads, 1,500 steps (lr 1e-3, 150 warm-up steps), 5 seeds. A null pair (the LN arm of "
        f"every compared cell rerun at seeds s + {NULL_OFFSET}) gives the noise floor. History: the previous "
        "design trained 300 steps at 4 layers with 3 seeds, pre-norm only, and judged (b) on padded lines, "
        "where masked BN still leaks; its one-seed window check gave LN 2.544 vs BN 2.713. Probes: (1) "
        "invariance, in float64 on the trained models: fixed target lines in batches with added pads only, "
        "and next to random other lines; the largest change of their logits, absolute and relative per "
        "token, in train mode (batch statistics) and eval mode (running statistics); and the future leak: "
        "change the last token of one line and watch every earlier output. (2) Batch statistics: at every "
        "few training steps, the distance of each BatchNorm's batch mean and variance from its running "
        "statistics, in running-standard-deviation units and as a multiple of what i.i.d. sampling of the "
        "same number of positions would give; for the LM on padded lines, for the same network on "
        "fixed-length contiguous windows (no padding), and for an MLP with BatchNorm on a synthetic "
        "fixed-size classification task (fresh Gaussian inputs, labels from a random teacher network), the "
        "textbook setting where BatchNorm works. (3) Quality: validation loss per character in eval mode "
        "on a fixed set of validation lines batched 64 at a time in random order (a composition different "
        "from training), and in train mode at the training batch size (the train/inference gap), in random "
        "order and sorted by length (little padding)."
    )
    profiles = {
        "quick": {
            "line_arms": [["pre", b, n] for b in (2, 4) for n in NORMS]
                         + [["post", 4, n] for n in ("layer", "batch", "batch_masked")],
            "window_arms": [[pl, 4, n] for pl in ("pre", "post") for n in ("layer", "batch_masked")]
                           + [["pre", 4, "batch_prev"]],
            "null_cells": [["lines", "pre", 2], ["lines", "pre", 4], ["windows", "pre", 4]], "seeds": [0, 1],
            "d_model": 32, "n_layers": 2, "n_heads": 2, "steps": 10, "lr": 1e-3, "warmup": 2, "min_len": 8,
            "max_len": 48, "n_val_lines": 16, "eval_batch": 8, "stat_every": 2, "threads": 1, "seq_len": 32,
            "mlp_batch": 64, "mlp_width": 32, "mlp_in": 16, "inv_T0": 8, "inv_K": 3, "inv_neighbours": [2],
            "inv_draws": 1, "pad_fracs": [0.5, 0.8],
        },
        "default": {
            "line_arms": [["pre", b, n] for b in (2, 16) for n in NORMS]
                         + [["post", 16, n] for n in ("layer", "batch", "batch_masked")],
            "window_arms": [[pl, 16, n] for pl in ("pre", "post") for n in ("layer", "batch_masked")]
                           + [["pre", 16, "batch_prev"]],
            "null_cells": [["lines", "pre", 2], ["lines", "pre", 16], ["lines", "post", 16],
                           ["windows", "pre", 16], ["windows", "post", 16]],
            "seeds": [0, 1, 2, 3, 4], "d_model": 64, "n_layers": 2, "n_heads": 4, "steps": 1500, "lr": 1e-3,
            "warmup": 150, "min_len": 8, "max_len": 96, "n_val_lines": 384, "eval_batch": 64,
            "stat_every": 25, "threads": 0, "seq_len": 32, "mlp_batch": 512, "mlp_width": 128, "mlp_in": 32,
            "inv_T0": 16, "inv_K": 4, "inv_neighbours": [4, 28], "inv_draws": 6,
            "pad_fracs": [0.2, 0.4, 0.6, 0.8],
        },
        "full": {
            "line_arms": [[pl, b, n] for pl in ("pre", "post") for b in (4, 64) for n in NORMS],
            "window_arms": [[pl, 64, n] for pl in ("pre", "post")
                            for n in ("layer", "batch_masked", "batch_prev")],
            "null_cells": [["lines", "pre", 64], ["lines", "post", 64], ["windows", "pre", 64]],
            "seeds": [0, 1, 2, 3, 4], "d_model": 256, "n_layers": 6, "n_heads": 8, "steps": 4000, "lr": 5e-4,
            "warmup": 400, "min_len": 8, "max_len": 96, "n_val_lines": 4096, "eval_batch": 64,
            "stat_every": 20, "threads": 0, "seq_len": 32, "mlp_batch": 4096, "mlp_width": 256, "mlp_in": 32,
            "inv_T0": 16, "inv_K": 8, "inv_neighbours": [8, 56], "inv_draws": 10,
            "pad_fracs": [0.2, 0.4, 0.6, 0.8],
        },
    }  # fmt: skip
    parts = (
        Part("lines", grid_lines, padded_lm),
        Part("null", grid_null, padded_lm),
        Part("windows", grid_windows, padded_lm),
        Part("mlp", grid_mlp, bn_mlp),
    )

    def declare(self, p: dict) -> Declaration:
        lines, wins, at = _arms(p, "line_arms"), _arms(p, "window_arms"), view.cells_at
        ln, bn = arm("LN", norm="layer"), arm("BN pads counted", norm="batch")
        masked, prev = arm("BN pads masked", norm="batch_masked"), arm("BN previous batch", norm="batch_prev")
        loss = dict(readouts=(LOSS,), guard=LEARNED, margin=MARGIN, noise="null", where="all")
        sz, floored, (pl, big) = view.sizes(lines), view.floored(p, lines), view.fluct_arm(lines)
        ctl = arm(f"MLP control (batch {p['mlp_batch']})", data="mlp")
        lm = arm(
            f"LM, lines, BN masked ({pl}, batch {big})",
            data="lines",
            norm="batch_masked",
            placement=pl,
            batch=big,
        )
        small = ", ".join(f"{pl}: {s} vs {g} lines" for pl, (s, g) in sz.items())
        return Declaration((
            SubClaim("a", "Padding: BN counting pads worse than BN masking them (padded lines)", Better("a"),
                a=masked, b=bn, cells=at("lines", lines, "batch", "batch_masked"), **loss,
                note="The arms differ only in which positions enter BN's statistics."),
            SubClaim("b", "Batch statistics without padding: BN worse than LN on fixed windows", Better("a"),
                a=ln, b=masked, cells=at("windows", wins, "layer", "batch_masked"), **loss),
            SubClaim("c", f"Small batches: (BN masked − LN) larger at the smallest batch than at the largest "
                f"({small})", Better("a"), (GAP,), table="interaction", cells=view.interaction_cells(lines),
                a=arm("largest batch", size="largest"), b=arm("smallest batch", size="smallest"),
                guard=LEARNED, margin=MARGIN, noise="null-gap" if floored else None, where="all"),
            SubClaim("d", "Train/inference mismatch: one BN model worse with running than batch statistics",
                Better("a"), (MODE,), table="modes", a=arm("train mode", norm="batch_masked", mode="train"),
                b=arm("eval mode", norm="batch_masked", mode="eval"), guard=LEARNED, margin=MARGIN,
                cells=at("lines", lines, "batch_masked") + at("windows", wins, "batch_masked"),
                where="all", note="No null pair: both readouts come from one run."),
            SubClaim("prev-windows", "Previous-batch statistics (leak-free) worse than LN on fixed windows",
                Better("a"), a=ln, b=prev, cells=at("windows", wins, "layer", "batch_prev"), counts=False,
                **loss),
            SubClaim("prev-lines", "Previous-batch statistics (leak-free) better than BN masked on lines",
                Better("b"), a=masked, b=prev, cells=at("lines", lines, "batch_masked", "batch_prev"),
                counts=False, **loss),
            SubClaim("power", "PowerNorm better than LN (the anchors' finding; padded lines)", Better("b"),
                a=ln, b=arm("PowerNorm", norm="power"), cells=at("lines", lines, "layer", "power"),
                counts=False, **loss),
            SubClaim("naive", "BN counting pads worse than LN (padded lines)", Better("a"),
                a=ln, b=bn, cells=at("lines", lines, "layer", "batch"), counts=False, **loss),
            check("ln-invariant", "LN, train mode: no change with pads, neighbours or later tokens",
                (PADS_T, NB_T, LEAK_T), bound(None, INVARIANT), table="probes", b=ln),
            check("eval-invariant", "Eval mode, every norm: no change with pads, neighbours or later tokens",
                (PADS_E, NB_E, LEAK_E), bound(None, INVARIANT), table="probes"),
            check("masked-pads", "BN masking pads: outputs unchanged when pads are added (train mode)",
                PADS_T, bound(None, INVARIANT), table="probes", b=masked),
            check("prev-invariant", "BN with the previous batch's statistics sees nothing of its own batch",
                (PADS_T, NB_T, LEAK_T), bound(None, INVARIANT), table="probes", b=prev),
            SubClaim("pads-enter", "BN counting pads: train-mode outputs change when pads are added",
                bound(DEPENDENT), (PADS_T,), table="probes", b=bn, counts=False),
            SubClaim("leak", "BN in train mode leaks later tokens into earlier outputs", bound(DEPENDENT),
                (LEAK_T,), table="probes", where="all", counts=False,
                cells=(cell("counted", norm="batch"), cell("masked", norm="batch_masked"))),
            SubClaim("fluct", "Batch statistics fluctuate more in the LM than in an MLP control",
                Better("b"), FLUCT, table="stats", a=ctl, b=lm, where="all", counts=False),
            SubClaim("fluct-2x", f"LM batch statistics fluctuate ≥ {FLUCT_FACTOR:g}× more than the MLP's",
                Better("b"), FLUCT, table="stats", b=lm, where="all", counts=False,
                a=arm(f"MLP control × {FLUCT_FACTOR:g}", data=f"mlp-x{FLUCT_FACTOR:g}"),
                note="Arm a is the control's rows raised by log2 of the factor."),
        ), tuple(n for n in (
            NullPair("null", ln, arm("LN rerun", norm="layer", part="null"), (LOSS,), seed_offset=NULL_OFFSET,
                cells=tuple(view.cell_of(*c) for c in p["null_cells"])),
            NullPair("null-gap", arm("LN, smallest − largest", pair="ln"), arm("rerun", pair="ln-rerun"),
                (GAP,), table="interaction", cells=floored, seed_offset=NULL_OFFSET),
        ) if n.cells))  # fmt: skip

    def analyse(self, runs, p, out: Output):
        p = view.with_arms(p, _arms(p, "line_arms"), NORMS)  # the lines' placements, batch sizes and norms
        t, decl = view.observe(runs, p, (LOSS, LEARNED), FLUCT_FACTOR), self.declare(p)
        result = evaluate(decl, t)
        fl = view.write_tables(runs, t, result, p, out)
        view.plot_invariance(runs, p, out)
        view.plot_fluctuation(runs, p, out)
        view.plot_quality(runs, t, p, out)
        pl, big = p["placements"][0], max(p["batches"])

        def num(sub, label):
            c = dict(zip((c.label for c in decl.sub(sub).cells), result.of(sub))).get(label)
            return "—" if c is None else c.short() + ("" if c.excluded else f" ({c.decision})")

        inv = view.probe_maxima(view.probe_rows(self.runs_of(runs, "lines")))
        return verdict_from(
            result,
            key_number=f"BN(pads counted) − BN(masked) at batch {big}: {num('a', f'{pl}-B{big}')}; "
            f"BN − LN on windows: {num('b', f'win-{pl}-B{big}')} nats/char",
            summary=view.summary(t, fl, inv, p),
            evidence={
                "margin": MARGIN,
                "learn_margin": LEARN_MARGIN,
                "invariant": INVARIANT,
                "dependent": DEPENDENT,
                "fluct_factor": FLUCT_FACTOR,
                "invariance": inv,
            },
            caveats=view.caveats(p, NULL_OFFSET),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(NormPadding)
