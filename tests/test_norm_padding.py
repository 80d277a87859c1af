"""norm_padding: whole-model padding invariance of LayerNorm, masked BatchNorm ignoring pads, the future leak
of BatchNorm in train mode, BatchNorm with causal statistics against a loop over positions, the masked LM (its
input corruption, bidirectional attention, tied head), PowerNorm against its formulas, the experiment's probes
and its grid, staged learning-rate sweep included."""

import math

import pytest
import torch
import torch.nn.functional as F

from tfclaims.data.corpus import PAD, pad_batch
from tfclaims.harness.registry import load
from tfclaims.nn.config import ConfigError
from tfclaims.nn.models import n_params
from tfclaims.nn.norms import TokenBatchNorm

from experiments.norm_padding import analysis as view
from experiments.norm_padding import grid as G
from experiments.norm_padding import recipes as NP
from experiments.norm_padding.grid import NORMS
from experiments.norm_padding.powernorm import PowerNorm, group_scaling

EXP = load("norm_padding")
V = 20
MAXLEN = 16  # positions a CausalBatchNorm of the unit tests keeps statistics for


def lm(norm: str, seed: int = 0, warmup: int = 3, attn: str = "causal"):
    torch.manual_seed(seed)
    cfg = {
        "norm": norm,
        "attn": attn,
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


# ---------------------------------------------------------------------------- the norms in whole models
@pytest.mark.parametrize("attn", ["causal", "bidirectional"])
@pytest.mark.parametrize("train", [True, False])
def test_layernorm_lm_gives_the_same_logits_alone_and_padded_among_others(train, attn):
    model = lm("layer", attn=attn)
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
    for norm in ("batch", "batch_masked", "batch_causal"):
        model = lm(norm)
        ref_t, ref_e = logits(model, x1, m1, True)[0], logits(model, x1, m1, False)[0]
        pads_t = logits(model, xp, xp != PAD, True)[0, :11]
        beside_t = logits(model, xb, mb, True)[0, :11]
        # eval mode: running statistics, a per-token map; invariant to pads and neighbours
        torch.testing.assert_close(logits(model, xp, xp != PAD, False)[0, :11], ref_e, rtol=0, atol=1e-12)
        torch.testing.assert_close(logits(model, xb, mb, False)[0, :11], ref_e, rtol=0, atol=1e-12)
        assert (beside_t - ref_t).abs().max() > 1e-3, norm  # every train-mode BN depends on its neighbours
        if norm == "batch":
            assert (pads_t - ref_t).abs().max() > 1e-3  # pads enter the statistics
        else:
            torch.testing.assert_close(pads_t, ref_t, rtol=0, atol=1e-12)  # pads ignored exactly


@pytest.mark.parametrize("norm", ["batch_masked", "batch_causal"])
def test_masked_and_causal_batchnorm_lms_ignore_what_sits_in_the_pads(norm):
    x, _, mask = pad_batch(lines(9, 25, 14))
    x2 = x.clone()
    x2[~mask] = torch.randint(1, V, (int((~mask).sum()),))  # other token ids at pad positions, same mask
    a, b = lm(norm), lm(norm)
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


@pytest.mark.parametrize("norm", ["layer", "batch", "batch_masked", "batch_causal", "power"])
def test_future_leak_only_through_whole_batch_statistics(norm):
    model = lm(norm, warmup=0)
    x = torch.stack(lines(10, 10, 10))
    full = torch.ones_like(x, dtype=torch.bool)
    x2 = x.clone()
    x2[0, -1] = x2[0, -1] % (V - 1) + 1  # change only the last token of line 0
    for train in (True, False):
        before, after = logits(model, x, full, train), logits(model, x2, full, train)
        earlier = float((after[:, :-1] - before[:, :-1]).abs().max())  # every line's earlier outputs
        others_last = float((after[1:, -1] - before[1:, -1]).abs().max())  # the other lines at that position
        if train and norm in ("batch", "batch_masked"):
            assert earlier > 1e-4, earlier  # earlier outputs saw a later token
        else:
            assert earlier == 0.0, earlier  # causal attention (and causal statistics): exactly unchanged
        if train and norm != "layer" and norm != "power":
            # every train-mode BN sees the changed token in the other lines' statistics at its own position
            assert others_last > 1e-6, others_last
        else:
            assert others_last == 0.0, others_last


# ---------------------------------------------------------------------------- BatchNorm with causal
# statistics
def causal_reference(x, mask, w, b, eps):
    """An independent CausalBatchNorm (train mode), one position at a time: position t of every line is
    F.batch_norm's output over the real tokens at positions <= t of all lines (pads: zeros, never read)."""
    B, T, d = x.shape
    pos = torch.arange(T).expand(B, T)
    zero = torch.zeros(d, dtype=x.dtype)
    rows = {}
    for t in range(T):
        keep = mask[:, : t + 1]
        seen = x[:, : t + 1][keep]  # (n, d): the real tokens at positions <= t, line by line
        y = F.batch_norm(seen, None, None, w, b, training=True, eps=eps)[pos[:, : t + 1][keep] == t]
        for i, yi in zip(torch.nonzero(mask[:, t]).flatten().tolist(), y):
            rows[i, t] = yi
    return torch.stack([torch.stack([rows.get((i, t), zero) for t in range(T)]) for i in range(B)])


def causal_batch(seed, d, shift):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 7, d, generator=g, dtype=torch.float64) * torch.linspace(0.5, 2.0, d) + shift
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False  # lines of 3, 5 and 1 real tokens beside a full one
    mask[2, 5:] = False
    mask[3, 1:] = False
    x[~mask] = 50.0  # far off: must enter no statistic
    return x, mask


