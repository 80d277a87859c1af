"""norm_padding: whole-model padding invariance of LayerNorm, masked BatchNorm ignoring pads, the future leak of
BatchNorm in train mode, PowerNorm against its formulas, and the experiment's probes."""

import pytest
import torch
import torch.nn.functional as F

from tfclaims.claims import norm_padding as NP
from tfclaims.claims.norm_padding import NORMS
from tfclaims.data.corpus import PAD, pad_batch
from tfclaims.harness.registry import load
from tfclaims.nn.norms import TokenBatchNorm
from tfclaims.nn.powernorm import PowerNorm, group_scaling

EXP = load("norm_padding")
V = 20


def lm(norm: str, seed: int = 0, warmup: int = 3):
    torch.manual_seed(seed)
    cfg = {
        "norm": norm,
        "d_model": 16,
        "n_layers": 2,
        "n_heads": 2,
        "placement": "pre",
        "max_len": 41,
        "seq_len": 16,
        "warmup": warmup,
    }
    model = NP.build_lm(cfg, V).double()
    with torch.no_grad():  # non-trivial norm parameters and running statistics, as after training
        for m in model.modules():
            if isinstance(m, (TokenBatchNorm, PowerNorm)) or type(m).__name__ == "LayerNorm":
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
            if isinstance(m, TokenBatchNorm):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2)
            if isinstance(m, NP.PrevBatchNorm):
                m.prev_mean.normal_(0, 0.1)
                m.prev_var.uniform_(0.5, 2)
    return model


def lines(*lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, V, (n,), generator=g) for n in lengths]


def logits(model, x, mask, train):
    with NP.scratch_mode(model, train) as m:
        return m(x, pad_mask=mask)


@pytest.mark.parametrize("train", [True, False])
def test_layernorm_lm_gives_the_same_logits_alone_and_padded_among_others(train):
    model = lm("layer")
    seq = lines(12)[0]
    x1, _, m1 = pad_batch([seq])  # alone, no padding
    xb, _, mb = pad_batch([lines(30, seed=2)[0], seq, lines(5, seed=3)[0]])  # padded to 29 beside other lines
    alone = logits(model, x1, m1, train)[0]
    batched = logits(model, xb, mb, train)[1, : x1.shape[1]]
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-12)


def test_batchnorm_lm_depends_on_the_batch_in_train_mode_only():
    seq = lines(12)[0]
    x1, _, m1 = pad_batch([seq])
    xp = torch.cat([x1, torch.full((1, 20), PAD)], 1)  # the same line with pads only
    xb, _, mb = pad_batch([seq, lines(30, seed=2)[0]])  # beside another line
    for norm in ("batch", "batch_masked"):
        model = lm(norm)
        ref_t, ref_e = logits(model, x1, m1, True)[0], logits(model, x1, m1, False)[0]
        pads_t = logits(model, xp, xp != PAD, True)[0, :11]
        beside_t = logits(model, xb, mb, True)[0, :11]
        # eval mode: running statistics, a per-token map; invariant to pads and neighbours
        torch.testing.assert_close(logits(model, xp, xp != PAD, False)[0, :11], ref_e, rtol=0, atol=1e-12)
        torch.testing.assert_close(logits(model, xb, mb, False)[0, :11], ref_e, rtol=0, atol=1e-12)
        assert (beside_t - ref_t).abs().max() > 1e-3  # every train-mode BN depends on its neighbours
        if norm == "batch":
            assert (pads_t - ref_t).abs().max() > 1e-3  # pads enter the statistics
        else:
            torch.testing.assert_close(pads_t, ref_t, rtol=0, atol=1e-12)  # pads ignored exactly


