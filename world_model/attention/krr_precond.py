"""Preconditioners for (K + lam I) x = v (seed 001 §5): each applies an SPD approximation of
A^-1 = (K + lam I)^-1, which is what PCG needs (seed 001 §6: P approximates A^-1).

The seed's diagonal and "fast" formulas, P(r) = d * r and P(r) = d * r + U (U^T r) with
d ~ diag(A), approximate A itself; applied as written they multiply the residual by something
like A, which squares the conditioning problem instead of removing it. Here each builds an
approximation of A and applies its *inverse*: Jacobi divides by the diagonal, the low-rank plus
diagonal approximation D + U U^T is inverted by Woodbury. The seed's CCCP section mixes a d x d
covariance with length-n residuals; here Tyler's scatter is estimated in R^n from the n
normalised columns of A, so Sigma^-1/2 acts on length-n residuals (see TylerPreconditioner).

Every preconditioner is built from K.detach(): it is a fixed linear operator for one solve, the
solution does not depend on it, and the backward passes of eigh / pivoted Cholesky are unstable
at clustered spectra or rank deficiency. Its own parameters (scale, importance) do receive
gradients through the unrolled PCG iterations.

Layout: systems are [..., H, n, n] (head axis at head_dim = -3, counted with the matrix's two
trailing axes) or [..., H, E, n, n] (head_dim = -4) when an extra per-query axis E is present.
Per-head parameters broadcast over that head axis; with heads = 1 they broadcast over anything.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from geometry.sphere import normalize

__all__ = [
    "PRECONDITIONERS",
    "Preconditioner",
    "IdentityPreconditioner",
    "DiagonalPreconditioner",
    "LowRankPreconditioner",
    "TylerPreconditioner",
    "make_preconditioner",
    "pivoted_cholesky",
    "woodbury_factor",
    "woodbury_apply",
    "tyler_scatter",
]

PreconditionerName = Literal["identity", "diagonal", "fast", "cccp"]
Basis = Literal["nystrom", "random"]
PRECONDITIONERS: tuple[str, ...] = typing.get_args(PreconditionerName)
BASES: tuple[str, ...] = typing.get_args(Basis)
SOFTPLUS_INV_ONE = math.log(math.e - 1.0)  # softplus(SOFTPLUS_INV_ONE) = 1


# --------------------------------------------------------------------------- pure functions


@torch.no_grad()
def pivoted_cholesky(K: Tensor, rank: int) -> Tensor:
    """Greedy partial Cholesky K ~ L L^T (max remaining diagonal as pivot): K [..., n, n]
    symmetric PSD -> L [..., n, min(rank, n)], O(n rank^2). diag(K - L L^T) >= 0 is the part it
    leaves out; exact (to rounding) once min(rank, n) >= rank(K). Columns whose pivot falls
    below n eps max diag(K) (rank exhausted) are 0, never a division by ~0. Returns a constant
    (no gradient): it builds preconditioners, which are fixed operators."""
    n = K.shape[-1]
    r = min(rank, n)
    remaining = torch.diagonal(K, dim1=-2, dim2=-1).clone()  # [..., n]
    floor = n * torch.finfo(K.dtype).eps * remaining.amax(dim=-1, keepdim=True)  # [..., 1]
    L = K.new_zeros(*K.shape[:-2], n, r)  # [..., n, r]
    for k in range(r):
        piv = remaining.argmax(dim=-1, keepdim=True)  # [..., 1]
        d_piv = remaining.gather(-1, piv)  # [..., 1]
        row = piv.unsqueeze(-1).expand(*piv.shape[:-1], 1, n)
        col = K.gather(-2, row).squeeze(-2)  # [..., n]  = K[:, piv] (K symmetric)
        if k > 0:
            L_piv = L[..., :k].gather(-2, row[..., :k]).squeeze(-2)  # [..., k]  = L[piv, :k]
            col = col - (L[..., :k] @ L_piv.unsqueeze(-1)).squeeze(-1)
        keep = d_piv > floor
        col = torch.where(keep, col / d_piv.clamp_min(torch.finfo(K.dtype).tiny).sqrt(), 0.0)
        L[..., k] = col
        remaining = (remaining - col * col).clamp_min(0.0)
    return L


def woodbury_factor(D: Tensor, U: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Factor M = D + U U^T for applying M^-1 (Woodbury identity):

        M^-1 = D^-1 - D^-1 U (I + U^T D^-1 U)^-1 U^T D^-1.

    D [..., n, 1] > 0 (the diagonal), U [..., n, r]. Returns (D^-1, U, chol(I + U^T D^-1 U)),
    the r x r core being SPD with eigenvalues >= 1."""
    d_inv = 1.0 / D  # [..., n, 1]
    r = U.shape[-1]
    eye = torch.eye(r, dtype=U.dtype, device=U.device)
    core = eye + U.mT @ (d_inv * U)  # [..., r, r]
    return d_inv, U, torch.linalg.cholesky(core)


