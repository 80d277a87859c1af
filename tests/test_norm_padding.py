"""norm_padding: whole-model padding invariance of LayerNorm, masked BatchNorm ignoring pads, the future leak of
BatchNorm in train mode, PowerNorm against its formulas, and the experiment's probes."""

import pytest
import torch
import torch.nn.functional as F

from tfclaims import batch_stats as NP
from tfclaims.data import PAD, pad_batch
from tfclaims.norms import TokenBatchNorm
from tfclaims.powernorm import PowerNorm, group_scaling
from tfclaims.registry import load

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


@pytest.mark.parametrize("norm", ["layer", "batch", "batch_masked", "power"])
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
        if train and norm.startswith("batch"):
            assert change > 1e-4, change  # earlier outputs saw a later token
        else:
            assert change == 0.0, change  # causal: exactly unchanged


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
        for n in ("layer", "batch", "batch_masked")
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


def test_grid_validates_and_quick_profile_grid_is_complete():
    p = EXP.profiles["quick"]
    g = EXP.grid(p)
    lm_lines = [c for c in g if c["part"] == "lines"]
    assert len(lm_lines) == len(p["norms"]) * len(p["batches"]) * len(p["seeds"]) * len(p["placements"])
    null = [c for c in g if c["part"] == "null"]
    assert {c["norm"] for c in null} == {"layer"} and len(null) == len(p["batches"]) * len(p["seeds"])
    assert {c["seed"] for c in null} == {s + 1000 for s in p["seeds"]}
    assert not any("kind" in c for c in g)
    from tfclaims.config import ConfigError

    with pytest.raises(ConfigError):
        EXP.grid({**p, "pad_fracs": [0.99]})
