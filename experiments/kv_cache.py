"""`kv_cache`: caching keys and values makes each decoding step O(n) instead of recomputing the prefix at O(n²)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import torch

from tfclaims.attention import KVCache
from tfclaims.config import PRESETS, ModelConfig
from tfclaims.counting import kv_cache_bytes, lm_forward_flops, model_params
from tfclaims.experiment import Experiment, Output, SubVerdict, Verdict
from tfclaims.measure import count_flops
from tfclaims.models import LM
from tfclaims.stats import loglog_fit
from tfclaims.threads import intra_op_threads
from tfclaims.timing import time_interleaved

# Pre-registered (fixed before any timing was looked at).
FIT_FROM = 16  # fit per-step time over contexts n >= 16 d
CACHED_MAX, UNCACHED_MIN = 1.2, 1.5  # cached exponent at most 1.2 (linear or better); uncached at least 1.5
LOGIT_TOL = 1e-4
PRESET_NAMES = ("gpt2-small", "gpt2-xl", "llama-7b", "llama2-70b")


def decode_step_fns(model: LM, idx: torch.Tensor, device):
    """One decoding step at context n = idx.shape[1]: (cached, uncached) callables.

    cached: n - 1 positions already in a KVCache, one new token through the model (the cache position is reset
    before every call, so each repeat does the same work); uncached: the forward over all n tokens.
    """
    n = idx.shape[1]
    cache = KVCache.for_model(model.cfg, 1, n, device=device)
    model(idx[:, : n - 1], cache=cache)  # prefill (not timed)
    pos = cache.pos

    def cached():
        cache.pos = pos
        return model(idx[:, n - 1 :], cache=cache)

    return cached, lambda: model(idx)


class KVCacheClaim(Experiment):
    claim_id = "kv_cache"
    title = "A KV cache makes each decoding step O(n) instead of O(n²)"
    order = 7
    statement = (
        "When generating token by token, keeping the keys and values of earlier positions (a KV cache) means each new "
        "token costs one forward pass of a single position that attends to the n cached keys, O(n) in the context length, "
        "instead of re-running the whole prefix, whose attention costs O(n²). The price is memory that grows linearly with n."
    )
    notes_say = "with a KV cache each decoding step is O(n) instead of O(n²)"
    anchors = [
        "Kaplan et al. 2020: forward FLOPs per token ≈ 2N + 2·n_layer·n_ctx·d, i.e. a cached decoding step grows linearly with the context; recomputing the prefix costs n such tokens, with an n² attention term.",
        "KV-cache size is 2·n_layer·n·n_kv·d_head values per sequence: GPT-2 small at 1024 tokens in fp16 ≈ 37.7 MB; LLaMA-2-70B keeps 8 K/V heads (GQA) so 4096 tokens take ≈ 1.34 GB instead of ≈ 10.7 GB.",
    ]
    anchor_number = "cached step O(n), uncached O(n²); cache = 2·L·n·n_kv·d_head values"
    method = (
        "A decoder-only LM of the library (random init; timing does not depend on the weights), batch 1, float32, "
        "no autograd, one CPU thread. Per-step cost at context n: the cached step is one token through the model with "
        "n − 1 positions already in a `KVCache` (the cache position is reset before each repeat so every repeat does the "
        "same work); the uncached step is the forward over all n tokens, as `LM.generate(use_cache=False)` does each "
        "step. All lengths, cached and uncached, are timed round by round with `timing.time_interleaved` (after "
        "warm-up; a change in background load lands on every length alike), medians and quartiles over rounds, and the "
        "two steps' logits are compared. FLOPs per step are counted with torch's counter (SDPA on the MATH kernel) on the meta device and "
        "compared with `counting.lm_forward_flops`. Total generation time of N tokens from a short prompt is timed the same way with "
        "`LM.generate(use_cache=True/False)`. Cache memory is the allocated `KVCache` (bytes) against "
        "`counting.kv_cache_bytes`, and the closed form is applied to published configurations."
    )
    rule = (
        "(1) Counting: counted FLOPs per step equal the closed forms exactly (cached: a forward of one token over n keys; "
        "uncached: a forward of all n tokens, logits for every position included, as the implementation computes them); "
        "(2) correctness: cached and uncached logits agree within 1e-4 at every n. If (1) or (2) fails the verdict is "
        "inconclusive. (3) Time per step: log-log exponents in n fitted over every repeat at contexts n ≥ 16·d_model; "
        "supported if the cached exponent is ≤ 1.2 and the uncached exponent ≥ 1.5; mixed if the cached exponent is ≤ 1.2 "
        "but the uncached one is < 1.5 (the recomputation is not yet dominated by its n² term at these lengths); refuted if "
        "the cached exponent exceeds 1.2. Total generation time and cache memory are reported, not judged."
    )
    profiles = {
        "quick": {"d_model": 32, "n_heads": 2, "n_layers": 1, "ns": [16, 64, 256, 512, 1024], "gen_ns": [8, 16], "prompt": 4, "warmup": 1, "repeats": 3, "gen_repeats": 3, "threads": 1},
        "default": {"d_model": 128, "n_heads": 4, "n_layers": 2, "ns": [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], "gen_ns": [32, 64, 128, 256, 512], "prompt": 8, "warmup": 1, "repeats": 7, "gen_repeats": 3, "threads": 1},
        "full": {"d_model": 512, "n_heads": 8, "n_layers": 6, "ns": [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768], "gen_ns": [64, 256, 1024, 4096], "prompt": 16, "warmup": 3, "repeats": 10, "gen_repeats": 5, "threads": 0},
    }  # fmt: skip

    @staticmethod
    def model_config(cfg: dict, max_len: int) -> ModelConfig:
        return ModelConfig(
            vocab_size=96,
            d_model=cfg["d_model"],
            n_heads=cfg["n_heads"],
            n_layers=cfg["n_layers"],
            max_seq_len=max_len,
        )

    def grid(self, p):
        keys = ("d_model", "n_heads", "n_layers", "warmup", "repeats", "threads")
        base = {k: p[k] for k in keys}
        self.model_config(base, max(p["ns"]))  # validates sizes before anything runs
        runs = [{"kind": "count", "ns": p["ns"], **{k: p[k] for k in ("d_model", "n_heads", "n_layers")}}]
        # one run per sweep; inside it every length is timed round-robin (time_interleaved), so a change in
        # background load lands on all lengths alike instead of bending the fitted exponent
        runs.append({"kind": "steps", "ns": p["ns"], **base})
        runs.append(
            {
                "kind": "generate",
                "gen_ns": p["gen_ns"],
                "prompt": p["prompt"],
                **base,
                "repeats": p["gen_repeats"],
            }
        )
        return runs

    def run_one(self, cfg, ctx):
        return {"count": self._count, "steps": self._steps, "generate": self._generate}[cfg["kind"]](cfg, ctx)

    def _count(self, cfg, ctx):
        """Per-step FLOPs (meta device: the same operations dispatch, nothing is computed) and cache bytes."""
        rows = []
        c = self.model_config(cfg, max(cfg["ns"]))
        with torch.device("meta"), torch.no_grad():
            model = LM(c).eval()
            for n in cfg["ns"]:
                idx = torch.zeros(1, n, dtype=torch.long)
                cache = KVCache.for_model(c, 1, n)
                cache.pos = n - 1  # n - 1 positions cached; the step adds the n-th
                cached = count_flops(lambda: model(idx[:, -1:], cache=cache))  # noqa: B023 (called at once)
                full = count_flops(lambda: model(idx))  # noqa: B023
                rows.append({
                    "n": n, "cached_counted": cached, "cached_closed": lm_forward_flops(c, 1, n), "uncached_counted": full, "uncached_closed": lm_forward_flops(c, n),
                    "cache_bytes": KVCache.for_model(c, 1, n).nbytes(), "cache_bytes_closed": kv_cache_bytes(c, n),
                })  # fmt: skip
        return {"rows": rows, "params": model_params(c)}

    def _steps(self, cfg, ctx):
        dev = ctx.device
        c = self.model_config(cfg, max(cfg["ns"]))
        with torch.device(dev):
            model = LM(c).eval()
            idx = torch.randint(0, c.vocab_size, (1, max(cfg["ns"])))
        fns, diffs = {}, {}
        with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
            for n in cfg["ns"]:
                cached, uncached = decode_step_fns(model, idx[:, :n], dev)
                diffs[n] = float((cached()[:, -1] - uncached()[:, -1]).abs().max())
                fns[f"cached|{n}"], fns[f"uncached|{n}"] = cached, uncached
            t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
        points = [
            {"n": n, "cached": t[f"cached|{n}"], "uncached": t[f"uncached|{n}"], "max_logit_diff": diffs[n]}
            for n in cfg["ns"]
        ]
        return {"points": points, "threads": n_threads}

    def _generate(self, cfg, ctx):
        P, dev = cfg["prompt"], ctx.device
        c = self.model_config(cfg, P + max(cfg["gen_ns"]))
        with torch.device(dev):
            model = LM(c).eval()
            prompt = torch.randint(0, c.vocab_size, (1, P))
        fns, same = {}, {}
        with intra_op_threads(cfg["threads"]) as n_threads:
            for N in cfg["gen_ns"]:
                same[N] = bool(
                    torch.equal(
                        model.generate(prompt, N, use_cache=True), model.generate(prompt, N, use_cache=False)
                    )
                )
                fns[f"cached|{N}"] = functools.partial(model.generate, prompt, N, use_cache=True)
                fns[f"uncached|{N}"] = functools.partial(model.generate, prompt, N, use_cache=False)
            t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
        points = [
            {
                "N": N,
                "cached": t[f"cached|{N}"],
                "uncached": t[f"uncached|{N}"],
                "same_tokens": same[N],
                "cache_bytes": kv_cache_bytes(c, P + N),
            }
            for N in cfg["gen_ns"]
        ]
        return {"points": points, "threads": n_threads}

    # -------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        count = next(r for r in runs if r["config"]["kind"] == "count")["metrics"]
        cdf = pd.DataFrame(count["rows"])
        flops_ok = bool(
            (cdf.cached_counted == cdf.cached_closed).all()
            and (cdf.uncached_counted == cdf.uncached_closed).all()
        )
        bytes_ok = bool((cdf.cache_bytes == cdf.cache_bytes_closed).all())
        steps_run = next(r for r in runs if r["config"]["kind"] == "steps")["metrics"]["points"]
        steps = [
            {"config": {"n": pt["n"]}, "metrics": pt} for pt in sorted(steps_run, key=lambda pt: pt["n"])
        ]
        sdf = pd.DataFrame([
            {
                "n": r["config"]["n"], "cached (ms)": 1e3 * r["metrics"]["cached"]["median"], "uncached (ms)": 1e3 * r["metrics"]["uncached"]["median"],
                "speed-up": r["metrics"]["uncached"]["median"] / r["metrics"]["cached"]["median"], "max |Δlogit|": r["metrics"]["max_logit_diff"],
            }
            for r in steps
        ]).merge(cdf.rename(columns={"cached_counted": "cached FLOPs", "uncached_counted": "uncached FLOPs", "cache_bytes": "cache bytes"})[["n", "cached FLOPs", "uncached FLOPs", "cache bytes"]], on="n")  # fmt: skip
        out.table(
            "decode_step",
            sdf,
            f"Per-step cost at context n (d = {p['d_model']}, {p['n_layers']} layers, {p['n_heads']} heads): median time, counted FLOPs (= closed form), cache size",
        )
        logits_ok = bool((sdf["max |Δlogit|"] <= LOGIT_TOL).all())

        fit_from = FIT_FROM * p["d_model"]
        fits = {}
        for kind in ("cached", "uncached"):
            sel = [r for r in steps if r["config"]["n"] >= fit_from]
            if len(sel) < 2:
                fits[kind] = None
                continue
            xs = np.concatenate([[r["config"]["n"]] * len(r["metrics"][kind]["times"]) for r in sel])
            ys = np.concatenate([r["metrics"][kind]["times"] for r in sel])
            f = loglog_fit(xs, ys)
            cs = cdf[cdf.n >= fit_from]
            fs = loglog_fit(cs.n, cs[f"{kind}_counted"]).slope
            fits[kind] = {
                "slope": f.slope,
                "lo": f.slope_lo,
                "hi": f.slope_hi,
                "flop_slope": fs,
                "range": f"{min(r['config']['n'] for r in sel)}–{max(r['config']['n'] for r in sel)}",
                "sizes": len(sel),
            }
        out.table(
            "exponents",
            pd.DataFrame([{"step": k, **v} for k, v in fits.items() if v]),
            f"Log-log exponent of per-step time in n (n ≥ {FIT_FROM}·d = {fit_from}; 95% CI over every repeat), beside the exponent of the counted FLOPs over the same n",
        )

        gen_run = next(r for r in runs if r["config"]["kind"] == "generate")["metrics"]["points"]
        gens = [{"config": {"N": pt["N"]}, "metrics": pt} for pt in sorted(gen_run, key=lambda pt: pt["N"])]
        gdf = pd.DataFrame([
            {
                "tokens generated": r["config"]["N"], "cached (s)": r["metrics"]["cached"]["median"], "uncached (s)": r["metrics"]["uncached"]["median"],
                "speed-up": r["metrics"]["uncached"]["median"] / r["metrics"]["cached"]["median"], "same tokens": r["metrics"]["same_tokens"],
                "cache (KiB)": r["metrics"]["cache_bytes"] / 1024,
                **{f"{k} {q}": r["metrics"][k][q] for k in ("cached", "uncached") for q in ("q25", "q75")},
            }
            for r in gens
        ])  # fmt: skip
        out.table(
            "generation",
            gdf.drop(columns=[c for c in gdf.columns if c.endswith(("q25", "q75"))]),
            f"Total greedy generation time from a {p['prompt']}-token prompt (median over repeats)",
        )
        gfit = {}
        if len(gdf) >= 2:
            for kind in ("cached", "uncached"):
                gfit[kind] = loglog_fit(gdf["tokens generated"], gdf[f"{kind} (s)"]).slope

        pres = []
        for name in PRESET_NAMES:
            c = PRESETS[name]
            mha = c.replace(n_kv_heads=None)
            pres.append({
                "model": name, "context": c.max_seq_len, "layers": c.n_layers, "K/V heads × head size": f"{c.kv_heads} × {c.dk}",
                "bytes per token (fp16)": kv_cache_bytes(c, 1, bytes_per_value=2), "cache at full context, fp16 (MB)": kv_cache_bytes(c, c.max_seq_len, bytes_per_value=2) / 1e6,
                "same with full MHA (MB)": kv_cache_bytes(mha, c.max_seq_len, bytes_per_value=2) / 1e6,
            })  # fmt: skip
        out.table(
            "cache_memory_presets",
            pd.DataFrame(pres),
            "KV-cache size of published configurations (closed form, batch 1, fp16)",
        )

        self.plot_step(steps, cdf, fits, p, out)
        self.plot_generation(gdf, gfit, out)
        self.plot_memory(cdf, pres, p, out)

        fc, fu = fits.get("cached"), fits.get("uncached")
        if not (flops_ok and logits_ok) or fc is None or fu is None:
            verdict = "inconclusive"
        elif fc["slope"] > CACHED_MAX:
            verdict = "refuted"
        elif fu["slope"] >= UNCACHED_MIN:
            verdict = "supported"
        else:
            verdict = "mixed"
        last = sdf.iloc[-1]
        glast = gdf.iloc[-1] if len(gdf) else None

        def ftxt(f):
            return (
                f"{f['slope']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}] (FLOPs {f['flop_slope']:.2f})"
                if f
                else "not fitted (too few lengths)"
            )

        subs = [
            SubVerdict(
                "Counted FLOPs per step = closed forms",
                "supported" if flops_ok else "refuted",
                f"{len(cdf)} lengths, cached and uncached; at n = {int(last.n)}: {int(last['cached FLOPs']):,} vs {int(last['uncached FLOPs']):,} FLOPs per step",
            ),
            SubVerdict(
                "Cached step equals recomputation",
                "supported" if logits_ok else "refuted",
                f"largest |Δlogit| {sdf['max |Δlogit|'].max():.2g} (tolerance {LOGIT_TOL:g}); greedy tokens identical in {int(gdf['same tokens'].sum()) if len(gdf) else 0}/{len(gdf)} generations",
            ),
            SubVerdict(
                f"Cached step time at most linear in n (exponent ≤ {CACHED_MAX})",
                "inconclusive" if fc is None else ("supported" if fc["slope"] <= CACHED_MAX else "refuted"),
                ftxt(fc),
            ),
            SubVerdict(
                f"Uncached step time superlinear, towards n² (exponent ≥ {UNCACHED_MIN})",
                "inconclusive" if fu is None else ("supported" if fu["slope"] >= UNCACHED_MIN else "refuted"),
                ftxt(fu),
            ),
            SubVerdict(
                "Cache memory = 2·L·n·n_kv·d_head values",
                "supported" if bytes_ok else "refuted",
                f"allocated bytes equal the closed form at every n; {kv_cache_bytes(self.model_config(p, 1), 1):,} bytes per token here",
            ),
        ]
        gen_txt = (
            f"; generating {int(glast['tokens generated'])} tokens takes {glast['cached (s)']:.3g} s cached vs {glast['uncached (s)']:.3g} s ({glast['speed-up']:.1f}×)"
            if glast is not None
            else ""
        )
        return Verdict(
            verdict=verdict,
            summary=(
                f"Per decoding step, the cached forward's time grows with exponent {fc['slope']:.2f} in the context length and the recomputing forward's with {fu['slope']:.2f} (n ≥ {fit_from}); "
                f"at n = {int(last.n)} a cached step takes {last['cached (ms)']:.3g} ms against {last['uncached (ms)']:.3g} ms ({last['speed-up']:.0f}×){gen_txt}. "
                "Counted FLOPs per step match the closed forms: linear in n with a cache, quadratic without."
                if fc and fu
                else "Too few context lengths at n ≥ 16·d to fit the exponents."
            ),
            key_number=(
                f"step exponent {fc['slope']:.2f} cached vs {fu['slope']:.2f} uncached; {last['speed-up']:.0f}× per step at n = {int(last.n)}"
                if fc and fu
                else "not fitted"
            ),
            evidence={
                "fits": fits,
                "generation_exponents": gfit,
                "flops_match": flops_ok,
                "cache_bytes_match": bytes_ok,
                "logits_match": logits_ok,
                "fit_from_n": fit_from,
                "step_speedup_at_max_n": float(last["speed-up"]),
            },
            sub_verdicts=subs,
            caveats=[
                f"A small model (d = {p['d_model']}, {p['n_layers']} layers) on one CPU thread, batch 1: the cached step's fixed costs (projections, FFN, the LM head and per-operation overhead) dominate its n-dependent cache read over most of the range, so its time is nearly flat; with large batches or long contexts on a GPU, reading the cache dominates and the step becomes memory-bound and linear in n.",
                "The uncached step uses the fused causal kernel, which skips the masked half of the scores; counted FLOPs follow the no-discount convention (the MATH kernel computes every score).",
                "The uncached forward computes logits at every position, as `LM.generate(use_cache=False)` does; a tuned implementation would project only the last position, which changes a constant, not the n² term.",
            ],
        )

    # ------------------------------------------------------------------ plots
    def plot_step(self, steps, cdf, fits, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.9, height=3.8)
        n = np.array([r["config"]["n"] for r in steps], float)
        for kind, col in (("cached", "C0"), ("uncached", "C3")):
            med = np.array([r["metrics"][kind]["median"] for r in steps]) * 1e3
            lo = np.array([r["metrics"][kind]["q25"] for r in steps]) * 1e3
            hi = np.array([r["metrics"][kind]["q75"] for r in steps]) * 1e3
            f = fits.get(kind)
            lab = f"{kind}" + (f": slope {f['slope']:.2f} (n ≥ {FIT_FROM * p['d_model']})" if f else "")
            a.errorbar(
                n,
                med,
                yerr=np.array([med - lo, hi - med]).clip(0),
                color=col,
                marker="o",
                ms=3.5,
                capsize=2,
                label=lab,
            )
            if f:
                sel = n >= FIT_FROM * p["d_model"]
                xs = n[sel]
                a.plot(
                    xs,
                    np.exp(np.log(med[sel]).mean()) * (xs / np.exp(np.log(xs).mean())) ** f["slope"],
                    color="k",
                    lw=2.2,
                    alpha=0.35,
                )
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("context length n (tokens)")
        a.set_ylabel("time per decoding step (ms)")
        a.set_title("Per-step time, with and without a KV cache")
        a.legend(fontsize=7.5)
        b.loglog(cdf.n, cdf.cached_counted, "o", color="C0", ms=4, label="cached, counted")
        b.loglog(cdf.n, cdf.cached_closed, "-", color="C0", lw=1, label="cached, closed form")
        b.loglog(cdf.n, cdf.uncached_counted, "o", color="C3", ms=4, label="uncached, counted")
        b.loglog(cdf.n, cdf.uncached_closed, "-", color="C3", lw=1, label="uncached, closed form")
        b.set_xscale("log", base=2)
        b.set_xlabel("context length n (tokens)")
        b.set_ylabel("FLOPs per decoding step")
        b.set_title("Counted FLOPs per step")
        b.legend(fontsize=7.5)
        out.figure(
            "decode-step",
            fig,
            f"Left: median time of one decoding step at context n (quartile bars) with a KV cache (one new token attends to n cached keys) and without (the whole prefix recomputed); grey lines: log-log fits over n ≥ {FIT_FROM}·d. Right: counted FLOPs per step equal the closed forms, linear in n with the cache and quadratic without. d = {p['d_model']}, {p['n_layers']} layers, one CPU thread.",
        )

    def plot_generation(self, gdf, gfit, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        for kind, col in (("cached", "C0"), ("uncached", "C3")):
            lab = kind + (f": slope {gfit[kind]:.2f}" if kind in gfit else "")
            yerr = np.array(
                [gdf[f"{kind} (s)"] - gdf[f"{kind} q25"], gdf[f"{kind} q75"] - gdf[f"{kind} (s)"]]
            ).clip(0)
            a.errorbar(
                gdf["tokens generated"],
                gdf[f"{kind} (s)"],
                yerr=yerr,
                fmt="o-",
                color=col,
                ms=4,
                capsize=2,
                label=lab,
            )
        a.set_yscale("log")
        a.set_xscale("log", base=2)
        a.set_xlabel("tokens generated N")
        a.set_ylabel("total generation time (s)")
        a.set_title("Greedy generation, total time")
        a.legend()
        b.semilogx(gdf["tokens generated"], gdf["speed-up"], "ko-", ms=4)
        b.set_xscale("log", base=2)
        b.set_xlabel("tokens generated N")
        b.set_ylabel("uncached / cached time")
        b.set_title("Speed-up of the cache")
        out.figure(
            "generation",
            fig,
            "Total time of greedy generation with `LM.generate(use_cache=True/False)` against the number of generated tokens (median over repeats, quartile bars; slopes are log-log fits of the medians), and the speed-up of the cache.",
        )

    def plot_memory(self, cdf, pres, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        a.loglog(cdf.n, cdf.cache_bytes / 2**20, "o", ms=4, label="allocated KVCache")
        a.loglog(cdf.n, cdf.cache_bytes_closed / 2**20, "k-", lw=1, label="2·L·n·n_kv·d_head·4 bytes")
        a.set_xscale("log", base=2)
        a.set_xlabel("context length n (tokens)")
        a.set_ylabel("cache size (MiB, float32)")
        a.set_title(f"This model (d = {p['d_model']}, {p['n_layers']} layers)")
        a.legend(fontsize=7.5)
        x = np.arange(len(pres))
        a2 = [r["cache at full context, fp16 (MB)"] for r in pres]
        m2 = [r["same with full MHA (MB)"] for r in pres]
        b.bar(x - 0.2, m2, 0.4, label="with one K/V head per query head", color="C7")
        b.bar(x + 0.2, a2, 0.4, label="as published (GQA where used)", color="C0")
        b.set_yscale("log")
        b.set_xticks(x, [f"{r['model']}\n{r['context']} tok" for r in pres], fontsize=7)
        b.set_ylabel("cache at full context (MB, fp16)")
        b.set_title("Published configurations, batch 1")
        b.legend(fontsize=7)
        out.figure(
            "cache-memory",
            fig,
            "Left: allocated KV-cache bytes against context length equal the closed form 2·L·n·n_kv·d_head values (linear in n). Right: the closed form for published configurations at their full context in fp16, with and without K/V-head sharing.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(KVCacheClaim)