@pytest.mark.parametrize("train", [True, False])
def test_previous_batch_norm_lm_gives_the_same_logits_alone_and_padded_among_others(train):
    model = lm("batch_prev")
    assert sum(isinstance(m, NP.PrevBatchNorm) for m in model.modules()) == 2 * 2 + 1  # every norm swapped
    seq = lines(12)[0]
    x1, _, m1 = pad_batch([seq])
    xp = torch.cat([x1, torch.full((1, 20), PAD)], 1)  # pads only
    xb, _, mb = pad_batch([lines(30, seed=2)[0], seq, lines(5, seed=3)[0]])  # beside other lines
    alone = logits(model, x1, m1, train)[0]
    torch.testing.assert_close(logits(model, xp, xp != PAD, train)[0, :11], alone, rtol=0, atol=1e-12)
    torch.testing.assert_close(logits(model, xb, mb, train)[1, :11], alone, rtol=0, atol=1e-12)
    # while the same weights with BN over its own batch (masked) do depend on the neighbours in train mode
    if train:
        own = lm("batch_masked")
        own.load_state_dict({k: v for k, v in model.state_dict().items() if "prev_" not in k})
        moved = logits(own, xb, mb, True)[1, :11] - logits(own, x1, m1, True)[0]
        assert moved.abs().max() > 1e-3


def test_masked_batchnorm_lm_ignores_what_sits_in_the_pads():
    x, _, mask = pad_batch(lines(9, 25, 14))
    x2 = x.clone()
    x2[~mask] = torch.randint(1, V, (int((~mask).sum()),))  # other token ids at pad positions, same mask
    a, b = lm("batch_masked"), lm("batch_masked")
    a.train()
    b.train()
    with torch.no_grad():
        ya, yb = a(x, pad_mask=mask), b(x2, pad_mask=mask)
    assert torch.equal(ya[mask], yb[mask])
    for ma, mb in zip(a.modules(), b.modules()):
        if isinstance(ma, TokenBatchNorm):
            assert torch.equal(ma.running_mean, mb.running_mean) and torch.equal(
                ma.running_var, mb.running_var
            )
    # while counting pads, their content moves the statistics
    c, d = lm("batch"), lm("batch")
    with torch.no_grad():
        assert not torch.allclose(c.train()(x, pad_mask=mask)[mask], d.train()(x2, pad_mask=mask)[mask])


@pytest.mark.parametrize("norm", ["layer", "batch", "batch_masked", "batch_prev", "power"])
def test_future_leak_only_through_batch_statistics(norm):
    model = lm(norm, warmup=0)
    x = torch.stack(lines(10, 10, 10))
    full = torch.ones_like(x, dtype=torch.bool)
    x2 = x.clone()
    x2[0, -1] = x2[0, -1] % (V - 1) + 1  # change only the last token of line 0
    for train in (True, False):
        before = logits(model, x, full, train)[0, :-1]
        after = logits(model, x2, full, train)[0, :-1]
        change = float((after - before).abs().max())
        if train and norm in ("batch", "batch_masked"):
            assert change > 1e-4, change  # earlier outputs saw a later token
        else:
            assert change == 0.0, change  # causal (and the previous batch's statistics): exactly unchanged