@pytest.mark.parametrize("masked", [True, False])
def test_causal_batchnorm_matches_a_loop_over_positions_forward_and_backward(masked):
    torch.manual_seed(0)
    d, eps = 6, 1e-5
    bn = NP.CausalBatchNorm(d, MAXLEN, eps=eps).double().train()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0, 0.3)
    x, mask = causal_batch(0, d, torch.linspace(-1.0, 1.0, d))
    if not masked:  # no mask: every position counts
        x, mask = torch.randn(3, 5, d, dtype=torch.float64) * 1.5 + 0.4, torch.ones(3, 5, dtype=torch.bool)
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    w2, b2 = (p.detach().clone().requires_grad_(True) for p in (bn.weight, bn.bias))
    y = bn(x1, mask if masked else None)
    ref = causal_reference(x2, mask, w2, b2, eps)
    torch.testing.assert_close(y[mask], ref[mask], rtol=0, atol=1e-12)
    # position 0 pools the first token of every line only: not the whole batch's statistics
    whole = F.batch_norm(x[mask], None, None, bn.weight.detach(), bn.bias.detach(), training=True, eps=eps)
    assert (y.detach()[mask] - whole).abs().max() > 1e-2
    # gradients through the statistics: the same as autograd through the loop
    g = torch.randn(x.shape, dtype=torch.float64) * mask[..., None]  # a loss on the real tokens only
    (y * g).sum().backward()
    (ref * g).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(bn.weight.grad, w2.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(bn.bias.grad, b2.grad, rtol=0, atol=1e-12)
    assert torch.all(x1.grad[~mask] == 0)  # nothing flows into pads
    # a token's gradient reaches every earlier-or-equal statistic it entered: the loop's too, not only its own
    alone = x.clone().requires_grad_(True)
    bn.zero_grad()
    bn(alone, mask if masked else None)[0, 0].sum().backward()
    assert alone.grad[1:, 0].abs().max() > 1e-6  # position 0's statistics pool line 0 with the others
    assert torch.all(alone.grad[:, 1:] == 0)  # later positions enter no statistic of position 0


def test_causal_batchnorm_keeps_running_prefix_statistics_per_position_and_eval_uses_them():
    torch.manual_seed(0)
    d, eps, T = 6, 1e-5, 7
    bn = NP.CausalBatchNorm(d, MAXLEN, eps=eps).double().train()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0, 0.3)
    ref = torch.nn.BatchNorm1d(d, eps=eps, momentum=0.1).double().train()  # fed the real tokens
    rec = NP.StatRecorder(torch.nn.Sequential(bn), every=1)
    pm, pv = torch.zeros(MAXLEN, d, dtype=torch.float64), torch.ones(MAXLEN, d, dtype=torch.float64)
    for seed, shift in ((0, torch.linspace(-1.0, 1.0, d)), (1, torch.linspace(0.8, -0.4, d))):
        x, mask = causal_batch(seed, d, shift)
        with torch.no_grad():
            bn(x, mask)
            ref(x[mask])
        for t in range(T):  # by hand: the real tokens at positions <= t, unbiased, momentum 0.1
            seen = x[:, : t + 1][mask[:, : t + 1]]
            pm[t] = 0.9 * pm[t] + 0.1 * seen.mean(0)
            pv[t] = 0.9 * pv[t] + 0.1 * seen.var(0, unbiased=True)
        real = x[mask]
        mean, var = bn.last_stats  # the whole batch's real tokens: what the statistics record reads
        torch.testing.assert_close(mean, real.mean(0), rtol=0, atol=1e-12)
        torch.testing.assert_close(var, real.var(0, unbiased=False), rtol=0, atol=1e-12)
        torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=0, atol=1e-12)
        torch.testing.assert_close(bn.running_var, ref.running_var, rtol=0, atol=1e-12)
        torch.testing.assert_close(bn.pos_mean, pm, rtol=0, atol=1e-12)
        torch.testing.assert_close(bn.pos_var, pv, rtol=0, atol=1e-12)
    assert torch.all(bn.pos_mean[T:] == 0) and torch.all(bn.pos_var[T:] == 1)  # positions never seen
    assert rec.close()["0"]["n"] == [int(causal_batch(s, d, 0.0)[1].sum()) for s in (0, 1)]
    # eval mode: each position with its own running statistics (a per-token map); buffers untouched
    bn.eval()
    state = {k: v.clone() for k, v in bn.state_dict().items()}
    x, mask = causal_batch(2, d, 0.3)
    with torch.no_grad():
        ye = bn(x, mask)
        for t in range(T):
            fe = F.batch_norm(x[:, t], pm[t], pv[t], bn.weight, bn.bias, training=False, eps=eps)
            torch.testing.assert_close(ye[:, t], fe, rtol=0, atol=1e-12)
        whole = F.batch_norm(x.reshape(-1, d), bn.running_mean, bn.running_var, bn.weight, bn.bias, eps=eps)
    assert (ye - whole.reshape(x.shape)).abs().max() > 1e-2  # not the whole batch's running statistics
    assert all(torch.equal(v, state[k]) for k, v in bn.state_dict().items())