def woodbury_apply(r: Tensor, d_inv: Tensor, U: Tensor, core_chol: Tensor) -> Tensor:
    """(D + U U^T)^-1 r from :func:`woodbury_factor`'s output: r [..., n, m] -> [..., n, m],
    O(n r m) per call."""
    y = d_inv * r  # [..., n, m]
    s = torch.cholesky_solve(U.mT @ y, core_chol)  # [..., r, m]
    return y - d_inv * (U @ s)


def tyler_scatter(samples: Tensor, iters: int) -> Tensor:
    """Tyler's M-estimator of scatter (seed 001 §5 CCCP), samples [..., N, p] (rows) ->
    Sigma [..., p, p] with trace p, from Sigma_0 = I by the fixed-point (MM / CCCP) iteration

        Sigma_{t+1} = (p / N) sum_i x_i x_i^T / (x_i^T Sigma_t^-1 x_i).

    The seed writes x_i^T Sigma_t x_i in the denominator; Tyler's estimator (the MLE of the
    angular central Gaussian, whose negative log-likelihood this iteration majorises and
    minimises) has the inverse. The scale of Sigma is not identified; it is fixed by the trace.
    For N > p samples in general position it converges to the unique fixed point; for N = p the
    fixed point is not unique and the iteration stops moving after one step."""
    p = samples.shape[-1]
    xt = samples.mT  # [..., p, N]
    sigma = torch.eye(p, dtype=samples.dtype, device=samples.device).expand(
        *samples.shape[:-2], p, p
    )
    for _ in range(iters):
        chol = torch.linalg.cholesky(sigma)
        quad = (xt * torch.cholesky_solve(xt, chol)).sum(dim=-2)  # [..., N] x_i^T Sigma^-1 x_i
        w = 1.0 / quad.clamp_min(torch.finfo(samples.dtype).tiny)
        # the formula's p / N and the symmetrisation's 1/2 cancel in the trace normalisation
        sigma = (xt * w.unsqueeze(-2)) @ samples  # [..., p, p]
        sigma = sigma + sigma.mT
        trace = torch.diagonal(sigma, dim1=-2, dim2=-1).sum(-1)[..., None, None]
        sigma = sigma * (p / trace)
    return sigma


# --------------------------------------------------------------------------- modules


class Preconditioner(nn.Module):
    """Base: `prepare(K, lam)` builds (or reuses) an approximation of (K + lam I)^-1 and returns
    the function r -> P r that :func:`pcg` takes.

    Cache (seed 001 §5 "Fast"): the last build is kept and reused until the step counter (bumped
    once per `prepare`, i.e. once per forward pass) reaches a multiple of `rebuild_every`, the
    system's shape / dtype / device / layout changes, or a parameter or buffer is re-allocated
    (data_ptr) or modified in place (its version counter: an optimizer step keeps data_ptr).
    `reset_cache()` forces a rebuild. A reused build was made from an earlier K: it is still SPD,
    so PCG still converges to the right answer, only possibly more slowly; reused tensors are
    detached, so only the forward pass that built them sends gradients to the parameters.
    rebuild_every = 1 (the default) rebuilds on every call.
    """

    def __init__(self, heads: int = 1, rebuild_every: int = 1):
        super().__init__()
        if heads < 1 or rebuild_every < 1:
            raise ValueError(
                f"preconditioner: heads and rebuild_every must be >= 1, got {heads}, "
                f"{rebuild_every}"
            )
        self.heads = heads
        self.rebuild_every = rebuild_every
        self.step = 0
        self.n_builds = 0
        self._cache: tuple[Tensor, ...] | None = None
        self._cache_key: tuple | None = None

    def build(self, K: Tensor, lam: Tensor, head_dim: int) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def apply(self, r: Tensor, cache: tuple[Tensor, ...]) -> Tensor:
        raise NotImplementedError

    def reset_cache(self) -> None:
        self._cache, self._cache_key = None, None

    def per_head(self, t: Tensor, head_dim: int) -> Tensor:
        """t [heads, *tail] -> a view that broadcasts against [..., H, E..., *tail] with the head
        axis at head_dim (counted with two trailing matrix axes); heads = 1: t[0]."""
        if self.heads == 1:
            return t[0]
        extra = -head_dim - 1 - (t.dim() - 1)
        return t.reshape(t.shape[0], *([1] * extra), *t.shape[1:])

    def _storage_key(self) -> tuple:
        tensors = list(self.parameters()) + list(self.buffers())
        return tuple((t.data_ptr(), t._version) for t in tensors)

    def prepare(
        self, K: Tensor, lam: Tensor | float, head_dim: int = -3
    ) -> Callable[[Tensor], Tensor]:
        if self.heads > 1 and (K.dim() < -head_dim or K.shape[head_dim] != self.heads):
            raise ValueError(
                f"preconditioner has {self.heads} heads: expected the kernel's axis {head_dim} "
                f"to be heads, got shape {tuple(K.shape)}"
            )
        lam = torch.as_tensor(lam, dtype=K.dtype, device=K.device)
        key = (tuple(K.shape), K.dtype, K.device, head_dim, self._storage_key())
        stale = self._cache is None or key != self._cache_key or self.step % self.rebuild_every == 0
        self.step += 1
        if stale:
            cache = self.build(K.detach(), lam.detach(), head_dim)
            self._cache = tuple(t.detach() for t in cache)
            self._cache_key = key
            self.n_builds += 1
        else:
            cache = self._cache
        return lambda r: self.apply(r, cache)

    @torch.no_grad()
    def matrix(self, K: Tensor, lam: Tensor | float, head_dim: int = -3) -> Tensor:
        """The dense P [..., n, n] (for tests and diagnostics): P applied to the identity."""
        apply = self.prepare(K, lam, head_dim)
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        return apply(eye.expand(K.shape))


