"""The SPD solves behind kernel ridge-regression attention (seed 001 §3, §4, §7), as functions.

Every system here is (K + lam I) x = v with K symmetric positive semi-definite and lam > 0, so
A = K + lam I is symmetric positive definite: the one class of systems conjugate gradients and
Cholesky are made for. Shapes: K [..., n, n], right-hand sides v [..., n, m] (m independent
columns, each its own CG run), lam broadcastable to [..., 1, 1].

Threads: the direct path is Cholesky (cholesky_ex + cholesky_solve), never batched LU, which in
this torch build returns wrong answers after torch.set_num_threads(k >= 2) (PyTorch issue
142815). Nothing in this project sets threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = [
    "BOUND",
    "Solve",
    "op",
    "pcg",
    "cholesky_spd_solve",
    "solve_spd",
    "bound",
    "rms_scale",
    "rms_normalize",
]

BOUND = 1e6  # seed 001 notation: clamp constant for the solution alpha

Precondition = Callable[[Tensor], Tensor]  # r [..., n, m] -> z ~ A^-1 r [..., n, m]


@dataclass
class Solve:
    """Outcome of an SPD solve (seed 001 §4 `Solve`), one entry per system: a system is one
    right-hand-side column of one matrix, so the per-system fields have shape [..., m].

    x: the solution [..., n, m] (differentiable). iters: CG iterations each system ran (int64).
    converged: whether the *true* relative residual |v - A x| / |v| is <= tol at exit.
    res: that true relative residual. history: the recurrence's relative residual after each
    iteration (history[0] is the start), detached. direct: [...] which matrices the Cholesky
    fallback (or the direct method) solved; their columns are exact to rounding.
    """

    x: Tensor
    iters: Tensor
    converged: Tensor
    res: Tensor
    history: list[Tensor] = field(default_factory=list)
    direct: Tensor | None = None

    def detached(self) -> Solve:
        return Solve(
            self.x.detach(), self.iters, self.converged, self.res, self.history, self.direct
        )


def op(K: Tensor, x: Tensor, lam: Tensor | float) -> Tensor:
    """The regularised operator A x = K x + lam x (seed 001 §3), one matmul and one axpy.

    K [..., n, n], x [..., n, m], lam broadcastable to [..., 1, 1] -> [..., n, m]."""
    return K @ x + lam * x


def _relative_residual(K: Tensor, x: Tensor, v: Tensor, lam: Tensor | float) -> Tensor:
    """|v - A x| / |v| per column, detached: [..., m]; a zero column counts as solved by 0."""
    with torch.no_grad():
        r = v - op(K, x, lam)
        vnorm = v.norm(dim=-2)
        return r.norm(dim=-2) / vnorm.clamp_min(torch.finfo(v.dtype).tiny)


def pcg(
    K: Tensor,
    v: Tensor,
    lam: Tensor | float,
    precondition: Precondition | None = None,
    tol: float = 1e-6,
    max_iter: int = 20,
) -> Solve:
    """Preconditioned conjugate gradients for (K + lam I) x = v (seed 001 §4), x_0 = 0.

        r_0 = v, z_0 = P r_0, p_0 = z_0
        a_t = (r_t . z_t) / (p_t . A p_t),  x_{t+1} = x_t + a_t p_t,  r_{t+1} = r_t - a_t A p_t
        z_{t+1} = P r_{t+1},  b = (r_{t+1} . z_{t+1}) / (r_t . z_t),  p_{t+1} = z_{t+1} + b p_t

    P must be symmetric positive definite (an approximation of A^-1). Each system (column of
    each matrix) stops on its own when |r_t| <= tol |v|: its step sizes become 0 and it is frozen
    while the others go on, until all have stopped or max_iter iterations ran. The iterations
    are unrolled, so autograd differentiates the returned x (as a function of K, v, lam and
    whatever P depends on) exactly; the guarded divisions keep frozen systems' gradients finite.
    """
    if K.shape[-1] != K.shape[-2] or K.shape[-1] != v.shape[-2]:
        raise ValueError(f"pcg: K must be [..., n, n] and v [..., n, m]; got {K.shape}, {v.shape}")
    precondition = precondition if precondition is not None else (lambda r: r)
    x = torch.zeros_like(v)
    r = v
    z = precondition(r)
    p = z
    rz = (r * z).sum(dim=-2, keepdim=True)  # [..., 1, m]
    with torch.no_grad():
        vnorm = v.norm(dim=-2, keepdim=True)  # [..., 1, m]
        scale = vnorm.clamp_min(torch.finfo(v.dtype).tiny)
        rnorm = r.norm(dim=-2, keepdim=True)
        active = rnorm > tol * vnorm  # a zero column starts solved (by x = 0)
        iters = torch.zeros_like(active, dtype=torch.int64)
    history = [(rnorm / scale).squeeze(-2)]
    for _ in range(max_iter):
        if not bool(active.any()):
            break
        Ap = op(K, p, lam)
        pAp = (p * Ap).sum(dim=-2, keepdim=True)
        # breakdown (r.z <= 0 or p.Ap <= 0: impossible for SPD A and P, a rounding failure of a
        # numerically singular system): freeze the system, unconverged, for the fallback
        active = active & (pAp > 0) & (rz > 0)
        step = torch.where(active, rz / torch.where(active, pAp, torch.ones_like(pAp)), 0.0)
        x = x + step * p
        r = r - step * Ap
        z = precondition(r)
        rz_next = (r * z).sum(dim=-2, keepdim=True)
        beta = torch.where(active, rz_next / torch.where(active, rz, torch.ones_like(rz)), 0.0)
        p = z + beta * p
        rz = rz_next
        with torch.no_grad():
            iters = iters + active.to(torch.int64)
            rnorm = r.norm(dim=-2, keepdim=True)
            active = active & (rnorm > tol * vnorm)
        history.append((rnorm / scale).squeeze(-2))
    res = _relative_residual(K, x, v, lam)
    return Solve(
        x=x, iters=iters.squeeze(-2), converged=res <= tol, res=res, history=history, direct=None
    )


def cholesky_spd_solve(K: Tensor, v: Tensor, lam: Tensor | float) -> Tensor:
    """x = (K + lam I)^-1 v by Cholesky (torch.linalg.cholesky_ex + cholesky_solve).

    K [..., n, n], v [..., n, m] -> [..., n, m]. A matrix that is not numerically positive
    definite in a low-precision dtype (condition number past ~1/eps) is factored again in
    float64 and the answer cast back; if it fails there too, ValueError."""
    n = K.shape[-1]
    eye = torch.eye(n, dtype=K.dtype, device=K.device)
    L, info = torch.linalg.cholesky_ex(K + lam * eye)
    if bool((info > 0).any()):
        if K.dtype != torch.float64:
            lam64 = lam.double() if isinstance(lam, Tensor) else lam
            return cholesky_spd_solve(K.double(), v.double(), lam64).to(v.dtype)
        raise ValueError(
            "KRR direct solve: K + lam I is not numerically positive definite "
            f"(Cholesky failed in {int((info > 0).sum())} matrices, float64); increase lam"
        )
    return torch.cholesky_solve(v, L)


def solve_spd(
    K: Tensor,
    v: Tensor,
    lam: Tensor | float,
    *,
    method: str = "pcg",
    precondition: Precondition | None = None,
    tol: float = 1e-6,
    max_iter: int = 20,
    fallback: bool = True,
) -> Solve:
    """(K + lam I) x = v by PCG with a Cholesky fallback, or by Cholesky alone (seed 001 §4, §7).

    method "pcg": run :func:`pcg`; with `fallback`, every matrix with an unconverged column
    (or a non-finite PCG result from finite inputs: a rounding breakdown) is re-solved by
    :func:`cholesky_spd_solve` (all its columns) and replaces the PCG answer. Non-finite inputs,
    or a non-finite result that the fallback cannot repair, raise FloatingPointError (seed §7:
    fail loudly). method "cholesky": the direct solve for every matrix. K and v share their
    batch shape [..., n, n] / [..., n, m]; lam broadcasts to [..., 1, 1].
    """
    lam_t = torch.as_tensor(lam, dtype=K.dtype, device=K.device)
    for name, t in (("kernel", K), ("values", v), ("lam", lam_t)):
        if not bool(torch.isfinite(t).all()):
            raise FloatingPointError(f"KRR solve: non-finite {name} (check the inputs)")
    if method == "cholesky":
        x = cholesky_spd_solve(K, v, lam_t)
        res = _relative_residual(K, x, v, lam_t)
        direct = torch.ones(K.shape[:-2], dtype=torch.bool, device=K.device)
        return Solve(x, torch.zeros_like(res, dtype=torch.int64), res <= tol, res, [], direct)
    if method != "pcg":
        raise ValueError(f"solve_spd: method must be 'pcg' or 'cholesky', got {method!r}")
    if K.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"solve_spd: K {tuple(K.shape)} and v {tuple(v.shape)} batch differ")
    solve = pcg(K, v, lam_t, precondition, tol=tol, max_iter=max_iter)
    batch, (n, m) = K.shape[:-2], v.shape[-2:]
    # a non-finite x has a non-finite residual, so it is never converged: redo covers it
    redo = ~solve.converged.all(dim=-1)  # [...]
    solve.direct = redo
    if fallback and bool(redo.any()):
        lam_flat = lam_t.expand(*batch, 1, 1).reshape(-1, 1, 1)
        idx = redo.reshape(-1).nonzero().squeeze(-1)
        K_flat, v_flat = K.reshape(-1, n, n), v.reshape(-1, n, m)
        exact = cholesky_spd_solve(K_flat[idx], v_flat[idx], lam_flat[idx])
        solve.x = solve.x.reshape(-1, n, m).index_copy(0, idx, exact).reshape(solve.x.shape)
        solve.res = _relative_residual(K, solve.x, v, lam_t)
        solve.converged = solve.res <= tol
    if not bool(torch.isfinite(solve.x).all()):
        raise FloatingPointError(
            "KRR solve: PCG produced non-finite values from finite inputs (enable the fallback, "
            "raise lam, or use float64)"
        )
    return solve


def bound(x: Tensor) -> Tensor:
    """Clamp to [-BOUND, BOUND] (seed 001 §7, §9 step 8); the gradient is 0 where it clamps."""
    return x.clamp(-BOUND, BOUND)


def rms_scale(x: Tensor, eps: float = 1e-6) -> Tensor:
    """1 / sqrt(mean(x^2) + eps) over the last dim: [..., k] -> [..., 1]."""
    return torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def rms_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim (seed 001 §9 step 8: rms(alpha, eps))."""
    return x * rms_scale(x, eps)