def test_causal_batchnorm_skips_positions_whose_prefix_holds_one_token():
    bn = NP.CausalBatchNorm(3, 4).double().train()
    x = torch.randn(1, 3, 3, dtype=torch.float64)  # one line: position 0 pools a single token
    with torch.no_grad():
        bn(x)
    assert torch.all(bn.pos_mean[0] == 0) and torch.all(bn.pos_var[0] == 1)
    assert not torch.equal(bn.pos_mean[1], torch.zeros(3))


def test_causal_batchnorm_lm_sees_no_later_token_no_pads_but_its_neighbours_in_train_mode():
    model = lm("batch_causal")
    assert sum(isinstance(m, NP.CausalBatchNorm) for m in model.modules()) == 2 * 2 + 1  # every norm swapped
    seq = lines(12)[0]
    x1, _, m1 = pad_batch([seq])
    xp = torch.cat([x1, torch.full((1, 20), PAD)], 1)  # pads only
    xb, _, mb = pad_batch([lines(30, seed=2)[0], seq, lines(5, seed=3)[0]])  # beside other lines
    for train in (True, False):
        alone = logits(model, x1, m1, train)[0]
        torch.testing.assert_close(logits(model, xp, xp != PAD, train)[0, :11], alone, rtol=0, atol=1e-12)
        beside = logits(model, xb, mb, train)[1, :11]
        if train:  # the neighbours' tokens enter every position's statistics
            assert (beside - alone).abs().max() > 1e-3
        else:
            torch.testing.assert_close(beside, alone, rtol=0, atol=1e-12)
    # a line's last token changes no earlier output of any line, and the neighbour's output at its position
    xc = xb.clone()
    xc[1, 10] = xc[1, 10] % (V - 1) + 1
    a, b = logits(model, xb, mb, True), logits(model, xc, mb, True)
    assert torch.equal(a[:, :10], b[:, :10]) and (a[0, 10] - b[0, 10]).abs().max() > 1e-6


