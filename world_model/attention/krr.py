"""XAKER: kernel ridge-regression attention (seed 001), in the shared call shape
(queries, keys, values, mask) -> (out, weights) (docs/architecture.md, "The attention call shape").

    alpha = (K_kk + lam I)^-1 v,   out = K_qk alpha,   weights = K_qk (K_kk + lam I)^-1

The seed solves (K + lam I) alpha = v with K = K(q, k) and outputs K alpha; for q != k that K is
not symmetric, so conjugate gradients has no SPD system to solve. Kernel ridge regression fits
the values on the keys, (K_kk + lam I) alpha = v (K_kk = K(k, k) is PSD for all four kernels,
so with lam > 0 the system is SPD), and predicts at the queries with K_qk = K(q, k).

Pieces: the kernels (§1, in kernel_matrix.py), XSA (§2), the solve with PCG, preconditioners
and the Cholesky fallback (§3-§5, in krr_solver.py and krr_precond.py), the pure attention
function `krr_attention`, the operator module `KernelRidgeAttention` (holds lam, the XSA scale,
the preconditioner) and the multi-head module `MultiHeadKRRAttention` (Qkv projection, heads,
output projection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from world_model.attention.kernel_matrix import KERNELS, KrrKernel, kernel_matrix
from world_model.attention.krr_precond import (
    Basis,
    Preconditioner,
    PreconditionerName,
    make_preconditioner,
)
from world_model.attention.krr_solver import (
    Solve,
    bound,
    cholesky_spd_solve,
    rms_scale,
    solve_spd,
)
from world_model.options import check_choices

__all__ = [
    "XSA_MODES",
    "xsa_remove_self",
    "xsa_project",
    "krr_attention",
    "KRRConfig",
    "KernelRidgeAttention",
    "MultiHeadKRRConfig",
    "MultiHeadKRRAttention",
]

XSA_MODES = ("projection", "zero", "mask")
Solver = Literal["pcg", "cholesky"]


# --------------------------------------------------------------------------- XSA (§2)


def xsa_remove_self(K_qk: Tensor, scale: Tensor) -> Tensor:
    """XSA "zero" on the output kernel: K_ii <- (1 - scale) K_ii (seed 001 §2: set K_ii = 0;
    scale = 1 at init zeroes it). K_qk [..., N, N] -> [..., N, N]. The system matrix K_kk keeps
    its diagonal (zeroing it there makes K_kk - diag(K_kk) + lam I indefinite unless lam exceeds
    the removed diagonal; see the seed map)."""
    diag = torch.diagonal(K_qk, dim1=-2, dim2=-1)  # [..., N]
    return K_qk - torch.diag_embed(scale * diag)


def xsa_project(y: Tensor, v: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """XSA projection removal (seed 001 §2): y_i <- y_i - scale (y_i . v_i) / (v_i . v_i) v_i.

    y, v [..., N, dv] -> (y', c) with c [..., N, 1] the subtracted coefficients; with scale = 1,
    y'_i is orthogonal to v_i. A zero v_i has no direction: c_i = 0 there."""
    vv = (v * v).sum(-1, keepdim=True)  # [..., N, 1]
    nonzero = vv > 0
    c = torch.where(nonzero, (y * v).sum(-1, keepdim=True) / torch.where(nonzero, vv, 1.0), 0.0)
    c = scale * c
    return y - c * v, c


# --------------------------------------------------------------------------- attention


def _mask_rows(mask: Tensor, batch: torch.Size, n_q: int, n_k: int) -> Tensor:
    """mask (bool, broadcastable to [*batch, Nq, Nk]) -> [*batch, E, Nk] with E = 1 when every
    query sees the same keys (a key-padding mask) and E = Nq otherwise."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
    try:
        full = torch.broadcast_shapes(mask.shape, (*batch, n_q, n_k))
    except RuntimeError as err:
        raise ValueError(
            f"mask {tuple(mask.shape)} does not broadcast to {(*batch, n_q, n_k)}"
        ) from err
    if full != (*batch, n_q, n_k):
        raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to {(*batch, n_q, n_k)}")
    rows = 1 if mask.dim() < 2 or mask.shape[-2] == 1 else n_q
    return mask.expand(*batch, rows, n_k)


def krr_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    lam: Tensor,
    mask: Tensor | None = None,
    *,
    kernel: str = "exp",
    temp: float = 1.0,
    sigma: float = 1.0,
    normalize_inputs: bool = True,
    xsa: str | None = None,
    xsa_scale: Tensor | None = None,
    preconditioner: Preconditioner | None = None,
    solver: str = "pcg",
    tol: float = 1e-4,
    max_iter: int = 20,
    fallback: bool = True,
    rms_alpha: bool = False,
    rms_eps: float = 1e-6,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None, Solve]:
    """Kernel ridge-regression attention (seed 001 §3 with the SPD correction):

        alpha = bound((K_kk + lam I)^-1 v)  [optionally rms-normalised per key, §9 step 8]
        out   = K_qk alpha                   [XSA "zero"/"mask": K_qk's diagonal scaled away]
        out_i -= c_i v_i                     [XSA "projection"/"mask", §2]

    queries [..., Nq, d], keys [..., Nk, d], values [..., Nk, dv]; lam broadcastable to
    [..., 1, 1] (per head: [H, 1, 1]); mask bool broadcastable to [..., Nq, Nk] (True = may
    attend). Under a mask, query i regresses on its allowed keys only: the system
    (D_i K_kk D_i + lam I) alpha_i = D_i v with D_i = diag(mask_i) is exactly KRR on that key
    subset (alpha_i = 0 on the others). A key-padding mask (same keys for every query) costs one
    system; a query-dependent mask one system per query ([..., Nq, Nk, Nk] memory). A query with
    no allowed key gets out = 0, weights = 0.

    weights (need_weights): the linear map W with out = W values, W = K_qk S (K_kk + lam I)^-1
    (masked, with S the rms scaling and minus diag(c) under projection), by a Cholesky solve with
    Nq right-hand sides; it ignores the BOUND clamp and is exact where PCG stopped at tol.
    A preconditioner with heads > 1 expects the inputs' axis -3 to be the head axis.
    Returns (out [..., Nq, dv], weights [..., Nq, Nk] or None, the Solve record).
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if queries.dim() < 2 or keys.dim() < 2 or values.dim() < 2:
        raise ValueError("queries, keys and values must be at least 2-D: [..., N, d]")
    if queries.shape[-1] != keys.shape[-1] or keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            f"shapes: queries [..., Nq, d], keys [..., Nk, d], values [..., Nk, dv] expected; "
            f"got {tuple(queries.shape)}, {tuple(keys.shape)}, {tuple(values.shape)}"
        )
    n_q, n_k, dv = queries.shape[-2], keys.shape[-2], values.shape[-1]
    try:
        batch = torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"leading dims of queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, values "
            f"{tuple(values.shape)} do not broadcast"
        ) from err
    if xsa is not None:
        if xsa not in XSA_MODES:
            raise ValueError(f"xsa must be None or one of {XSA_MODES}, got {xsa!r}")
        if n_q != n_k:
            raise ValueError(
                f"XSA removes each token's own value: it needs self-attention (Nq == Nk), got "
                f"Nq = {n_q}, Nk = {n_k}"
            )
    q = queries.expand(*batch, n_q, queries.shape[-1])
    k = keys.expand(*batch, n_k, keys.shape[-1])
    v = values.expand(*batch, n_k, dv)
    kw = dict(temp=temp, sigma=sigma, normalize_inputs=normalize_inputs)
    K_kk = kernel_matrix(k, k, kernel, **kw)  # [..., Nk, Nk]
    K_qk = kernel_matrix(q, k, kernel, **kw)  # [..., Nq, Nk]
    scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, device=q.device)
    if xsa in ("zero", "mask"):
        K_qk = xsa_remove_self(K_qk, scale)

    # systems: [..., Nk, Nk] (no mask) or [..., E, Nk, Nk] (E = 1 or Nq mask rows)
    lam = torch.as_tensor(lam, dtype=q.dtype, device=q.device)
    if mask is None:
        K_sys, rhs, keep, head_dim, lam_sys = K_kk, v, None, -3, lam
    else:
        keep = _mask_rows(mask, batch, n_q, n_k).to(q.dtype)  # [..., E, Nk]
        K_sys = K_kk.unsqueeze(-3) * keep.unsqueeze(-1) * keep.unsqueeze(-2)  # [..., E, Nk, Nk]
        rhs = v.unsqueeze(-3) * keep.unsqueeze(-1)  # [..., E, Nk, dv]
        head_dim = -4
        lam_sys = lam.unsqueeze(-3) if lam.dim() >= 3 else lam  # [..., 1, 1] -> [..., 1, 1, 1]
    lam_full = lam_sys.expand(*K_sys.shape[:-2], 1, 1)  # [..., (E,) 1, 1]
    precondition = None
    if solver == "pcg" and preconditioner is not None:
        precondition = preconditioner.prepare(K_sys, lam_full, head_dim)
    solve = solve_spd(
        K_sys,
        rhs,
        lam_full,
        method=solver,
        precondition=precondition,
        tol=tol,
        max_iter=max_iter,
        fallback=fallback,
    )
    alpha = bound(solve.x)  # [..., (E,) Nk, dv]
    s = None
    if rms_alpha:
        s = rms_scale(alpha, rms_eps)  # [..., (E,) Nk, 1]: alpha <- rms_normalize(alpha)
        alpha = alpha * s
    if keep is not None:
        alpha = alpha * keep.unsqueeze(-1)  # exact zeros off the allowed keys
    if keep is None or keep.shape[-2] == 1:
        a = alpha if keep is None else alpha.squeeze(-3)
        out = K_qk @ a  # [..., Nq, dv]
    else:
        out = torch.einsum("...qk,...qkd->...qd", K_qk, alpha)
    coef = None
    if xsa in ("projection", "mask"):
        out, coef = xsa_project(out, v, scale)

    weights = None
    if need_weights:
        weights = _weights(K_sys, lam_full, K_qk, keep, s, coef)
    return out, weights, solve