def test_scratch_mode_and_token_loss_leave_no_trace_and_ignore_grouping_for_layernorm():
    model = lm("batch_masked").eval()
    ls = lines(*range(6, 30, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    NP.token_loss(model, NP.line_batches(ls, 3, "random"), "cpu", train_mode=True)
    assert not model.training
    assert all(
        torch.equal(before[k], v) for k, v in model.state_dict().items()
    )  # running statistics untouched
    ln = lm("layer")
    a = NP.token_loss(ln, NP.line_batches(ls, 3, "random"), "cpu", train_mode=True)
    b = NP.token_loss(ln, NP.line_batches(ls, 5, "sorted"), "cpu", train_mode=False)
    assert a == pytest.approx(b, rel=1e-12)
    # the same number as an independent per-token cross-entropy over every line alone
    tot = n = 0
    for line in ls:
        x, y, m = pad_batch([line])
        with torch.no_grad():
            tot += float(F.cross_entropy(ln.eval()(x, pad_mask=m)[0], y[0], reduction="sum"))
        n += y.numel()
    assert a == pytest.approx(tot / n, rel=1e-10)


def test_invariance_probe_numbers():
    cfg = {"pad_fracs": [0.5, 0.75], "inv_neighbours": [2], "inv_draws": 2}
    targets = torch.stack(lines(8, 8, 8))
    pool = lines(*range(5, 20), seed=7)
    res = {
        n: NP.invariance_probe(lm(n).float(), targets, pool, cfg, torch.Generator().manual_seed(0))
        for n in ("layer", "batch", "batch_masked", "batch_prev")
    }
    for e in res["layer"]["padding"] + res["layer"]["neighbours"]:
        assert e["rel"] < 1e-12
    assert [round(e["frac"], 3) for e in res["layer"]["padding"] if e["mode"] == "train"] == [0.5, 0.75]
    assert min(e["rel"] for e in res["batch"]["padding"] if e["mode"] == "train") > 1e-3
    assert max(e["rel"] for e in res["batch_masked"]["padding"]) < 1e-12
    assert min(e["rel"] for e in res["batch_masked"]["neighbours"] if e["mode"] == "train") > 1e-3
    assert (
        max(e["rel"] for n in res for e in res[n]["padding"] + res[n]["neighbours"] if e["mode"] == "eval")
        < 1e-12
    )
    assert (
        res["batch"]["leak"]["train"]["same_row_rel"] > 1e-4
        and res["layer"]["leak"]["train"]["same_row_rel"] == 0
    )
    # the previous batch's statistics: no dependence on pads, neighbours or later tokens in train mode either
    prev = res["batch_prev"]
    assert len([e for e in prev["padding"] + prev["neighbours"] if e["mode"] == "train"]) == 2 + 2
    assert max(e["rel"] for e in prev["padding"] + prev["neighbours"]) < 1e-12
    assert prev["leak"]["train"]["same_row_rel"] == prev["leak"]["train"]["other_rows_rel"] == 0


def test_stat_recorder_matches_hand_formula():
    bn = TokenBatchNorm(6, masked=True)
    with torch.no_grad():
        bn.running_mean.copy_(torch.linspace(-1, 1, 6))
        bn.running_var.copy_(torch.linspace(0.5, 2, 6))
    rm, rv = bn.running_mean.clone(), bn.running_var.clone()
    rec = NP.StatRecorder(torch.nn.Sequential(bn), every=1)
    x = torch.randn(3, 5, 6) * 1.5 + 0.3
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2, 2:] = False
    bn(x, mask)
    data = rec.close()["0"]
    real = x[mask]  # (12, 6)
    mu, var = real.mean(0), real.var(0, unbiased=False)
    assert data["n"] == [12]
    assert data["mean_dev"][0] == pytest.approx(float(((mu - rm) ** 2 / (rv + 1e-5)).mean().sqrt()), rel=1e-5)
    assert data["var_dev"][0] == pytest.approx(
        float((((var + 1e-5) / (rv + 1e-5) - 1) ** 2).mean().sqrt()), rel=1e-5
    )


def test_prev_batchnorm_uses_the_previous_batch_statistics_and_batchnorm1d_running_statistics():
    torch.manual_seed(0)
    d, eps = 6, 1e-5
    pbn = NP.PrevBatchNorm(d, eps=eps).double().train()
    with torch.no_grad():
        pbn.weight.uniform_(0.5, 1.5)
        pbn.bias.normal_(0, 0.3)
    w, b = pbn.weight.detach(), pbn.bias.detach()
    ref = (
        torch.nn.BatchNorm1d(d, eps=eps, momentum=0.1).double().train()
    )  # running statistics over real tokens

    def batch(scale, shift, pad_from):
        x = torch.randn(3, 7, d, dtype=torch.float64) * scale + shift
        mask = torch.ones(3, 7, dtype=torch.bool)
        mask[1, pad_from:] = False
        mask[2, pad_from + 2 :] = False
        x[~mask] = 50.0  # far off: must enter no statistic
        return x, mask

    x1, m1 = batch(torch.linspace(0.5, 2.0, d), torch.linspace(-1.0, 1.0, d), 3)
    x2, m2 = batch(torch.linspace(2.0, 0.7, d), torch.linspace(0.8, -0.4, d), 4)
    # batch 1: the initial statistics (mean 0, variance 1)
    y1 = pbn(x1, m1)
    torch.testing.assert_close(y1, x1 / (1 + eps) ** 0.5 * w + b, rtol=0, atol=1e-12)
    ref(x1[m1])
    # batch 2: batch 1's masked, biased statistics, computed by hand
    real1 = x1[m1]  # (n1, d), real tokens only
    mean1 = real1.sum(0) / real1.shape[0]
    var1 = ((real1 - mean1) ** 2).sum(0) / real1.shape[0]
    state = {k: v.clone() for k, v in pbn.state_dict().items()}  # after batch 1
    y2 = pbn(x2, m2)
    torch.testing.assert_close(y2, (x2 - mean1) / torch.sqrt(var1 + eps) * w + b, rtol=0, atol=1e-12)
    fb = F.batch_norm(x2.reshape(-1, d), mean1, var1, w, b, training=False, eps=eps).reshape(x2.shape)
    torch.testing.assert_close(y2, fb, rtol=0, atol=1e-12)
    own = F.batch_norm(x2[m2], None, None, w, b, training=True, eps=eps)  # batch 2's own statistics
    assert (y2[m2] - own).abs().max() > 1e-2  # not what masked BN over its own batch gives
    ref(x2[m2])
    torch.testing.assert_close(pbn.running_mean, ref.running_mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(pbn.running_var, ref.running_var, rtol=0, atol=1e-12)
    real2 = x2[m2]
    torch.testing.assert_close(pbn.prev_mean, real2.mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(pbn.prev_var, real2.var(0, unbiased=False), rtol=0, atol=1e-12)
    # no leak: a later token of batch 2 changed, from the same state, moves no other output
    after2 = {k: v.clone() for k, v in pbn.state_dict().items()}
    pbn.load_state_dict(state)
    x2b = x2.clone()
    x2b[0, -1] += 3.0
    y2b = pbn(x2b, m2)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[0, -1] = False
    assert torch.equal(y2b[keep], y2[keep]) and not torch.equal(y2b[0, -1], y2[0, -1])
    pbn.load_state_dict(after2)
    # eval mode: the running statistics, a per-token map; buffers untouched
    pbn.eval()
    ye = pbn(x2, m2)
    fe = F.batch_norm(x2.reshape(-1, d), ref.running_mean, ref.running_var, w, b, training=False, eps=eps)
    torch.testing.assert_close(ye, fe.reshape(x2.shape), rtol=0, atol=1e-12)
    assert all(torch.equal(v, after2[k]) for k, v in pbn.state_dict().items())


# ---------------------------------------------------------------------------- PowerNorm
def test_group_scaling_is_rms_norm_per_group():
    x = torch.randn(2, 3, 12)
    ref = F.rms_norm(x.view(2, 3, 4, 3), (3,), eps=1e-5).view(2, 3, 12)
    torch.testing.assert_close(group_scaling(x, 4, 1e-5), ref)


def test_powernorm_forward_warmup_then_running_statistic_and_eval():
    torch.manual_seed(0)
    pn = PowerNorm(8, group_num=2, warmup_iters=2, alpha_fwd=0.9)
    with torch.no_grad():
        pn.weight.uniform_(0.5, 1.5)
        pn.bias.normal_()
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    phi = torch.ones(8)
    for it in (1, 2, 3, 4):
        x = torch.randn(2, 5, 8) * it
        z = group_scaling(x, 2, 1e-5)
        psi2 = z[mask].pow(2).mean(0)  # quadratic mean over real tokens, no centring
        used = psi2 if it <= 2 else phi.clone()
        y = pn(x, mask)
        torch.testing.assert_close(y, z / torch.sqrt(used + 1e-5) * pn.weight + pn.bias)
        if it < 2:
            phi = phi * (it - 1) / it + psi2 / it
        phi = 0.9 * phi + 0.1 * psi2
        torch.testing.assert_close(pn.running_phi, phi)
    # after warm-up the forward pass is per token: pads and neighbours change nothing
    x = torch.randn(2, 5, 8)
    y_all = pn(x, mask)
    pn.running_phi.copy_(phi)
    torch.testing.assert_close(pn(x[:1, :2], mask[:1, :2]), y_all[:1, :2])
    pn.eval()
    z = group_scaling(x, 2, 1e-5)
    torch.testing.assert_close(pn(x), z / torch.sqrt(pn.running_phi + 1e-5) * pn.weight + pn.bias)


def test_powernorm_approximate_backward_matches_its_formula():
    torch.manual_seed(1)
    pn = PowerNorm(4, group_num=1, warmup_iters=0, alpha_bkw=0.8)
    with torch.no_grad():
        pn.weight.copy_(torch.tensor([0.5, 1.0, 1.5, 2.0]))
        pn.ema_gz.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
    x = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    gy = torch.randn(2, 3, 4)
    nu0 = pn.ema_gz.clone()
    phi0 = pn.running_phi.clone()
    pn(x, mask).backward(gy)
    with torch.no_grad():
        s = group_scaling(x, 1, 1e-5)  # (2, 3, 4)
        z = s / torch.sqrt(phi0 + 1e-5)  # forward used the running statistic (no warm-up)
        psi2 = s[mask].pow(2).mean(0)
        w = mask[..., None].to(x.dtype)
        approx = (gy * pn.weight - 0.2 * nu0 * z) * w
        g_s = approx / torch.sqrt(psi2 + 1e-5)  # gradient at the group-scaled input
    # chain through group scaling by autograd on an independent copy
    xs = x.detach().clone().requires_grad_(True)
    group_scaling(xs, 1, 1e-5).backward(g_s)
    torch.testing.assert_close(x.grad, xs.grad)
    torch.testing.assert_close(pn.ema_gz, nu0 + (approx * z).sum((0, 1)) / mask.sum())
    torch.testing.assert_close(pn.weight.grad, (gy * z).sum((0, 1)))
    assert torch.all(x.grad[~mask] == 0)  # nothing flows into pads


def arms(g, part, data=None):
    """(placement, batch, norm) -> sorted seeds, over one part of a grid."""
    out = {}
    for c in g:
        if c["part"] == part and (data is None or c["data"] == data):
            out.setdefault((c["placement"], c["batch"], c["norm"]), []).append(c["seed"])
    return {k: sorted(v) for k, v in out.items()}


def test_quick_profile_grid_is_the_declared_arms_with_their_null_pairs():
    p = EXP.profiles["quick"]
    g = EXP.grid(p)
    seeds = sorted(p["seeds"])
    assert arms(g, "lines") == {tuple(a): seeds for a in p["line_arms"]}
    assert arms(g, "windows") == {tuple(a): seeds for a in p["window_arms"]}
    assert {c["data"] for c in g if c["part"] == "lines"} == {"lines"}
    assert {c["data"] for c in g if c["part"] == "windows"} == {"windows"}
    null = [c for c in g if c["part"] == "null"]
    assert len(null) == len(p["null_cells"]) * len(seeds) and {c["norm"] for c in null} == {"layer"}
    assert {(c["data"], c["placement"], c["batch"]) for c in null} == {tuple(x) for x in p["null_cells"]}
    assert {c["seed"] for c in null} == {s + 1000 for s in seeds}
    # each null run is its LN arm's config at seed + 1000, nothing else changed
    by_key = {
        (c["data"], c["placement"], c["batch"], c["norm"], c["seed"]): c for c in g if c["part"] != "mlp"
    }
    for c in null:
        twin = by_key[(c["data"], c["placement"], c["batch"], "layer", c["seed"] - 1000)]
        assert {**twin, "part": "null", "seed": c["seed"]} == c
    assert "inv_T0" not in by_key[("windows", "pre", 4, "layer", 0)]  # no probes on windows
    assert len([c for c in g if c["part"] == "mlp"]) == len(seeds)
    assert not any("kind" in c for c in g)


def test_default_profile_has_small_batch_post_norm_window_arms_and_a_null_pair_per_compared_ln_cell():
    p = EXP.profiles["default"]
    g = EXP.grid(p)
    ln, win = arms(g, "lines"), arms(g, "windows")
    assert len(p["seeds"]) == len(set(p["seeds"])) == 5 and p["steps"] >= 1500
    assert all(s == sorted(p["seeds"]) for s in [*ln.values(), *win.values()])
    assert {("pre", 2, n) for n in NORMS} <= set(ln)  # a genuinely small batch: 2 lines, every norm
    big = max(b for _, b, _ in ln)
    assert big >= 16 and {("pre", big, n) for n in NORMS} <= set(ln)  # (c) has its two batch sizes
    assert {("post", big, n) for n in ("layer", "batch", "batch_masked")} <= set(ln)  # the anchors' placement
    for pl in ("pre", "post"):  # (b) and (d) on windows at both placements
        assert {(pl, big, "layer"), (pl, big, "batch_masked")} <= set(win)
    assert ("pre", big, "batch_prev") in win
    # every cell where LN is compared with another arm has its null pair
    compared = {
        (data, pl, b)
        for data, a in (("lines", ln), ("windows", win))
        for pl, b, n in a
        if n != "layer" and (pl, b, "layer") in a
    }
    assert {("lines", "pre", 2), ("lines", "post", big), ("windows", "post", big)} <= compared
    null = {(c["data"], c["placement"], c["batch"]) for c in g if c["part"] == "null"}
    assert compared <= null
    assert {c["seed"] for c in g if c["part"] == "null"} == {s + 1000 for s in p["seeds"]}


@pytest.mark.parametrize(
    "change",
    [
        {"line_arms": [["mid", 4, "layer"]]},  # placement
        {"line_arms": [["pre", 0, "layer"]]},  # batch
        {"line_arms": [["pre", 2.5, "layer"]]},
        {"line_arms": [["pre", 4]]},  # not [placement, batch, norm]
        {"window_arms": [["pre", 4, "group"]]},  # unknown norm
        {"line_arms": [["pre", 4, "layer"], ["pre", 4, "batch"], ["pre", 4, "layer"]]},  # declared twice
        {"null_cells": [["lines", "post", 2]]},  # a null cell without an LN arm: no such cell
        {"null_cells": [["windows", "pre", 2]]},  # on lines only
        {"window_arms": [["pre", 4, "batch_masked"]], "null_cells": [["windows", "pre", 4]]},  # BN only there
        {"pad_fracs": [0.99]},
    ],
)
def test_grid_rejects_bad_arms_null_cells_and_pad_fractions(change):
    from tfclaims.nn.config import ConfigError

    EXP.grid({**EXP.profiles["quick"], "null_cells": []})  # the quick profile itself is fine
    with pytest.raises(ConfigError):
        EXP.grid({**EXP.profiles["quick"], **change})


@pytest.mark.parametrize("name", ["quick", "default", "full"])
def test_every_profile_grid_builds_with_ln_only_null_pairs(name):
    p = EXP.profiles[name]
    g = EXP.grid(p)
    null = [c for c in g if c["part"] == "null"]
    assert null and {c["norm"] for c in null} == {"layer"}
    assert len(g) == (len(p["line_arms"]) + len(p["window_arms"]) + len(p["null_cells"]) + 1) * len(
        p["seeds"]
    )