# ---------------------------------------------------------------------------- the masked LM
def test_mask_tokens_masks_real_tokens_only_at_about_the_rate_with_targets_where_masked():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, V, (200, 60), generator=g)
    lengths = torch.randint(5, 61, (200,), generator=g)
    real = torch.arange(60)[None] < lengths[:, None]
    x[~real] = PAD
    xm, y = NP.mask_tokens(x, real, 0.15, V, torch.Generator().manual_seed(1))
    hit = xm == V
    assert not (hit & ~real).any()  # pads are never masked
    assert torch.equal(xm[~hit], x[~hit])  # the other tokens are left as they are
    assert torch.equal(y[hit], x[hit]) and torch.all(y[~hit] == -1)  # targets: the originals, where masked
    assert float(hit.sum() / real.sum()) == pytest.approx(0.15, abs=0.015)
    # deterministic given the generator; another seed masks other tokens
    again = NP.mask_tokens(x, real, 0.15, V, torch.Generator().manual_seed(1))
    assert torch.equal(again[0], xm) and torch.equal(again[1], y)
    other = NP.mask_tokens(x, real, 0.15, V, torch.Generator().manual_seed(2))
    assert not torch.equal(other[0], xm)
    # without a mask every position may be masked, at the same rate
    xa, ya = NP.mask_tokens(x, None, 0.4, V, torch.Generator().manual_seed(3))
    assert float((xa == V).float().mean()) == pytest.approx(0.4, abs=0.02) and (xa[~real] == V).any()
    assert torch.equal(ya[xa == V], x[xa == V])
    assert NP.mask_tokens(x, real, 0.0, V, g)[0].equal(x)  # rate 0: nothing masked


def test_masked_lm_is_bidirectional_over_vocab_and_mask_token_with_a_tied_head():
    model = lm("layer", attn="bidirectional")
    assert isinstance(model, NP.MaskedLM) and isinstance(lm("layer"), NP.LM)
    tok = model.stack.tok.weight
    assert model.head.weight is tok and tuple(tok.shape) == (V + 1, 16)  # the vocabulary plus the mask id
    x = torch.stack(lines(10, 10, 10))
    x[:, 3] = V  # the mask token is a valid input
    full = torch.ones_like(x, dtype=torch.bool)
    x2 = x.clone()
    x2[0, -1] = x2[0, -1] % (V - 1) + 1
    out, out2 = logits(model, x, full, False), logits(model, x2, full, False)
    assert out.shape == (3, 10, V + 1)
    assert (out2[0, :-1] - out[0, :-1]).abs().max() > 1e-6  # an earlier output sees the later token
    assert torch.equal(out2[1:], out[1:])  # LN: no other line changes
    # the head reads the token embedding: a change of the embedding row of a token absent from the input (the
    # pad id) moves that token's logit and nothing else
    with torch.no_grad():
        tok[PAD] += 1.0
    moved = (logits(model, x, full, False) - out).abs().amax((0, 1))
    assert moved[PAD] > 1e-3 and moved[PAD + 1 :].max() == 0


@pytest.mark.parametrize("norm", ["batch", "batch_masked"])
def test_batchnorm_masked_lm_depends_on_its_batch_in_train_mode(norm):
    # the masked LM's BN has no later token to leak, but it does see its neighbours in train mode
    model = lm(norm, attn="bidirectional")
    assert not any(isinstance(m, NP.CausalBatchNorm) for m in model.modules())
    seq = lines(12)[0]
    x1, _, m1 = pad_batch([seq])
    xb, _, mb = pad_batch([seq, lines(30, seed=2)[0]])
    assert (logits(model, xb, mb, True)[0, :11] - logits(model, x1, m1, True)[0]).abs().max() > 1e-3
    torch.testing.assert_close(
        logits(model, xb, mb, False)[0, :11], logits(model, x1, m1, False)[0], rtol=0, atol=1e-12
    )