class IdentityPreconditioner(Preconditioner):
    """P = I (seed 001 §5 "Identity"): plain CG."""

    def build(self, K, lam, head_dim):
        return ()

    def apply(self, r, cache):
        return r


class DiagonalPreconditioner(Preconditioner):
    """Jacobi: P = diag(1 / d), d = max(|s|, eps) (diag(K) + lam), s a learned per-head scale
    (seed 001 §5 "Diagonal", inverted: the seed's P(r) = d * r multiplies by ~diag(A); the
    seed's + eps floor is moved onto the scale, since diag(K) + lam > 0 already).

    diag(K) + lam > 0 already, so no softplus is needed. PCG's iterates are invariant under
    P -> c P for any c > 0, so the learned scale cannot change a PCG solve (tested); and for
    kernels with a constant diagonal (exp on normalised inputs, rbf, cosine) Jacobi is a
    multiple of the identity and helps nothing."""

    def __init__(self, heads: int = 1, rebuild_every: int = 1, eps: float = 1e-6):
        super().__init__(heads, rebuild_every)
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(heads))

    def build(self, K, lam, head_dim):
        d = torch.diagonal(K, dim1=-2, dim2=-1).unsqueeze(-1) + lam  # [..., n, 1]
        d = self.per_head(self.scale, head_dim).abs().clamp_min(self.eps).to(K.dtype) * d
        return (1.0 / d,)

    def apply(self, r, cache):
        return cache[0] * r