def _weights(
    K_sys: Tensor,
    lam: Tensor,
    K_qk: Tensor,
    keep: Tensor | None,
    scale: Tensor | None,
    coef: Tensor | None,
) -> Tensor:
    """W with out = W v: W^T = D A^-1 S D K_qk^T per system (Cholesky), minus diag(c)."""
    s = scale if scale is not None else 1.0  # [..., (E,) Nk, 1]
    if keep is None:
        wt = cholesky_spd_solve(K_sys, s * K_qk.mT, lam)  # [..., Nk, Nq]
    elif keep.shape[-2] == 1:
        d = keep.squeeze(-2).unsqueeze(-1)  # [..., Nk, 1]
        s = s.squeeze(-3) if scale is not None else 1.0
        wt = d * cholesky_spd_solve(K_sys.squeeze(-3), s * d * K_qk.mT, lam.squeeze(-3))
    else:
        d = keep.unsqueeze(-1)  # [..., Nq, Nk, 1]
        rhs = s * d * K_qk.unsqueeze(-1)  # [..., Nq, Nk, 1]: query i's row as a column
        wt = (d * cholesky_spd_solve(K_sys, rhs, lam)).squeeze(-1).mT  # [..., Nk, Nq]
    weights = wt.mT
    if coef is not None:
        weights = weights - torch.diag_embed(coef.squeeze(-1))
    return weights