# ---------------------------------------------------------------------------- probes
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
        for n in ("layer", "batch", "batch_masked", "batch_causal")
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
    # causal statistics: no dependence on pads or later tokens, a dependence on the neighbours (train mode)
    causal = res["batch_causal"]
    assert len([e for e in causal["padding"] + causal["neighbours"] if e["mode"] == "train"]) == 2 + 2
    assert max(e["rel"] for e in causal["padding"]) < 1e-12
    assert min(e["rel"] for e in causal["neighbours"] if e["mode"] == "train") > 1e-3
    assert causal["leak"]["train"]["same_row_rel"] == causal["leak"]["eval"]["same_row_rel"] == 0
    # the other lines see the changed token at its own position only (their last): not a leak
    assert causal["leak"]["train"]["other_rows_rel"] > 1e-6 and causal["leak"]["eval"]["other_rows_rel"] == 0


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


# ---------------------------------------------------------------------------- the grid
def setting(c) -> str:
    return view.setting_of(c["data"], c["attn"])


def fixed(g, p):
    """The fixed-rate configs of a grid: the profile's rate and width on the fresh seeds."""
    return [
        c
        for c in g
        if c["part"] != "mlp"
        and c["seed"] not in p["selection_seeds"]
        and c["lr"] == p["lr"]
        and c["d_model"] == p["d_model"]
    ]


def arms(g, p, part):
    """(setting, placement, batch, norm) -> sorted seeds of one part's fixed-rate configs."""
    out = {}
    for c in fixed(g, p):
        if c["part"] == part:
            out.setdefault((setting(c), c["placement"], c["batch"], c["norm"]), []).append(c["seed"])
    return {k: sorted(v) for k, v in out.items()}


def sweep_of(g, p):
    """The sweep's configs of a grid: every config off the profile's rate or width, or on a selection seed."""
    fx = {id(c) for c in fixed(g, p)}
    return [c for c in g if c["part"] not in ("mlp", "null") and id(c) not in fx]


def test_quick_profile_grid_is_the_declared_arms_in_their_settings_with_their_null_pairs():
    p = EXP.profiles["quick"]
    g = EXP.grid(p)
    seeds = sorted(p["seeds"])
    assert arms(g, p, "lines") == {("lines", *a): seeds for a in p["line_arms"]}
    assert arms(g, p, "windows") == {("windows", *a): seeds for a in p["window_arms"]}
    assert arms(g, p, "encoder") == {tuple(a): seeds for a in p["enc_arms"]}
    for c in g:
        if c["part"] != "mlp":  # every LM config names its data and attention, as its setting says
            assert (c["data"], c["attn"]) == G.SETTINGS[setting(c)] and c["mask_rate"] == p["mask_rate"]
            assert c["part"] == "null" or c["part"] == G.PART[setting(c)]
    null = [c for c in g if c["part"] == "null"]
    assert len(null) == len(p["null_cells"]) * len(seeds) and {c["norm"] for c in null} == {"layer"}
    assert {(setting(c), c["placement"], c["batch"]) for c in null} == {tuple(x) for x in p["null_cells"]}
    assert {c["seed"] for c in null} == {s + 1000 for s in seeds}
    # each null run is its LN arm's config at seed + 1000, nothing else changed
    by_key = {
        (c["data"], c["attn"], c["placement"], c["batch"], c["norm"], c["seed"]): c
        for c in fixed(g, p)
        if c["part"] != "null"
    }
    for c in null:
        twin = by_key[(c["data"], c["attn"], c["placement"], c["batch"], "layer", c["seed"] - 1000)]
        assert {**twin, "part": "null", "seed": c["seed"]} == c
    assert "inv_T0" not in by_key[("windows", "causal", "pre", 4, "layer", 0)]  # no probes on windows
    assert "inv_T0" in by_key[("lines", "causal", "pre", 4, "layer", 0)]
    assert len([c for c in g if c["part"] == "mlp"]) == len(seeds)
    assert not any("kind" in c for c in g)
    assert len({str(sorted(c.items())) for c in g}) == len(g)  # no config twice


