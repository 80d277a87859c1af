"""`dropout_scaling`: inverted dropout scales kept activations by 1/(1−p) in training so that nothing changes
at inference."""

from __future__ import annotations

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, Readout, SubClaim, Within, arm, bound, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import run_fields, train_profile

from experiments.dropout_scaling import analysis as view

SITES = ("residual", "attention")  # where the LM drops (`sites.add_site_dropout`)

DS = recipes("experiments.dropout_scaling.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
SCALE_TOL = 2.0**-22  # kept value vs x/(1−p): two float32 roundings (the factor and the product)
KEEP_MARGIN = 0.001  # the kept share within ±0.001 of 1 − p
FIRST_MARGIN = 0.01  # first site: the masks' mean projects on eval mode's output with coefficient 1 ± 0.01
DEEP_MARGIN = 0.05  # deeper sites (reported): 1 ± 0.05 (nonlinearities between sites bend the expectation)
ENSEMBLE_MARGIN = 0.02  # nats: eval mode's loss and the MC average's within ±0.02
MISMATCH_SESOI = ENSEMBLE_MARGIN  # nats/char: the held-out loss the missing scaling must cost
MISMATCH_SOURCE = f"the claim's own ±{ENSEMBLE_MARGIN:g} nats of 'approximates' (ensemble): less is no change"
LEARNED = rd.learned(0.3)
MC_SAMPLES, MASK_SIZE, MASK_DRAWS = 64, 4_000_000, 20  # the default profile's
# the default profile's LM: the shared recipe, deeper and longer; the loss at least 0.3 nats below the
# unigram level
LAYERS, STEPS = 4, 300

LOSS = Readout(
    "loss", "held-out loss", "nats/char", definition="mean cross-entropy over fixed held-out batches"
)
PROJ = Readout(
    "projection",
    "projection of the masks' mean on eval mode",
    definition="⟨mean over K masks of the "
    "train-mode output, eval-mode output⟩ ÷ ‖eval-mode output‖² at a dropout site",
    fmt="+.4f",
)
REL = Readout(
    "max_rel_error",
    "largest relative error of a kept value",
    definition="max over kept elements of |out − x/(1−p)| ÷ |x/(1−p)|, x/(1−p) in float64",
    fmt=".2g",
)
KEEP = Readout(
    "keep_dev",
    "kept share − (1 − p)",
    definition="the share of nonzero outputs of one draw minus 1 − p",
    fmt="+.5f",
)


def masks_grid(p):
    return [{"ps": p["dropouts"], "size": p["mask_size"], "draws": p["mask_draws"], "seed": 0}]


def train_grid(p):
    extra = {"mc_samples": p["mc_samples"], "probe_batches": p["probe_batches"]}
    return [
        {**run_fields(p), **extra, "site": site, "dropout": d, "seed": s}
        for site in p["sites"]
        for d in p["dropouts"]
        for s in p["seeds"]
    ]


def _profile(name: str, **kw) -> dict:
    return train_profile(name, dropouts=[0.1, 0.3], sites=list(SITES), **kw)


def _sites(p: dict) -> list[str]:
    """The profile's dropout placements, validated (one line before any run)."""
    if not p["sites"] or any(s not in SITES for s in p["sites"]) or len(set(p["sites"])) != len(p["sites"]):
        raise ConfigError(f"sites: distinct placements among {SITES}, got {p['sites']!r}")
    return list(p["sites"])


def _mask_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """What torch's dropout does to a tensor: the kept values' scale and the kept share."""
    return (
        SubClaim(
            "scale",
            f"Dropout multiplies each kept value by 1/(1−p) (within {SCALE_TOL:.2g} relative, "
            "two float32 roundings) and zeroes the rest",
            bound(None, SCALE_TOL),
            (REL,),
            table="masks",
            cells=cells("p{p:g}", p=p["dropouts"]),
            where="all",
        ),
        SubClaim(
            "keep-rate",
            f"It keeps a share 1 − p of the values (within ±{KEEP_MARGIN:g})",
            Within(-KEEP_MARGIN, KEEP_MARGIN, f"within ±{KEEP_MARGIN:g} of 1 − p"),
            (KEEP,),
            table="masks",
            b=arm("kept share − (1 − p)"),
            cells=cells("p{p:g}", p=p["dropouts"]),
            where="all",
        ),
    )


def _mismatch_subclaims(at, mismatch: dict) -> tuple[SubClaim, ...]:
    """The missing 1/(1−p): counted on the attention weights, reported on the residual branches."""
    return (
        SubClaim(
            "mismatch",
            "Without the scaling, inference sees values 1/(1−p) times larger than training "
            "did, and the held-out loss is worse (dropout on the attention weights, the notes' "
            "placement: nothing renormalises them)",
            Better("a"),
            (LOSS,),
            cells=at("attention"),
            where="all",
            **mismatch,
        ),
        SubClaim(
            "mismatch-residual",
            "Reported: the same on the embedding and residual branches of a Pre-LN stack, where "
            "every LayerNorm downstream removes a uniform factor (the design cannot show it there)",
            Better("a"),
            (LOSS,),
            cells=at("residual"),
            counts=False,
            **mismatch,
        ),
    )


def _later_sites(p: dict, sites: list[str]) -> tuple:
    """The later sites of each placement: residual 1 … 2L (each block's attention and FFN), attention 1 …
    L − 1 (blocks 2 … L)."""
    n = {"residual": 2 * p["n_layers"], "attention": p["n_layers"] - 1}
    return tuple(
        c
        for s in sites
        for c in cells(
            f"{s}-p{{dropout:g}}-site{{site}}", placement=[s], dropout=p["dropouts"], site=range(1, n[s] + 1)
        )
    )


class DropoutScaling(Experiment):
    claim_id = "dropout_scaling"
    title = "Inverted dropout scales by 1/(1−p) in training so that nothing changes at inference"
    headline = "expectation"  # the answers table's number
    order = 19
    profiles = {
        "quick": _profile("quick", mc_samples=4, probe_batches=1, mask_size=100_000, mask_draws=5),
        "default": _profile("default", n_layers=LAYERS, steps=STEPS, eval_every=STEPS // 4,
                            seeds=[0, 1, 2, 3, 4],
                            mc_samples=MC_SAMPLES, probe_batches=4, mask_size=MASK_SIZE,
                            mask_draws=MASK_DRAWS),
        "full": _profile("full", seeds=[0, 1, 2, 3, 4], mc_samples=MC_SAMPLES, probe_batches=16,
                         mask_size=64_000_000, mask_draws=MASK_DRAWS),
    }  # fmt: skip
    parts = (Part("masks", masks_grid, DS.run_masks), Part("train", train_grid, DS.run_train))

    def declare(self, p: dict) -> Declaration:
        sites = _sites(p)
        per_p = cells("{site}-p{dropout:g}", site=sites, dropout=p["dropouts"])
        at = lambda site: tuple(c for c in per_p if dict(c.where)["site"] == site)  # noqa: E731
        first = cells("{placement}-p{dropout:g}", placement=sites, dropout=p["dropouts"])
        losses = dict(table="losses", guard=LEARNED)
        mismatch = dict(
            a=arm("eval mode", variant="eval"),
            b=arm("no scaling", variant="unscaled"),
            sesoi=MISMATCH_SESOI,
            sesoi_source=MISMATCH_SOURCE,
            **losses,
        )
        return Declaration(
            (
                *_mask_subclaims(p),
                SubClaim(
                    "expectation",
                    "So eval mode is the expectation of train mode: at the first dropout site of "
                    f"a trained LM, the masks' mean projects on eval mode's value with coefficient 1 (± "
                    f"{FIRST_MARGIN:g})",
                    Within(1 - FIRST_MARGIN, 1 + FIRST_MARGIN, "a coefficient of 1"),
                    (PROJ,),
                    table="projection",
                    b=arm("first site", first=True),
                    cells=first,
                    where="all",
                ),
                SubClaim(
                    "deeper",
                    f"…and at every later site, to ± {DEEP_MARGIN:g}",
                    Within(1 - DEEP_MARGIN, 1 + DEEP_MARGIN, "a coefficient near 1"),
                    (PROJ,),
                    table="projection",
                    b=arm("site"),
                    cells=_later_sites(p, sites),
                    where="all",
                    counts=False,
                    note="Reported: between sites, nonlinearities make eval mode only approximately the "
                    "expectation of train mode.",
                ),
                *_mismatch_subclaims(at, mismatch),
                SubClaim(
                    "ensemble",
                    f"The notes' explanation: eval mode approximates the average of the "
                    f"sub-networks (MC dropout over {p['mc_samples']} masks) within "
                    f"±{ENSEMBLE_MARGIN:g} nats",
                    Within(-ENSEMBLE_MARGIN, ENSEMBLE_MARGIN, f"within ±{ENSEMBLE_MARGIN:g} nats"),
                    (LOSS,),
                    a=arm(f"MC average of {p['mc_samples']}", variant=f"mc{p['mc_samples']}"),
                    b=arm("eval mode", variant="eval"),
                    cells=per_p,
                    where="all",
                    **losses,
                ),
                SubClaim(
                    "single",
                    "One sub-network (a single mask) is worse than eval mode",
                    Better("b"),
                    (LOSS,),
                    a=arm("one mask", variant="single"),
                    b=arm("eval mode", variant="eval"),
                    cells=per_p,
                    counts=False,
                    **losses,
                ),
            )
        )

    def analyse(self, runs, p, out: Output):
        t = {
            "masks": view.masks(runs),
            "losses": view.losses(runs, LEARNED),
            "projection": view.projections(runs),
        }
        result = evaluate(self.declare(p), t)
        s = view.summary(t["losses"]) if len(t["losses"]) else t["losses"]
        out.table("losses", s, "Held-out loss by inference mode (mean over seeds)")
        proj = t["projection"]
        first = proj[proj["first"].astype(bool)].groupby(["placement", "dropout"]).projection.mean()
        out.table(
            "projection",
            t["projection"],
            "Per-site projection of the masks' mean on eval mode",
            in_report=False,
        )
        out.table(
            "masks",
            t["masks"],
            "Per draw: kept share and the largest relative error of a kept value",
            in_report=False,
        )
        view.plot(t["losses"], t["projection"], out)
        gap = {
            (k, d): float(r["unscaled"] - r["eval"])
            for (k, d), r in s.set_index(["site", "dropout"]).iterrows()
        }
        words = {"residual": "on the residual branches", "attention": "on the attention weights"}

        def per(values: dict, fmt: str) -> str:
            return "; ".join(
                words[k]
                + " "
                + ", ".join(f"{format(v, fmt)} at p = {d:g}" for (kk, d), v in values.items() if kk == k)
                for k in dict.fromkeys(k for k, _ in values)
            )

        proj_txt, gap_txt = per(first.to_dict(), ".4f"), per(gap, "+.3f")
        key = f"no scaling costs {gap_txt} nats/char; first-site projection {proj_txt}"
        return verdict_from(
            result,
            key_number=key if gap else "no run learned",
            summary=(
                "Kept values are x/(1−p) to rounding, so at the first dropout site the average over masks "
                f"equals eval mode's value (projection {proj_txt}). Removing the scaling at inference costs "
                f"{gap_txt} nats/char of held-out loss."
                if gap
                else "No trained run learned: the inference modes were not compared."
            ),
            evidence={
                "first_site_projection": {f"{k}-p{d:g}": v for (k, d), v in first.items()},
                "unscaled_minus_eval": {f"{k}-p{d:g}": v for (k, d), v in gap.items()},
            },
            caveats=self.caveats(p),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(DropoutScaling)