class LowRankPreconditioner(Preconditioner):
    """Seed 001 §5 "Fast": A ~ M = D + U U^T, applied as M^-1 by Woodbury in O(n r) per vector.

    U = B * softplus(importance) (columns weighted by a learned per-head importance, 1 at
    init) and D = max(|s|, eps) lam (s a learned per-head scale, 1 at init); with
    diag_correction, D = max(|s|, eps) (lam + (diag(K) - diag(U U^T))_+), so that
    diag(M) = diag(A) at s = 1 (the seed's d is built from diag(K) + lam). The basis B is
      "nystrom": the pivoted-Cholesky factor of K itself (K ~ B B^T, rank r): the standard
        preconditioner for kernel systems; at rank n it is exact (M = A).
      "random": the seed's fixed random basis lr_base [heads, max_len, rank] (a buffer, drawn
        once; only the importance is learned), sliced to the first n rows; it knows nothing of
        K. n > max_len is an error.
    Measured (benchmarks/krr_pcg.py, rbf on clustered keys, kappa ~1e5, n = 1024): identity
    303 iterations, Nystrom r=128 22, with the diagonal correction 36 (so it is off by
    default), random basis worse than identity (not converged in 600 at n = 256).
    """

    def __init__(
        self,
        heads: int = 1,
        rank: int = 32,
        basis: str = "nystrom",
        max_len: int = 2048,
        rebuild_every: int = 1,
        eps: float = 1e-6,
        seed: int = 0,
        diag_correction: bool = False,
    ):
        super().__init__(heads, rebuild_every)
        self.diag_correction = diag_correction
        if basis not in BASES:
            raise ValueError(f"fast preconditioner: basis must be one of {BASES}, got {basis!r}")
        if rank < 1 or max_len < 1:
            raise ValueError(
                f"fast preconditioner: rank and max_len must be >= 1: {rank}, {max_len}"
            )
        self.rank, self.basis, self.max_len, self.eps = rank, basis, max_len, eps
        self.scale = nn.Parameter(torch.ones(heads))
        self.importance = nn.Parameter(torch.full((heads, rank), SOFTPLUS_INV_ONE))
        if basis == "random":
            g = torch.Generator().manual_seed(seed)
            lr_base = torch.randn(heads, max_len, rank, generator=g) / math.sqrt(rank)
            self.register_buffer("lr_base", lr_base)

    def low_rank_factor(self, K: Tensor, head_dim: int) -> Tensor:
        """U [..., n, r] for the system K [..., n, n]."""
        n = K.shape[-1]
        if self.basis == "nystrom":
            B = pivoted_cholesky(K, self.rank)  # [..., n, r']
            imp = F.softplus(self.importance[:, : B.shape[-1]])  # [heads, r']
        else:
            if n > self.max_len:
                raise ValueError(
                    f"fast preconditioner (random basis): sequence length {n} exceeds max_len "
                    f"{self.max_len}; raise max_len in the config"
                )
            B = self.per_head(self.lr_base[:, :n, :].to(K.dtype), head_dim)  # [..., n, r]
            imp = F.softplus(self.importance)
        return B * self.per_head(imp.to(K.dtype), head_dim)  # [..., n, r]

    def build(self, K, lam, head_dim):
        U = self.low_rank_factor(K, head_dim)  # [..., n, r]
        diag = lam.expand(*K.shape[:-1], 1)  # [..., n, 1]
        if self.diag_correction:
            left_out = torch.diagonal(K, dim1=-2, dim2=-1) - (U * U).sum(-1)  # [..., n]
            diag = diag + left_out.clamp_min(0.0).unsqueeze(-1)
        scale = self.per_head(self.scale, head_dim).abs().clamp_min(self.eps).to(K.dtype)
        D = scale * diag  # [..., n, 1]
        return woodbury_factor(D, U.expand(*D.shape[:-1], U.shape[-1]))

    def apply(self, r, cache):
        return woodbury_apply(r, *cache)


class TylerPreconditioner(Preconditioner):
    """Seed 001 §5 "CCCP": P = Sigma^-1/2 with Sigma Tyler's scatter, by eigh.

    Dimensions (the seed mixes a d x d covariance with length-n residuals): the samples are the
    n normalised columns a_i / |a_i| of A = K + lam I, vectors in R^n, so Sigma is n x n and
    Sigma^-1/2 acts on residuals. Tyler's iteration from I gives Sigma_1 = A W A with
    W = diag(1 / |a_i|^2) (trace-normalised), which is already a fixed point (N = p samples):
    more iterations change nothing (tested). Hence P = (A W A)^-1/2, which equals A^-1 up to a
    scalar when the columns of A have equal norms, and is close to it otherwise. Cost O(n^3)
    (a Cholesky per iteration and an eigh): more than a direct Cholesky solve of A itself.
    No parameters; built without gradients."""

    def __init__(self, heads: int = 1, rebuild_every: int = 1, iters: int = 1):
        super().__init__(heads, rebuild_every)
        if iters < 1:
            raise ValueError(f"cccp preconditioner: iters must be >= 1, got {iters}")
        self.iters = iters

    @torch.no_grad()
    def build(self, K, lam, head_dim):
        n = K.shape[-1]
        A = K + lam * torch.eye(n, dtype=K.dtype, device=K.device)
        sigma = tyler_scatter(normalize(A), self.iters)  # rows of A = columns (symmetric)
        eigvals, eigvecs = torch.linalg.eigh(sigma)
        floor = torch.finfo(K.dtype).eps * eigvals.amax(dim=-1, keepdim=True)
        inv_sqrt = eigvals.clamp_min(floor).rsqrt()  # [..., n]
        return ((eigvecs * inv_sqrt.unsqueeze(-2)) @ eigvecs.mT,)

    def apply(self, r, cache):
        return cache[0] @ r


def make_preconditioner(
    name: str,
    heads: int = 1,
    rank: int = 32,
    basis: str = "nystrom",
    max_len: int = 2048,
    rebuild_every: int = 1,
    tyler_iters: int = 1,
) -> Preconditioner:
    """The preconditioner registered under `name` (seed 001 §5 order)."""
    if name == "identity":
        return IdentityPreconditioner(heads, rebuild_every)
    if name == "diagonal":
        return DiagonalPreconditioner(heads, rebuild_every)
    if name == "fast":
        return LowRankPreconditioner(heads, rank, basis, max_len, rebuild_every)
    if name == "cccp":
        return TylerPreconditioner(heads, rebuild_every, tyler_iters)
    raise ValueError(f"preconditioner must be one of {PRECONDITIONERS}, got {name!r}")