@pytest.mark.parametrize("name", ["quick", "default"])
def test_first_round_sweep_is_every_swept_arm_at_every_rate_on_the_selection_seeds_at_the_first_width(name):
    p = EXP.profiles[name]
    g = EXP.grid(p)
    sweep = sweep_of(g, p)
    assert len(sweep) == len(p["sweep_arms"]) * len(p["rates"]) * len(p["selection_seeds"])
    assert {c["seed"] for c in sweep} == set(p["selection_seeds"])
    assert {(setting(c), c["placement"], c["batch"], c["norm"]) for c in sweep} == {
        tuple(a) for a in p["sweep_arms"]
    }
    assert sorted({c["lr"] for c in sweep}) == sorted(p["rates"])
    assert {c["d_model"] for c in sweep} == {p["scales"][0]} == {p["d_model"]}
    # each is its arm's fixed-rate config at another rate and seed, run by its setting's part
    twins = {
        (setting(c), c["placement"], c["batch"], c["norm"]): c for c in fixed(g, p) if c["part"] != "null"
    }
    for c in sweep:
        twin = twins[setting(c), c["placement"], c["batch"], c["norm"]]
        assert c["part"] == G.PART[setting(c)] == twin["part"]
        assert c == {**twin, "lr": c["lr"], "seed": c["seed"]}


def bowl(cfg) -> float:
    """A swept run's eval-mode loss: lowest at its arm's best rate (per width), 0.1 nats per ×2 away."""
    best = {
        ("lines", "layer"): 1e-3,  # inside the first width's sweep
        ("lines", "batch"): 4e-4,  # inside it, at another rate
        ("lines", "batch_masked"): 1e-2,  # beyond its top: widened (up to rate_extend times)
        ("enc-windows", "layer"): 1e-3 if cfg["d_model"] == 32 else 5e-4,  # the second width: ×½
        ("enc-windows", "batch"): 1e-4 if cfg["d_model"] == 32 else 1e-5,  # beyond its bottom, at both widths
    }.get((setting(cfg), cfg["norm"]), 1e-3)  # the arms not swept: at the profile's rate
    return 2.5 + 0.1 * abs(math.log2(cfg["lr"] / best)) + 0.001 * cfg["seed"]


def grow(p, loss):
    """The grid grown as the runner grows it, an ok record made of every LM config of each round, until it
    stops changing: the rounds' grids."""
    rounds = [EXP.grid(p)]
    while len(rounds) < 10:
        done = [
            {
                "config": c,
                "status": "ok",
                "run_id": f"r{i}",
                "metrics": {"eval_mixed": loss(c), "init_loss": 4.2, "diverged_at": None},
            }
            for i, c in enumerate(rounds[-1])
            if c["part"] != "mlp"
        ]
        g = EXP.grid(p, done)
        if g == rounds[-1]:
            return rounds
        rounds.append(g)
    raise AssertionError("the grid kept growing")


