"""Power Normalization (Shen et al. 2020, "PowerNorm: Rethinking Batch Normalization in Transformers").

Called as norm(x, mask=None) on x (B, T, d) like the layers of `tfclaims.nn.norms`; mask (B, T) is True at
real tokens. Follows the authors' released `MaskPowerNorm`:

1. group scaling: each token is divided by the root mean square of its features within each of
   `group_num` groups (per token, no batch statistic; the authors pass group_num = number of heads);
2. no centring: the per-feature statistic is the quadratic mean psi^2 = mean(x^2) over real tokens;
3. forward: during the first `warmup_iters` training steps the batch's psi^2 divides the input; after
   that the running psi^2 (an exponential average with alpha_fwd) does, so the forward pass no longer
   depends on the rest of the batch; eval mode always uses the running psi^2;
4. backward: the gradient through the statistic is replaced by a running estimate nu,
   dL/dx = (g - (1 - alpha_bkw) * nu * z) / sqrt(psi_B^2 + eps), with g = gamma * dL/dy and z the
   normalised input; nu accumulates the mean of (that gradient * z) over real tokens.

Departures from the released code, both about padding: nu's update averages over real tokens only (the
code averages over every position), and the approximate gradient is zeroed at pad positions (the code
sends -(1 - alpha_bkw) * nu * z into pads, from where attention carries it back to real tokens).
"""

from __future__ import annotations

import torch
from torch import nn


def group_scaling(x: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """x (..., d) divided per token by the RMS of each group of d/groups features."""
    d = x.shape[-1]
    g = x.reshape(*x.shape[:-1], groups, d // groups)  # (..., groups, d/groups)
    return (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).reshape(x.shape)


class _PowerFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, psi2_fwd, psi2_batch, nu, w, alpha_bkw: float, eps: float):
        """x (N, d); psi2_fwd (d,) the statistic that divides; psi2_batch (d,); nu (d,) buffer; w (N, 1)
        real-token weights."""
        z = x * torch.rsqrt(psi2_fwd + eps)
        ctx.save_for_backward(z, psi2_batch, weight, nu, w)
        ctx.alpha_bkw, ctx.eps = alpha_bkw, eps
        return z * weight + bias

    @staticmethod
    def backward(ctx, gy):
        z, psi2_batch, weight, nu, w = ctx.saved_tensors
        g = gy * weight
        approx = (g - (1 - ctx.alpha_bkw) * nu * z) * w  # (N, d); zero at pads
        nu.add_((approx * z).sum(0) / w.sum().clamp_min(1))
        gx = approx * torch.rsqrt(psi2_batch + ctx.eps)
        return gx, (gy * z).sum(0), gy.sum(0), None, None, None, None, None, None


class PowerNorm(nn.Module):
    def __init__(
        self,
        d: int,
        *,
        group_num: int = 1,
        alpha_fwd: float = 0.9,
        alpha_bkw: float = 0.9,
        warmup_iters: int = 0,
        eps: float = 1e-5,
    ):
        super().__init__()
        if d % group_num:
            raise ValueError(f"d ({d}) must be divisible by group_num ({group_num})")
        self.group_num, self.alpha_fwd, self.alpha_bkw, self.warmup_iters, self.eps = (
            group_num,
            alpha_fwd,
            alpha_bkw,
            warmup_iters,
            eps,
        )
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.register_buffer("running_phi", torch.ones(d))  # running psi^2
        self.register_buffer("ema_gz", torch.zeros(d))  # nu
        self.register_buffer("iters", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = group_scaling(x, self.group_num, self.eps)
        if not self.training:
            return x * torch.rsqrt(self.running_phi + self.eps) * self.weight + self.bias
        flat = x.reshape(-1, x.shape[-1])  # (N, d)
        w = (
            mask.reshape(-1, 1)
            if mask is not None
            else torch.ones(flat.shape[0], 1, dtype=torch.bool, device=x.device)
        ).to(x.dtype)
        with torch.no_grad():
            psi2 = (flat.pow(2) * w).sum(0) / w.sum().clamp_min(1)  # (d,) over real tokens
            self.iters += 1
            it = int(self.iters)
            psi2_fwd = psi2 if it <= self.warmup_iters else self.running_phi.clone()
            if it < self.warmup_iters:  # the released code's warm-up: a cumulative average, then the EMA
                self.running_phi.mul_((it - 1) / it).add_(psi2 / it)
            self.running_phi.lerp_(psi2, 1 - self.alpha_fwd)
        y = _PowerFunction.apply(
            flat, self.weight, self.bias, psi2_fwd, psi2, self.ema_gz, w, self.alpha_bkw, self.eps
        )
        return y.view_as(x)