# --------------------------------------------------------------------------- modules


@dataclass
class KRRConfig:
    """Kernel ridge-regression attention operator (seed 001). Fields:

    heads: number of heads; > 1 means inputs are [..., heads, N, d] and lam, the XSA scale and
        the preconditioner's parameters are per head (the XSA scale is one scalar, as in §2).
    kernel: "exp" | "rbf" | "linear" | "cosine" (§1); temp (exp), sigma (rbf), normalize_inputs
        (exp: L2-normalise q and k first, the seed's default).
    lam_init, lam_eps: lam = softplus(raw) + lam_eps, raw initialised so lam = lam_init (§9 step
        4: 3.0); lam_eps > 0 keeps the system SPD.
    xsa: None (plain KRR) or "projection" | "zero" | "mask" (§2); needs self-attention.
    solver: "pcg" (with `fallback` to Cholesky when not converged) or "cholesky" (direct).
    preconditioner: "identity" | "diagonal" | "fast" | "cccp" (§5); rank, basis ("nystrom" |
        "random"), max_len (rows of the random basis), rebuild_every (cache), tyler_iters.
    tol, max_iter: PCG stops per system when |r| <= tol |v| or after max_iter (§4, §8: T = 20).
    rms_alpha, rms_eps: rms-normalise alpha per key (§9 step 8); off by default (it makes the
        output scale-free in v, which plain KRR is not).
    """

    heads: int = 1
    kernel: KrrKernel = "exp"
    temp: float = 1.0
    sigma: float = 1.0
    normalize_inputs: bool = True
    lam_init: float = 3.0
    lam_eps: float = 1e-6
    xsa: str | None = None
    solver: Solver = "pcg"
    preconditioner: PreconditionerName = "fast"
    rank: int = 32
    basis: Basis = "nystrom"
    max_len: int = 2048
    rebuild_every: int = 1
    tyler_iters: int = 1
    tol: float = 1e-4
    max_iter: int = 20
    fallback: bool = True
    rms_alpha: bool = False
    rms_eps: float = 1e-6

    def __post_init__(self):
        check_choices(self, "KRRConfig")
        checks = [
            (self.heads >= 1, f"heads must be >= 1, got {self.heads}"),
            (self.temp > 0, f"temp must be > 0, got {self.temp}"),
            (self.sigma > 0, f"sigma must be > 0, got {self.sigma}"),
            (self.lam_eps > 0, f"lam_eps must be > 0 (keeps the system SPD), got {self.lam_eps}"),
            (self.lam_init > self.lam_eps, f"lam_init must exceed lam_eps, got {self.lam_init}"),
            (
                self.xsa is None or self.xsa in XSA_MODES,
                f"xsa must be None or one of {XSA_MODES}, got {self.xsa!r}",
            ),
            (self.rank >= 1, f"rank must be >= 1, got {self.rank}"),
            (self.max_len >= 1, f"max_len must be >= 1, got {self.max_len}"),
            (self.rebuild_every >= 1, f"rebuild_every must be >= 1, got {self.rebuild_every}"),
            (self.tyler_iters >= 1, f"tyler_iters must be >= 1, got {self.tyler_iters}"),
            (0 <= self.tol < 1, f"tol must be in [0, 1), got {self.tol}"),
            (self.max_iter >= 1, f"max_iter must be >= 1, got {self.max_iter}"),
            (self.rms_eps > 0, f"rms_eps must be > 0, got {self.rms_eps}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"KRRConfig: {message}")


class KernelRidgeAttention(nn.Module):
    """The KRR attention operator with the shared call shape: holds lam (per head), the XSA
    scale (nn.Parameter(ones(1)), §2) and the preconditioner; calls :func:`krr_attention`.

        out, weights = op(queries, keys, values, mask=None, need_weights=False)

    weights is None unless need_weights (it costs a solve with Nq right-hand sides).
    `last_solve` keeps the latest Solve record (detached) for diagnostics."""

    def __init__(self, config: KRRConfig):
        super().__init__()
        self.config = config
        raw = math.log(math.expm1(config.lam_init - config.lam_eps))  # softplus^-1
        self.lam_raw = nn.Parameter(torch.full((config.heads,), raw))
        self.xsa_scale = nn.Parameter(torch.ones(1)) if config.xsa is not None else None
        self.preconditioner = make_preconditioner(
            config.preconditioner,
            heads=config.heads,
            rank=config.rank,
            basis=config.basis,
            max_len=config.max_len,
            rebuild_every=config.rebuild_every,
            tyler_iters=config.tyler_iters,
        )
        self.last_solve: Solve | None = None

    def lam(self) -> Tensor:
        """lam = softplus(raw) + eps per head: [heads]."""
        return F.softplus(self.lam_raw) + self.config.lam_eps

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        cfg = self.config
        heads_axis = cfg.heads > 1
        if heads_axis and (keys.dim() < 3 or keys.shape[-3] != cfg.heads):
            raise ValueError(
                f"KernelRidgeAttention has {cfg.heads} heads: keys must be [..., {cfg.heads}, "
                f"N, d], got {tuple(keys.shape)}"
            )
        lam = self.lam()  # krr_attention takes it in the queries' dtype
        lam = lam.view(-1, 1, 1) if heads_axis else lam.view(1, 1)
        out, weights, solve = krr_attention(
            queries,
            keys,
            values,
            lam,
            mask,
            kernel=cfg.kernel,
            temp=cfg.temp,
            sigma=cfg.sigma,
            normalize_inputs=cfg.normalize_inputs,
            xsa=cfg.xsa,
            xsa_scale=self.xsa_scale.to(queries.dtype) if self.xsa_scale is not None else None,
            preconditioner=self.preconditioner,
            solver=cfg.solver,
            tol=cfg.tol,
            max_iter=cfg.max_iter,
            fallback=cfg.fallback,
            rms_alpha=cfg.rms_alpha,
            rms_eps=cfg.rms_eps,
            need_weights=need_weights,
        )
        self.last_solve = solve.detached()
        return out, weights


@dataclass
class MultiHeadKRRConfig:
    """Multi-head KRR attention: dim (model width, divisible by heads), heads, bias (of the
    projections), krr (the operator's config; its heads must equal heads, default: KRRConfig
    with these heads)."""

    dim: int
    heads: int = 4
    bias: bool = False
    krr: KRRConfig | None = field(default=None)

    def __post_init__(self):
        if self.dim < 1 or self.heads < 1 or self.dim % self.heads != 0:
            raise ValueError(
                f"MultiHeadKRRConfig: dim ({self.dim}) must be a positive multiple of heads "
                f"({self.heads})"
            )
        if self.krr is None:
            self.krr = KRRConfig(heads=self.heads)
        elif self.krr.heads != self.heads:
            raise ValueError(
                f"MultiHeadKRRConfig: krr.heads ({self.krr.heads}) must equal heads ({self.heads})"
            )


class MultiHeadKRRAttention(nn.Module):
    """x [B, Nq, dim] (and context [B, Nk, dim] for cross-attention; None = self-attention)
    -> (y [B, Nq, dim], weights [B, H, Nq, Nk] or None): q from x, k and v from the context,
    split into heads, :class:`KernelRidgeAttention`, heads merged, output projection (§9 steps
    1 and 10). mask: bool [B, Nq, Nk] or [B, 1, Nk] (or with a head axis [B, H, ., Nk])."""

    def __init__(self, config: MultiHeadKRRConfig):
        super().__init__()
        self.config = config
        self.to_q = nn.Linear(config.dim, config.dim, bias=config.bias)
        self.to_kv = nn.Linear(config.dim, 2 * config.dim, bias=config.bias)
        self.to_out = nn.Linear(config.dim, config.dim, bias=config.bias)
        self.attend = KernelRidgeAttention(config.krr)

    def _split(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.config.heads, -1).transpose(1, 2)  # [B, H, N, dh]

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        cfg = self.config
        if x.dim() != 3 or x.shape[-1] != cfg.dim:
            raise ValueError(f"x must be [B, N, {cfg.dim}], got {tuple(x.shape)}")
        if context is not None:
            if cfg.krr.xsa is not None:
                raise ValueError("XSA removes each token's own value: use it for self-attention")
            if context.dim() != 3 or context.shape[-1] != cfg.dim or context.shape[0] != x.shape[0]:
                raise ValueError(
                    f"context must be [{x.shape[0]}, N, {cfg.dim}], got {tuple(context.shape)}"
                )
        src = x if context is None else context
        q = self._split(self.to_q(x))  # [B, H, Nq, dh]
        k, v = (self._split(t) for t in self.to_kv(src).chunk(2, dim=-1))  # [B, H, Nk, dh]
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # [B, 1, ., Nk]
        out, weights = self.attend(q, k, v, mask=mask, need_weights=need_weights)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], cfg.dim)  # [B, Nq, dim]
        return self.to_out(out), weights