def test_staged_sweep_runs_the_choice_on_fresh_seeds_and_sweeps_the_scaled_settings_at_the_next_width():
    p = {
        **EXP.profiles["quick"],
        "rates": [2.5e-4, 5e-4, 1e-3, 2e-3],
        "selection_seeds": [10, 11],
        "rate_factors": [0.25, 0.5, 1.0],
        "rate_extend": 1,
    }
    rounds = grow(p, bowl)
    final, sweep = rounds[-1], sweep_of(rounds[-1], p)

    def runs(st, norm, d, seeds):
        """lr -> sorted seeds of one swept arm's configs at width d on `seeds` (fixed-rate runs included)."""
        out = {}
        for c in final:
            here = c["part"] not in ("null", "mlp") and (setting(c), c["norm"], c["d_model"]) == (st, norm, d)
            if here and c["seed"] in seeds and c["placement"] == "pre" and c["batch"] == 4:
                assert c["part"] == G.PART[st]
                out.setdefault(c["lr"], []).append(c["seed"])
        return {lr: sorted(s) for lr, s in sorted(out.items())}

    sel, fresh = [10, 11], [0, 1]
    # the first width: the sweep (widened by one ×2 step where the choice sat at an end), then the choice on
    # the fresh seeds beside the fixed-rate cell (a choice at the profile's rate is that cell's runs, made
    # once)
    assert runs("lines", "layer", 32, sel) == {lr: sel for lr in p["rates"]}
    assert runs("lines", "layer", 32, fresh) == {1e-3: fresh}
    assert runs("lines", "batch", 32, sel) == {lr: sel for lr in p["rates"]}
    assert runs("lines", "batch", 32, fresh) == {5e-4: fresh, 1e-3: fresh}
    assert runs("lines", "batch_masked", 32, sel) == {lr: sel for lr in [*p["rates"], 4e-3]}
    assert runs("lines", "batch_masked", 32, fresh) == {1e-3: fresh, 4e-3: fresh}  # at the top after widening
    assert runs("enc-windows", "batch", 32, sel) == {lr: sel for lr in [1.25e-4, *p["rates"]]}
    assert runs("enc-windows", "batch", 32, fresh) == {1.25e-4: fresh, 1e-3: fresh}
    assert runs("enc-windows", "layer", 32, fresh) == {1e-3: fresh}
    # the next width: the settings in scale_settings only, around the first width's choice (× rate_factors)
    assert {setting(c) for c in sweep if c["d_model"] != 32} == set(p["scale_settings"]) == {"enc-windows"}
    assert runs("enc-windows", "layer", 48, sel) == {2.5e-4: sel, 5e-4: sel, 1e-3: sel}
    assert runs("enc-windows", "layer", 48, fresh) == {5e-4: fresh}
    wider = (1.5625e-5, 3.125e-5, 6.25e-5, 1.25e-4)
    assert runs("enc-windows", "batch", 48, sel) == {lr: sel for lr in wider}
    assert runs("enc-windows", "batch", 48, fresh) == {1.5625e-5: fresh}  # widened below the ×¼ end
    assert runs("lines", "layer", 48, sel + fresh) == {}
    # the rounds: the first width's choices need the sweep; the next width's sweep needs them
    assert {c["d_model"] for c in sweep_of(rounds[0], p)} == {32}
    assert not any(c["seed"] in fresh for c in sweep_of(rounds[0], p))
    assert len({str(sorted(c.items())) for c in final}) == len(final)  # no config twice
    assert fixed(final, p) == fixed(rounds[0], p)  # the fixed-rate cells never depend on the sweep


def test_default_profile_has_small_batch_post_norm_window_and_masked_lm_arms_and_a_null_pair_per_tuned_cell():
    p = EXP.profiles["default"]
    g = EXP.grid(p)
    ln, win, enc = arms(g, p, "lines"), arms(g, p, "windows"), arms(g, p, "encoder")
    assert len(p["seeds"]) == len(set(p["seeds"])) == 5 and p["steps"] >= 1500
    assert all(s == sorted(p["seeds"]) for s in [*ln.values(), *win.values(), *enc.values()])
    leak_free = ("layer", "batch_masked", "batch_causal")
    assert {("lines", "pre", 2, n) for n in leak_free} <= set(ln)  # a genuinely small batch: 2 lines
    big = max(b for _, _, b, _ in ln)
    assert big >= 16 and {("lines", "pre", big, n) for n in NORMS} <= set(ln)  # (c) has its two batch sizes
    assert {("lines", "post", big, n) for n in ("layer", "batch_masked")} <= set(ln)  # the anchors' placement
    assert {("windows", "pre", big, n) for n in leak_free} <= set(win)
    assert {("enc-windows", "pre", big, n) for n in ("layer", "batch")} <= set(enc)  # (b) and (d)
    assert {("enc-lines", "pre", big, n) for n in ("layer", "batch", "batch_masked")} <= set(enc)  # a-enc
    null = {(setting(c), c["placement"], c["batch"]) for c in g if c["part"] == "null"}
    assert {("lines", "pre", 2), ("lines", "pre", big), ("enc-windows", "pre", big)} <= null
    assert {c["seed"] for c in g if c["part"] == "null"} == {s + 1000 for s in p["seeds"]}
    # the sweep: 1.5 decades, ×2 apart, three selection seeds apart from the fresh ones
    rates = p["rates"]
    assert math.log10(rates[-1] / rates[0]) >= 1.5 - 1e-9 and p["lr"] in rates
    assert all(b / a == pytest.approx(2.0) for a, b in zip(rates, rates[1:]))
    assert len(p["selection_seeds"]) >= 3 and not set(p["selection_seeds"]) & set(p["seeds"])
    assert {a[0] for a in p["sweep_arms"]} == {"lines", "enc-windows"}
    assert p["scale_settings"] == ["lines", "enc-windows"]  # both settings at two widths
    # the second width has at least 4× the parameters of the first, in the causal and the masked LM
    c = {k: p[k] for k in ("n_layers", "n_heads", "max_len", "seq_len", "warmup")}
    for attn in ("causal", "bidirectional"):
        small, large = (
            n_params(NP.build_lm({**c, "d_model": d, "norm": "layer", "placement": "pre", "attn": attn}, 96))
            for d in p["scales"]
        )
        assert large >= 4 * small


@pytest.mark.parametrize(
    "change, match",
    [
        ({"line_arms": [["mid", 4, "layer"]]}, "line_arms"),  # placement
        ({"line_arms": [["pre", 0, "layer"]]}, "line_arms"),  # batch
        ({"line_arms": [["pre", 2.5, "layer"]]}, "line_arms"),
        ({"line_arms": [["pre", 4]]}, "line_arms"),  # not [placement, batch, norm]
        ({"window_arms": [["pre", 4, "group"]]}, "unknown norm"),
        ({"window_arms": [["pre", 4, "batch_prev"]]}, "unknown norm"),  # the previous design's arm is gone
        ({"line_arms": [["pre", 4, "layer"], ["pre", 4, "batch"], ["pre", 4, "layer"]]}, "twice"),
        ({"enc_arms": [["enc-windows", "pre", 4, "layer"]] * 2}, "twice"),
        ({"enc_arms": [["windows", "pre", 4, "layer"]]}, "enc_arms"),  # not a masked-LM setting
        ({"enc_arms": [["enc-windows", "pre", 4, "batch_prev"]]}, "unknown norm"),
        ({"null_cells": [["lines", "post", 2]]}, "no LN arm"),  # a null cell without an LN arm
        ({"null_cells": [["windows", "pre", 2]]}, "no LN arm"),  # on lines only
        ({"null_cells": [["text", "pre", 4]]}, "unknown setting"),
        ({"window_arms": [["pre", 4, "batch_masked"]], "null_cells": [["windows", "pre", 4]]}, "no LN arm"),
        ({"sweep_arms": [["lines", "pre", 2, "batch"]], "scale_settings": []}, "sweep_arms"),  # no such arm
        ({"sweep_arms": [["lines", "pre", 4, "batch_prev"]], "scale_settings": []}, "sweep_arms"),
        ({"sweep_arms": [["text", "pre", 4, "layer"]], "scale_settings": []}, "sweep_arms"),
        ({"scale_settings": ["enc-windows", "windows"]}, "scale_settings"),  # windows: no swept arm
        ({"scales": [48, 32]}, "scales"),  # not starting at d_model
        ({"scales": [32, 32]}, "scales"),
        ({"rates": [1e-3, 5e-4]}, "rates"),
        ({"selection_seeds": [0]}, "disjoint"),  # a selection seed among the fresh ones
        ({"pad_fracs": [0.99]}, "pad_fracs"),
    ],
)
def test_grid_rejects_bad_arms_null_cells_sweeps_and_pad_fractions(change, match):
    EXP.grid({**EXP.profiles["quick"], "null_cells": []})  # the quick profile itself is fine
    EXP.grid({**EXP.profiles["quick"], "sweep_arms": [["lines", "pre", 2, "layer"]], "scale_settings": []})
    with pytest.raises(ConfigError, match=match):
        EXP.grid({**EXP.profiles["quick"], **change})


@pytest.mark.parametrize("name", ["quick", "default", "full"])
def test_every_profile_grid_builds_with_ln_only_null_pairs_and_its_first_sweep_round(name):
    p = EXP.profiles[name]
    g = EXP.grid(p)
    null = [c for c in g if c["part"] == "null"]
    assert null and {c["norm"] for c in null} == {"layer"}
    fixed_rate = len(p["line_arms"]) + len(p["window_arms"]) + len(p["enc_arms"]) + len(p["null_cells"]) + 1
    first = len(p["sweep_arms"]) * len(p["rates"]) * len(p["selection_seeds"])
    assert len(g) == fixed_rate * len(p["seeds"]) + first
    EXP.declare(p)  # the declaration builds from the profile
