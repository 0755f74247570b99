"""XAKER kernel ridge-regression attention (seed 001): kernels against their formulas, the PCG
solve against scipy's Cholesky (float64), per-system stopping, gradients through the unrolled
iterations (gradcheck), preconditioners as SPD approximations of A^-1 (Woodbury, Jacobi,
pivoted-Cholesky Nystrom, Tyler / CCCP), their cache, the Cholesky fallback on batched inputs,
masks, XSA, the multi-head module and the worked example of §9.

Where the seed is wrong the tests assert what is true; the seed's numbers are in the comments
and in the XAKER section of docs/seed_map.md."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from world_model.attention.kernel_matrix import EXP_CLAMP, KERNELS, exp_clamp_max, kernel_matrix
from world_model.attention.krr import (
    KernelRidgeAttention,
    KRRConfig,
    MultiHeadKRRAttention,
    MultiHeadKRRConfig,
    _mask_rows,
    krr_attention,
    xsa_project,
)
from world_model.attention.krr_precond import (
    PRECONDITIONERS,
    DiagonalPreconditioner,
    IdentityPreconditioner,
    LowRankPreconditioner,
    TylerPreconditioner,
    make_preconditioner,
    pivoted_cholesky,
    tyler_scatter,
    woodbury_apply,
    woodbury_factor,
)
from world_model.attention.krr_solver import (
    BOUND,
    Solve,
    bound,
    cholesky_spd_solve,
    op,
    pcg,
    rms_normalize,
    rms_scale,
    solve_spd,
)

F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=F64).to(dtype)


def clustered(n, d, clusters, spread, seed=0):
    """n points around `clusters` random centres: an ill-conditioned rbf kernel."""
    g = gen(seed)
    centres = 2.0 * torch.randn(clusters, d, generator=g, dtype=F64)
    label = torch.randint(clusters, (n,), generator=g)
    return centres[label] + spread * torch.randn(n, d, generator=g, dtype=F64)


def scipy_solve(K, v, lam):
    """Independent float64 reference: scipy Cholesky of K + lam I, per batch matrix."""
    Kn, vn = K.detach().double().numpy(), v.detach().double().numpy()
    lam = np.broadcast_to(np.asarray(lam, dtype=np.float64), Kn.shape[:-2] + (1, 1))
    out = np.empty(vn.shape)
    for idx in np.ndindex(Kn.shape[:-2]):
        A = Kn[idx] + lam[idx] * np.eye(Kn.shape[-1])
        out[idx] = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A), vn[idx])
    return torch.from_numpy(out)


def dense_precond(pre, K, lam, head_dim=-3):
    return pre.matrix(K, torch.as_tensor(lam, dtype=K.dtype), head_dim)


# --------------------------------------------------------------------------- kernels (§1)


@pytest.mark.parametrize("kind", KERNELS)
def test_kernels_match_their_formulas(kind):
    x, y = randn(7, 5, seed=1), randn(9, 5, seed=2)
    temp, sigma = 0.7, 1.3
    K = kernel_matrix(x, y, kind, temp=temp, sigma=sigma)
    ref = torch.empty(7, 9, dtype=F64)
    for i in range(7):
        for j in range(9):
            a, b = x[i].numpy(), y[j].numpy()
            cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            ref[i, j] = {
                "exp": math.exp(cos / temp),
                "rbf": math.exp(-float(np.sum((a - b) ** 2)) / (2 * sigma**2)),
                "linear": float(a @ b),
                "cosine": cos,
            }[kind]
    torch.testing.assert_close(K, ref, rtol=1e-12, atol=1e-12)
    if kind == "exp":  # normalize_inputs=False: exp(<x, y> / temp)
        raw = kernel_matrix(x, y, "exp", temp=4.0, normalize_inputs=False)
        torch.testing.assert_close(raw, torch.exp(x @ y.T / 4.0), rtol=1e-12, atol=0)


def test_exp_clamp_keeps_float32_finite_where_the_seeds_100_does_not():
    # Seed §1: clamping the exponent to [-100, 100] "prevents overflow in lower-precision
    # dtypes". Measured: exp(100) overflows float32 (max e^88.7) and float16 (max e^11.1).
    assert torch.isinf(torch.exp(torch.tensor(EXP_CLAMP, dtype=torch.float32)))
    assert torch.isinf(torch.exp(torch.tensor(EXP_CLAMP, dtype=torch.float16)))
    assert exp_clamp_max(torch.float64) == 100.0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        hi = exp_clamp_max(dtype)
        assert torch.isfinite(torch.exp(torch.tensor(hi, dtype=dtype)))
        assert torch.isinf(torch.exp(torch.tensor(hi + 1.0, dtype=dtype)))
    x = randn(6, 4, seed=3, dtype=torch.float32).requires_grad_()
    K = kernel_matrix(x, x, "exp", temp=1e-3)  # cos / temp up to 1000
    assert torch.isfinite(K).all() and K.max() == torch.exp(torch.tensor(88.0))
    K.sum().backward()
    assert torch.isfinite(x.grad).all()
    # the lower clamp: antipodal pairs at temp 1e-3 have exponent -1000, clamped to -100
    a = randn(3, 4, seed=3)
    K = kernel_matrix(a, -a, "exp", temp=1e-3)
    low = torch.full((3,), math.exp(-EXP_CLAMP), dtype=F64)
    torch.testing.assert_close(torch.diagonal(K), low, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("kind", KERNELS)
def test_key_kernels_are_positive_semidefinite(kind):
    # Seed §1 calls linear and cosine "not positive definite"; K(k, k) is PSD for all four
    # (Gram matrices), of rank <= d for linear and cosine, so lam > 0 makes every system SPD.
    n, d = 24, 3
    k = randn(n, d, seed=4)
    ev = torch.linalg.eigvalsh(kernel_matrix(k, k, kind))
    assert ev[0] > -1e-12 * ev[-1]
    if kind in ("linear", "cosine"):
        assert (ev[:-d].abs() < 1e-12 * ev[-1]).all()  # rank d
    else:
        assert ev[0] > 0


# --------------------------------------------------------------------------- the solve (§3-§4)


def test_op_is_the_regularised_operator():
    K, x = randn(3, 5, 5, seed=5), randn(3, 5, 2, seed=6)
    lam = torch.tensor([0.5, 1.0, 2.0], dtype=F64).view(3, 1, 1)
    ref = (K + lam * torch.eye(5, dtype=F64)) @ x
    torch.testing.assert_close(op(K, x, lam), ref, rtol=1e-13, atol=1e-13)


def spd_kernel(batch, n, seed):
    """batch random rbf kernels on n keys in R^3: SPD, moderately conditioned."""
    k = randn(batch, n, 3, seed=seed)
    return kernel_matrix(k, k, "rbf", sigma=0.8)


@pytest.mark.parametrize("name", ["identity", "diagonal", "fast", "cccp"])
def test_pcg_matches_scipy_cholesky(name):
    K = spd_kernel(3, 40, seed=7)
    v = randn(3, 40, 4, seed=8)
    lam = 1e-2
    pre = make_preconditioner(name, rank=8)
    solve = pcg(K, v, lam, pre.prepare(K, lam), tol=1e-10, max_iter=200)
    assert solve.converged.all() and (solve.res <= 1e-10).all()
    assert solve.iters.shape == (3, 4) and solve.res.shape == (3, 4)
    torch.testing.assert_close(solve.x, scipy_solve(K, v, lam), rtol=1e-7, atol=1e-8)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 30), log_lam=st.floats(-3, 1))
def test_pcg_with_nystrom_solves_random_spd_systems(seed, n, log_lam):
    k = randn(n, 2, seed=seed)
    K = kernel_matrix(k, k, "rbf")
    v = randn(n, 2, seed=seed + 1)
    lam = 10.0**log_lam
    pre = LowRankPreconditioner(rank=max(1, n // 3))
    solve = pcg(K, v, lam, pre.prepare(K, lam), tol=1e-9, max_iter=3 * n + 10)
    assert solve.converged.all()
    torch.testing.assert_close(solve.x, scipy_solve(K, v, lam), rtol=1e-6, atol=1e-7)


def test_each_system_stops_at_its_own_convergence_and_is_frozen():
    # two matrices: well conditioned (lam = 10) and ill conditioned (lam = 1e-3), plus a zero
    # right-hand side column that is solved by x = 0 before the first iteration
    k = clustered(60, 3, 4, 0.2, seed=9)
    K = kernel_matrix(k, k, "rbf").expand(2, 60, 60)
    lam = torch.tensor([10.0, 1e-3], dtype=F64).view(2, 1, 1)
    v = randn(2, 60, 3, seed=10)
    v[:, :, 2] = 0.0
    tol = 1e-8
    solve = pcg(K, v, lam, tol=tol, max_iter=500)
    it = solve.iters
    assert (it[:, 2] == 0).all() and (solve.x[:, :, 2] == 0).all()
    assert it[0, 0] < it[1, 0] / 3  # the easy system stopped long before the hard one
    hist = torch.stack(solve.history)  # [T + 1, 2, 3]
    for b in range(2):
        for c in range(2):
            t = int(it[b, c])
            assert hist[t, b, c] <= tol < hist[t - 1, b, c]  # stopped at the first crossing
            assert (hist[t:, b, c] == hist[t, b, c]).all()  # frozen afterwards
    alone = pcg(K[:1], v[:1, :, :1], lam[:1], tol=tol, max_iter=500)
    torch.testing.assert_close(solve.x[:1, :, :1], alone.x, rtol=1e-12, atol=1e-14)
    assert int(alone.iters) == int(it[0, 0])


def test_gradcheck_through_unrolled_pcg():
    n, m = 7, 2
    base = randn(n, n, seed=11)
    K0 = base @ base.T / n
    lam0 = 0.3
    pre = LowRankPreconditioner(rank=3)
    precondition = pre.prepare(K0, lam0)  # a fixed SPD operator

    def solve(b, v, lam):
        K = b @ b.T / n
        return pcg(K, v, lam, precondition, tol=0.0, max_iter=4).x  # 4 < n: truly unrolled

    inputs = (base.clone().requires_grad_(), randn(n, m, seed=12).requires_grad_())
    lam = torch.tensor(lam0, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(solve, (*inputs, lam))
    assert torch.autograd.gradcheck(
        lambda b, v, l: pcg(b @ b.T / n, v, l, tol=0.0, max_iter=5).x, (*inputs, lam)
    )


def test_unrolled_gradients_approach_the_direct_solve_and_stay_finite_when_frozen():
    # Gradients are those of the truncated iteration: they lag the solution (measured on this
    # system, kappa ~ 110, Nystrom rank 6: relative error of dL/dK 1e-4 at tol 1e-6 and 2.5e-6 at
    # tol 1e-13, where the solution itself is exact to 1e-13; dL/dv 3e-6 and 6e-14). A column
    # frozen before its first iteration (zero right-hand side) keeps x = 0 with no dependence on
    # v: its dL/dv is 0 where the exact one is A^-1 w.
    K = spd_kernel(2, 30, seed=13)
    v_data = randn(2, 30, 3, seed=14)
    v_data[0, :, 1] = 0.0
    w = randn(2, 30, 3, seed=15)
    pre = LowRankPreconditioner(rank=6)

    def grads(solve_fn):
        b = K.clone().requires_grad_()
        v = v_data.clone().requires_grad_()
        lam = torch.tensor(0.05, dtype=F64, requires_grad=True)
        ((solve_fn(0.5 * (b + b.mT), v, lam)) * w).sum().backward()
        return b.grad, v.grad, lam.grad

    exact = grads(cholesky_spd_solve)
    errors = []
    for tol in (1e-6, 1e-13):

        def unrolled(A, v, lam, tol=tol):
            return pcg(A, v, lam, pre.prepare(K, 0.05), tol=tol, max_iter=200).x

        g = grads(unrolled)
        assert all(torch.isfinite(t).all() for t in g)
        assert (g[1][0, :, 1] == 0).all() and exact[1][0, :, 1].abs().max() > 0.1
        g[1][0, :, 1] = exact[1][0, :, 1]  # compare the rest
        errors.append(max(float((a - e).norm() / e.norm()) for a, e in zip(g, exact, strict=True)))
    assert 1e-6 < errors[0] < 1e-2 and errors[1] < 1e-5 and errors[1] < errors[0] / 10, errors


def test_cholesky_fallback_on_batched_inputs_matches_float64_reference():
    # float32, 6 matrices, 2 PCG iterations: not converged -> Cholesky (never batched LU: PyTorch
    # issue 142815), compared with scipy in float64
    k = clustered(48, 3, 5, 0.3, seed=16).view(1, 48, 3).expand(6, 48, 3)
    k = k + 0.05 * randn(6, 48, 3, seed=17)
    K = kernel_matrix(k, k, "rbf").float()
    v = randn(6, 48, 5, seed=18, dtype=torch.float32)
    lam = torch.tensor([1e-1, 1e-1, 1e-2, 1e-2, 1.0, 1e3]).view(6, 1, 1)
    solve = solve_spd(K, v, lam, tol=1e-4, max_iter=2)
    assert solve.direct[:4].all() and not solve.direct[5]  # lam = 1e3: PCG converged
    ref = scipy_solve(K, v, lam)
    err = (solve.x.double() - ref).norm(dim=-2) / ref.norm(dim=-2)
    assert err.max() < 1e-4, err
    no_fallback = solve_spd(K, v, lam, tol=1e-4, max_iter=2, fallback=False)
    assert not no_fallback.converged[:4].all()


def test_non_finite_solve_raises_and_an_indefinite_system_is_reported():
    K = spd_kernel(2, 10, seed=19)
    v = randn(2, 10, 2, seed=20)
    v[1, 3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite values"):
        solve_spd(K, v, 0.1)
    with pytest.raises(FloatingPointError, match="non-finite lam"):
        solve_spd(K, randn(2, 10, 2, seed=20), float("inf"))
    # one of two float64 matrices (-I + 0.5 I) is indefinite: the message counts it
    message = (
        "KRR direct solve: K + lam I is not numerically positive definite (Cholesky failed in 1 "
        "matrices, float64); increase lam"
    )
    eyes = torch.stack([-torch.eye(4, dtype=F64), torch.eye(4, dtype=F64)])
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cholesky_spd_solve(eyes, torch.ones(2, 4, 1, dtype=F64), 0.5)
    with pytest.raises(ValueError, match="method"):
        solve_spd(K, randn(2, 10, 2, seed=21), 0.1, method="lu")


def test_bound_and_rms_normalize():
    x = torch.tensor([[3e6, -2e7, 4.0]], dtype=F64, requires_grad=True)
    y = bound(x)
    torch.testing.assert_close(y, torch.tensor([[BOUND, -BOUND, 4.0]], dtype=F64))
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.0, 0.0, 1.0]], dtype=F64))
    z = randn(4, 6, seed=22)
    r = rms_normalize(z, eps=0.0)
    torch.testing.assert_close((r * r).mean(-1), torch.ones(4, dtype=F64))
    assert (rms_normalize(torch.zeros(2, 3)) == 0).all()


# --------------------------------------------------------------------------- preconditioners (§5)


def test_woodbury_apply_is_the_inverse_of_low_rank_plus_diagonal():
    D = 0.1 + randn(2, 12, 1, seed=23).abs()
    U = randn(2, 12, 4, seed=24)
    r = randn(2, 12, 3, seed=25)
    dense = torch.diag_embed(D.squeeze(-1)) + U @ U.mT
    torch.testing.assert_close(
        woodbury_apply(r, *woodbury_factor(D, U)),
        torch.linalg.solve(dense, r),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("name", ["identity", "diagonal", "fast", "cccp"])
def test_preconditioners_are_spd(name):
    K = spd_kernel(2, 20, seed=26)
    pre = make_preconditioner(name, rank=5)
    P = dense_precond(pre, K, 1e-2)
    torch.testing.assert_close(P, P.mT, rtol=1e-8, atol=1e-10)
    assert torch.linalg.eigvalsh(0.5 * (P + P.mT))[..., 0].min() > 0


def test_nystrom_and_cccp_shrink_the_condition_number_of_an_ill_conditioned_kernel():
    # rbf on 8 tight clusters, lam = 1e-3. kappa(P^1/2 A P^1/2) from the dense P, measured:
    # identity 5.9e4, Jacobi 5.9e4 (constant diagonal), Nystrom r=64 1.0004, CCCP 1.55, and the
    # seed's random basis r=64 2.7e8: worse than no preconditioner
    k = clustered(200, 2, 8, 0.1, seed=27)
    K = kernel_matrix(k, k, "rbf")
    lam = 1e-3
    A = K + lam * torch.eye(200, dtype=F64)

    def kappa(P):
        ev = torch.linalg.eigvals(P @ A).real  # P A is similar to P^1/2 A P^1/2: real spectrum
        return float(ev.max() / ev.min())

    k_id = kappa(torch.eye(200, dtype=F64))
    k_ny = kappa(dense_precond(LowRankPreconditioner(rank=64), K, lam))
    k_cccp = kappa(dense_precond(TylerPreconditioner(), K, lam))
    k_rand = kappa(
        dense_precond(LowRankPreconditioner(rank=64, basis="random", max_len=200), K, lam)
    )
    assert k_id > 1e4
    assert k_ny < 1.01 and k_cccp < 2.0
    assert k_rand > k_id  # the seed's random basis knows nothing of K


def test_nystrom_at_full_rank_is_exact_and_rank_deficiency_is_handled():
    k = randn(15, 3, seed=28)
    K = kernel_matrix(k, k, "rbf")
    L = pivoted_cholesky(K, 15)
    torch.testing.assert_close(L @ L.T, K, rtol=1e-10, atol=1e-10)
    v = randn(15, 2, seed=29)
    solve = pcg(K, v, 1e-3, LowRankPreconditioner(rank=20).prepare(K, 1e-3), tol=1e-9)
    assert solve.converged.all() and int(solve.iters.max()) == 1
    # linear kernel of rank 3: columns past the rank are exactly 0, and L L^T = K
    K_lin = kernel_matrix(k, k, "linear")
    L = pivoted_cholesky(K_lin, 8)
    assert (L[:, 3:] == 0).all()
    torch.testing.assert_close(L @ L.T, K_lin, rtol=1e-10, atol=1e-10)


def test_jacobi_inverts_the_diagonal_and_its_learned_scale_cannot_change_pcg():
    # Seed §5: d = softplus(diag K + lam) |scale| + eps applied as P(r) = d * r, which multiplies
    # by ~diag(A). Jacobi divides by it. PCG's iterates are invariant under P -> c P, so the
    # "learned" scale is inert: iterates agree to rounding for scale 1 and 3.7.
    x = randn(30, 4, seed=30)
    K = kernel_matrix(x, x, "linear") + torch.diag(randn(30, seed=31).abs())
    lam = 0.5
    pre = DiagonalPreconditioner(eps=0.0)
    P = dense_precond(pre, K, lam)
    torch.testing.assert_close(P, torch.diag(1.0 / (torch.diagonal(K) + lam)))
    v = randn(30, 2, seed=32)
    a = pcg(K, v, lam, pre.prepare(K, lam), tol=1e-10, max_iter=100)
    with torch.no_grad():
        pre.scale.fill_(3.7)
    b = pcg(K, v, lam, pre.prepare(K, lam), tol=1e-10, max_iter=100)
    # the iterates agree until rounding differences (from the non-power-of-2 factor) grow, which
    # on this system (kappa 89, 31 iterations for 30 unknowns) they do after ~10 iterations
    for ha, hb in zip(a.history[:9], b.history[:9], strict=True):
        torch.testing.assert_close(ha, hb, rtol=1e-8, atol=0.0)
    torch.testing.assert_close(a.x, b.x, rtol=1e-8, atol=1e-10)


def test_tyler_scatter_recovers_an_elliptical_shape():
    # N >> p samples of a multivariate t (nu = 3, heavy tails): Tyler's estimate is the shape
    # matrix, trace-normalised, and it satisfies its fixed-point equation
    p, N = 4, 20000
    g = gen(33)
    a = torch.randn(p, p, generator=g, dtype=F64)
    shape = a @ a.T + 0.5 * torch.eye(p, dtype=F64)
    z = torch.randn(N, p, generator=g, dtype=F64) @ torch.linalg.cholesky(shape).T
    chi2 = (torch.randn(N, 3, generator=g, dtype=F64) ** 2).sum(-1, keepdim=True)
    x = z / torch.sqrt(chi2 / 3)
    sigma = tyler_scatter(x, iters=60)
    target = shape * p / torch.trace(shape)
    assert (sigma - target).norm() / target.norm() < 0.05
    again = tyler_scatter(x, iters=61)
    torch.testing.assert_close(sigma, again, rtol=1e-6, atol=1e-6)


def test_cccp_is_a_fixed_point_after_one_step_and_exact_for_equal_column_norms():
    # N = p samples (the n normalised columns of A in R^n): one Tyler step reaches a fixed point
    k = randn(25, 3, seed=34)
    K = kernel_matrix(k, k, "rbf")
    P1 = dense_precond(TylerPreconditioner(iters=1), K, 0.05)
    P3 = dense_precond(TylerPreconditioner(iters=3), K, 0.05)
    torch.testing.assert_close(P1, P3, rtol=1e-6, atol=1e-8)
    # equally spaced points on a circle: K circulant, equal column norms -> P = c A^-1, so PCG
    # converges in one iteration
    t = torch.arange(32, dtype=F64) * (2 * math.pi / 32)
    k = torch.stack([torch.cos(t), torch.sin(t)], -1)
    K = kernel_matrix(k, k, "rbf", sigma=0.5)
    solve = pcg(K, randn(32, 3, seed=35), 1e-3, TylerPreconditioner().prepare(K, 1e-3), tol=1e-8)
    assert int(solve.iters.max()) == 1


def test_preconditioner_cache_rebuilds_by_step_storage_version_and_shape():
    K = spd_kernel(2, 16, seed=36)
    pre = LowRankPreconditioner(rank=4, rebuild_every=3)
    for _ in range(7):
        pre.prepare(K, 0.1)
    assert pre.n_builds == 3  # steps 0, 3, 6
    pre.prepare(K, 0.1)
    assert pre.n_builds == 3
    pre.importance.data = pre.importance.data.clone()  # re-allocated storage (data_ptr)
    pre.prepare(K, 0.1)
    assert pre.n_builds == 4
    opt = torch.optim.SGD(pre.parameters(), lr=0.1)
    pre.importance.grad = torch.ones_like(pre.importance)
    opt.step()  # in place: same data_ptr, new version
    pre.prepare(K, 0.1)
    assert pre.n_builds == 5
    pre.prepare(K[:1], 0.1)  # new shape
    assert pre.n_builds == 6
    pre.reset_cache()
    pre.prepare(K[:1], 0.1)
    assert pre.n_builds == 7
    pre.prepare(K[:1], 0.1)  # step 12: a multiple of 3
    assert pre.n_builds == 8
    cached = pre.prepare(K[:1], 0.1)  # step 13: reused, detached, still the same operator
    assert pre.n_builds == 8
    r = randn(1, 16, 2, seed=37)
    fresh = LowRankPreconditioner(rank=4)
    fresh.load_state_dict(pre.state_dict())
    torch.testing.assert_close(cached(r), fresh.prepare(K[:1], 0.1)(r))
    assert not cached(r).requires_grad


def test_per_head_parameters_broadcast_over_heads_and_query_rows():
    B, H, E, n = 2, 3, 4, 10
    K = spd_kernel(B * H, n, seed=38).view(B, H, n, n)
    pre = LowRankPreconditioner(heads=H, rank=4)
    with torch.no_grad():
        pre.importance.copy_(randn(H, 4, seed=39))
        pre.scale.copy_(torch.tensor([0.5, 1.0, 2.0]))
    r = randn(B, H, n, 2, seed=40)
    z = pre.prepare(K, 0.1)(r)
    rE = r.unsqueeze(2).expand(B, H, E, n, 2)
    zE = pre.prepare(K.unsqueeze(2).expand(B, H, E, n, n), 0.1, head_dim=-4)(rE)
    for h in range(H):
        one = LowRankPreconditioner(heads=1, rank=4)
        with torch.no_grad():
            one.importance.copy_(pre.importance[h : h + 1])
            one.scale.copy_(pre.scale[h : h + 1])
        ref = one.prepare(K[:, h], 0.1)(r[:, h])
        torch.testing.assert_close(z[:, h], ref)
        torch.testing.assert_close(zE[:, h], ref.unsqueeze(1).expand(B, E, n, 2))
    with pytest.raises(ValueError, match="heads"):
        pre.prepare(K[:, :2], 0.1)


def test_random_basis_is_sized_by_max_len():
    pre = LowRankPreconditioner(rank=4, basis="random", max_len=8)
    assert pre.lr_base.shape == (1, 8, 4)
    with pytest.raises(ValueError, match="max_len"):
        pre.prepare(spd_kernel(1, 9, seed=41), 0.1)
    with pytest.raises(ValueError, match="basis"):
        LowRankPreconditioner(basis="svd")
    with pytest.raises(ValueError, match="preconditioner"):
        make_preconditioner("jacobi")


# --------------------------------------------------------------------------- attention


def krr_reference(q, k, v, lam, kind="exp"):
    """out = K_qk (K_kk + lam I)^-1 v with scipy (float64)."""
    return kernel_matrix(q, k, kind) @ scipy_solve(kernel_matrix(k, k, kind), v, lam)


@pytest.mark.parametrize("kind", KERNELS)
def test_krr_attention_is_kernel_ridge_regression(kind):
    q, k, v = randn(2, 6, 4, seed=42), randn(2, 9, 4, seed=43), randn(2, 9, 3, seed=44)
    lam = torch.tensor(0.2, dtype=F64).view(1, 1)
    out, weights, solve = krr_attention(
        q,
        k,
        v,
        lam,
        kernel=kind,
        preconditioner=LowRankPreconditioner(rank=4),
        tol=1e-12,
        max_iter=100,
        need_weights=True,
    )
    ref = krr_reference(q, k, v, 0.2, kind)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(weights @ v, out, rtol=1e-9, atol=1e-10)
    assert weights.shape == (2, 6, 9)


def test_masks_restrict_the_regression_to_the_allowed_keys():
    n, d = 8, 3
    q, k, v = randn(n, d, seed=45), randn(n, d, seed=46), randn(n, 2, seed=47)
    lam = torch.tensor(0.1, dtype=F64).view(1, 1)
    kw = dict(kernel="rbf", tol=1e-12, max_iter=100, need_weights=True)
    # key padding: one system for all queries
    keep = torch.tensor([1, 1, 0, 1, 0, 1, 1, 1], dtype=torch.bool)
    out, w, _ = krr_attention(q, k, v, lam, keep.view(1, n), **kw)
    torch.testing.assert_close(out, krr_reference(q, k[keep], v[keep], 0.1, "rbf"))
    assert (w[:, ~keep] == 0).all()
    # causal (query-dependent): query i regresses on keys 0..i
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    out, w, _ = krr_attention(q, k, v, lam, causal, **kw)
    for i in range(n):
        ref = krr_reference(q[i : i + 1], k[: i + 1], v[: i + 1], 0.1, "rbf")
        torch.testing.assert_close(out[i : i + 1], ref, rtol=1e-9, atol=1e-10)
    assert (w[~causal] == 0).all()
    torch.testing.assert_close(w @ v, out)
    # a query with no allowed key: out = 0, weights = 0, finite gradients
    causal[2] = False
    kk = k.clone().requires_grad_()
    out, w, _ = krr_attention(q, kk, v, lam, causal, **kw)
    assert (out[2] == 0).all() and (w[2] == 0).all()
    out.sum().backward()
    assert torch.isfinite(kk.grad).all()


@pytest.mark.parametrize("xsa", ["projection", "zero", "mask"])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
def test_output_is_weights_times_values_with_xsa_rms_and_masks(xsa, rms, mask_kind):
    B, H, n = 2, 3, 7
    q, k, v = randn(B, H, n, 4, seed=48), randn(B, H, n, 4, seed=49), randn(B, H, n, 5, seed=50)
    mask = {
        "none": None,
        "padding": torch.rand(B, 1, 1, n, generator=gen(51)) > 0.3,
        "causal": torch.tril(torch.ones(n, n, dtype=torch.bool)),
    }[mask_kind]
    cfg = KRRConfig(heads=H, xsa=xsa, rms_alpha=rms, tol=1e-12, max_iter=100, rank=3)
    attn = KernelRidgeAttention(cfg).double()
    with torch.no_grad():
        attn.lam_raw.copy_(torch.tensor([-1.0, 0.0, 1.0]))
        attn.xsa_scale.fill_(0.8)
    out, w = attn(q, k, v, mask=mask, need_weights=True)
    torch.testing.assert_close(w @ v, out, rtol=1e-9, atol=1e-10)


def test_xsa_projection_is_orthogonal_and_zero_mode_keeps_a_self_weight():
    n = 10
    q, k, v = randn(n, 4, seed=52), randn(n, 4, seed=53), randn(n, 3, seed=54)
    lam = torch.tensor(0.5, dtype=F64).view(1, 1)
    one = torch.ones(1, dtype=F64)
    kw = dict(tol=1e-12, max_iter=100, need_weights=True, xsa_scale=one)
    for mode in ("projection", "mask"):
        out, _, _ = krr_attention(q, k, v, lam, xsa=mode, **kw)
        cos = (out * v).sum(-1) / (out.norm(dim=-1) * v.norm(dim=-1))
        assert cos.abs().max() < 1e-10
    # "zero" zeroes K_ii in the output kernel, but in KRR y_i still depends on v_i through the
    # solve: the self weight W_ii = sum_{j != i} K_ij (A^-1)_ji is not 0 (measured |W_ii| 0.29 to
    # 1.25 here, against 0.012 to 0.61 without XSA)
    _, w, _ = krr_attention(q, k, v, lam, xsa="zero", **kw)
    assert torch.diagonal(w).abs().min() > 1e-3
    # a zero value has no direction: nothing is subtracted
    y, c = xsa_project(randn(3, 2, seed=55), torch.zeros(3, 2, dtype=F64), one)
    assert (c == 0).all()


def test_zeroing_the_diagonal_of_the_system_makes_it_indefinite():
    # Seed §9 step 3 zeroes K's diagonal before the solve. A zero-diagonal symmetric matrix has
    # trace 0, so it has a negative eigenvalue; K_kk - diag + lam I is SPD only for lam above
    # -lambda_min(K_kk - diag) (measured 2.23 here; the exp kernel's removed diagonal is e = 2.72).
    # With the seed's lam = 3 it happens to be SPD; with lam = 1 it is not. And shifting lam by
    # the removed (constant) diagonal gives back K_kk + lam I exactly: so the code keeps K_kk
    # in the system and zeroes the diagonal of the output kernel only.
    k = randn(16, 16, seed=1)
    K = kernel_matrix(k, k, "exp")
    Z = K - torch.diag(torch.diagonal(K))
    lam_min = torch.linalg.eigvalsh(Z)[0]
    assert lam_min < 0 and torch.allclose(torch.diagonal(K), torch.full((16,), math.e, dtype=F64))
    eye = torch.eye(16, dtype=F64)
    assert torch.linalg.eigvalsh(Z + 1.0 * eye)[0] < 0
    assert torch.linalg.eigvalsh(Z + 3.0 * eye)[0] > 0
    torch.testing.assert_close(Z + (1.0 + math.e) * eye, K + 1.0 * eye)


def test_bad_inputs_get_one_clear_error():
    q = randn(2, 5, 4)
    with pytest.raises(ValueError, match="self-attention"):
        krr_attention(q, randn(2, 6, 4), randn(2, 6, 3), torch.ones(1, 1), xsa="projection")
    with pytest.raises(ValueError, match="shapes"):
        krr_attention(q, randn(2, 6, 3), randn(2, 6, 3), torch.ones(1, 1))
    with pytest.raises(ValueError, match="bool"):
        krr_attention(q, q, q, torch.ones(1, 1), torch.ones(5, 5))
    with pytest.raises(ValueError, match="broadcast"):
        krr_attention(q, q, q, torch.ones(1, 1), torch.ones(3, 5, 5, dtype=torch.bool))
    for bad in [
        dict(kernel="laplace"),
        dict(temp=0.0),
        dict(lam_eps=0.0),
        dict(xsa="subtract"),  # the worked example's mode, not one of the three
        dict(preconditioner="jacobi"),
        dict(tol=1.0),
        dict(max_iter=0),
        dict(rank=0),
        dict(solver="lu"),
    ]:
        with pytest.raises(ValueError, match="KRRConfig"):
            KRRConfig(**bad)
    with pytest.raises(ValueError, match="multiple of heads"):
        MultiHeadKRRConfig(dim=10, heads=4)
    MultiHeadKRRConfig(dim=1, heads=1, krr=KRRConfig(heads=1))  # the smallest model is valid
    with pytest.raises(ValueError, match="krr.heads"):
        MultiHeadKRRConfig(dim=8, heads=4, krr=KRRConfig(heads=2))
    attn = KernelRidgeAttention(KRRConfig(heads=3))
    x4 = randn(2, 4, 5, 4, dtype=torch.float32)
    with pytest.raises(ValueError, match="3 heads"):
        attn(x4, x4, x4)


@pytest.mark.parametrize("path", ["as_it_runs", "forced_fallback"])
@pytest.mark.parametrize("kind", KERNELS)
def test_float32_values_and_gradients_stay_finite_at_extreme_inputs(kind, path):
    # one zero key (no direction), a head of keys scaled by 1e4, eleven duplicated keys (a
    # singular K_kk), lam = 2e-6. The linear kernel is unbounded: with 1e4 keys K ~ 1e9, whose
    # float32 rounding (~1e2) exceeds any small lam, so that system is singular whatever the
    # solver (a clear ValueError, tested below); it gets keys scaled by 1e2 and lam = 3 instead.
    # Which systems PCG leaves unconverged in 5 iterations depends on rounding (it differs
    # between CPU vendors and MKL code paths), so "as_it_runs" asserts nothing about the path,
    # only the result. "forced_fallback" allows one unpreconditioned iteration (the default
    # rank-32 Nystrom preconditioner is exact for 12 keys): one CG step cannot solve head [0, 0]
    # (12 unknowns, at least 5 distinct eigenvalues, a generic right-hand side; its residual
    # after one step is >= 0.1 for every kernel, against tol 1e-4), so the Cholesky fallback
    # provably runs there.
    B, H, n = 2, 2, 12
    k = randn(B, H, n, 4, seed=56, dtype=torch.float32)
    k[0, 0, 0] = 0.0
    k[1, 0, 1:] = k[1, 0, :1]
    huge = k.clone()
    huge[0, 1] = 1e4 * k[0, 1]
    lam = 2e-6
    if kind == "linear":
        k[0, 1], lam = 1e2 * k[0, 1], 3.0
    else:
        k = huge
    forced = dict(max_iter=1, preconditioner="identity")
    cfg = KRRConfig(
        heads=H, kernel=kind, lam_init=lam, lam_eps=1e-6, xsa="mask",
        **(dict(max_iter=5) if path == "as_it_runs" else forced),
    )  # fmt: skip
    attn = KernelRidgeAttention(cfg)
    kk = k.clone().requires_grad_()
    out, _ = attn(kk, kk, kk)
    assert torch.isfinite(out).all()
    if path == "forced_fallback":
        assert attn.last_solve.direct[0, 0]
        k00 = k[0, 0].detach()
        raw = pcg(kernel_matrix(k00, k00, kind), k00, lam, tol=cfg.tol, max_iter=1)
        assert (raw.res > 0.05).all(), raw.res  # what the fallback had to fix
    # against the float64 direct solve: the forward error of a solve whose relative residual is
    # r is at most kappa(A) * r; the float32 answer has r <= tol (PCG) or ~n u (Cholesky). The
    # error is measured on the scale of the output or of the values, whichever is larger (XSA
    # cancels the duplicated head's output to ~0)
    ref_cfg = KRRConfig(
        heads=H, kernel=kind, lam_init=lam, lam_eps=1e-6, xsa="mask", solver="cholesky"
    )
    ref, _ = KernelRidgeAttention(ref_cfg).double()(k.double(), k.double(), k.double())
    K64 = kernel_matrix(k.double(), k.double(), kind)
    ev = torch.linalg.eigvalsh(K64 + (lam + 1e-6) * torch.eye(n, dtype=F64))
    kappa = ev[..., -1] / ev[..., 0]  # [B, H]
    scale = torch.maximum(ref.abs().amax((-2, -1)), k.double().abs().amax((-2, -1)))
    err = (out.detach().double() - ref).abs().amax((-2, -1)) / scale  # [B, H]
    assert (err <= kappa * (cfg.tol + n * torch.finfo(torch.float32).eps)).all(), (err, kappa)
    out.square().mean().backward()
    assert torch.isfinite(kk.grad).all() and torch.isfinite(attn.lam_raw.grad).all()
    if kind == "linear":
        tiny = KernelRidgeAttention(KRRConfig(heads=H, kernel="linear", lam_init=2e-6, max_iter=5))
        with pytest.raises(ValueError, match="not numerically positive definite"):
            tiny(huge, huge, huge)


def test_pcg_breakdown_freezes_the_system_for_the_fallback():
    # r.z <= 0 or p.Ap <= 0 cannot happen for SPD A and P; in rounding it does (numerically
    # singular systems). Forced here with a preconditioner that annihilates column 1: CG would
    # divide 0 by 0; instead that system is frozen at x = 0, unconverged, with finite gradients,
    # and the fallback solves it
    K = spd_kernel(1, 10, seed=57)
    v = randn(1, 10, 2, seed=58).requires_grad_()
    broken = torch.tensor([1.0, 0.0], dtype=F64)
    raw = pcg(K, v, 0.1, lambda r: r * broken, tol=1e-10, max_iter=50)
    assert raw.converged.tolist() == [[True, False]] and (raw.x[..., 1] == 0).all()
    raw.x.sum().backward()
    assert torch.isfinite(v.grad).all()
    solve = solve_spd(K, v, 0.1, precondition=lambda r: r * broken, tol=1e-10, max_iter=50)
    assert solve.direct.all() and solve.converged.all()
    torch.testing.assert_close(solve.x, scipy_solve(K, v, 0.1), rtol=1e-9, atol=1e-10)


# --------------------------------------------------------------------------- modules


def test_multihead_module_shapes_gradients_and_solver_agreement():
    torch.manual_seed(0)
    cfg = MultiHeadKRRConfig(dim=16, heads=4, krr=KRRConfig(heads=4, xsa="projection", rank=4))
    m_pcg = MultiHeadKRRAttention(cfg)
    m_chol = MultiHeadKRRAttention(
        MultiHeadKRRConfig(
            dim=16, heads=4, krr=KRRConfig(heads=4, xsa="projection", rank=4, solver="cholesky")
        )
    )
    m_chol.load_state_dict(m_pcg.state_dict(), strict=False)
    x = torch.randn(3, 9, 16)
    y, w = m_pcg(x, need_weights=True)
    assert y.shape == (3, 9, 16) and w.shape == (3, 4, 9, 9)
    y.square().mean().backward()
    for name, p in m_pcg.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    torch.testing.assert_close(y, m_chol(x)[0], rtol=1e-3, atol=1e-4)
    # cross-attention with a key-padding mask
    cross = MultiHeadKRRAttention(MultiHeadKRRConfig(dim=16, heads=4))
    ctx = torch.randn(3, 11, 16)
    keep = torch.ones(3, 1, 11, dtype=torch.bool)
    keep[:, :, 7:] = False
    y1, _ = cross(x, ctx, mask=keep)
    y2, _ = cross(x, ctx[:, :7])
    torch.testing.assert_close(y1, y2, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="self-attention"):
        m_pcg(x, ctx)


def test_worked_example_section_9():
    """Seed §9 on a 4-head, dim-64 block, seq_len 16, one sample, with mode "projection" (the
    seed's "subtract" is not one of its modes) and step 9's missing /(v . v) restored, applied to
    the output y as §2 defines it. The solve is (K_kk + lam I) alpha = v, output K_qk alpha.

    Measured: lam = 3.0 at init (step 4). Step 6, "fast converges in typically 4-6 iterations":
    the seed's random basis takes 4-5 (relative error of the block's output 8.6e-3 at tol
    1e-2) and plain CG (identity) 4; the Nystrom basis at rank 32 >= 16 is exact, 1 iteration.
    Step 9 as written (on alpha, without /(v . v)) leaves |cos(y_i, v_i)| at most 0.65, mean
    0.27 (without any XSA: 0.81, 0.30); on y with /(v . v) it is 0."""
    torch.manual_seed(0)
    x = torch.randn(1, 16, 64, dtype=F64)
    blocks, outputs, iters = {}, {}, {}
    for basis in ("nystrom", "random"):
        krr = KRRConfig(
            heads=4,
            kernel="exp",
            temp=1.0,
            lam_init=3.0,
            xsa="projection",
            preconditioner="fast",
            basis=basis,
            tol=1e-2,
            max_iter=20,
            rms_alpha=True,
        )
        torch.manual_seed(1)  # the same projections for both
        block = MultiHeadKRRAttention(MultiHeadKRRConfig(dim=64, heads=4, krr=krr)).double()
        outputs[basis] = block(x)[0]
        solve = block.attend.last_solve
        assert solve.converged.all() and not solve.direct.any()
        iters[basis], blocks[basis] = int(solve.iters.max()), block
    assert iters["nystrom"] == 1 and 3 <= iters["random"] <= 6
    block = blocks["nystrom"]
    torch.testing.assert_close(block.attend.lam(), torch.full((4,), 3.0, dtype=F64))

    # independent reference (scipy solve), step by step
    W_q, W_kv, W_o = block.to_q.weight, block.to_kv.weight, block.to_out.weight
    q = (x[0] @ W_q.T).view(16, 4, 16).transpose(0, 1)  # step 1: [H, N, dh]
    k, v = (t.view(16, 4, 16).transpose(0, 1) for t in (x[0] @ W_kv.T).chunk(2, dim=-1))
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    K_kk = torch.exp(unit(k) @ unit(k).mT)  # step 2
    K_qk = torch.exp(unit(q) @ unit(k).mT)
    alpha = scipy_solve(K_kk, v, 3.0)  # steps 4-7
    alpha = alpha / torch.sqrt((alpha**2).mean(-1, keepdim=True) + 1e-6)  # step 8
    y_h = K_qk @ alpha
    y_h = y_h - ((y_h * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True)) * v  # step 9
    ref = (y_h.transpose(0, 1).reshape(16, 64) @ W_o.T).unsqueeze(0)  # step 10
    torch.testing.assert_close(outputs["nystrom"], ref, rtol=1e-6, atol=1e-8)  # 1 iteration
    assert (outputs["random"] - ref).norm() / ref.norm() < 2e-2  # stopped at tol 1e-2

    out_h = block.attend(q, k, v)[0]
    cos = (out_h * v).sum(-1) / (out_h.norm(dim=-1) * v.norm(dim=-1))
    assert cos.abs().max() < 1e-10
    # the seed's step 9 literally: on alpha, without /(v . v)
    a = scipy_solve(K_kk, v, 3.0)
    a = a / torch.sqrt((a**2).mean(-1, keepdim=True) + 1e-6)
    y_seed = K_qk @ (a - (a * v).sum(-1, keepdim=True) * v)
    cos_seed = (y_seed * v).sum(-1) / (y_seed.norm(dim=-1) * v.norm(dim=-1))
    assert cos_seed.abs().max() > 0.3


# --------------------------------------------------------------------------- defaults, boundaries


def test_rbf_kernel_default_bandwidth_is_one():
    """kernel_matrix's default sigma is 1: exp(-|x - y|^2 / 2), written out pair by pair; an
    unknown kernel name is one clear error."""
    x, y = randn(5, 3, seed=60), randn(4, 3, seed=61)
    ref = torch.tensor(
        [[math.exp(-float((a - b).square().sum()) / 2.0) for b in y] for a in x], dtype=F64
    )
    torch.testing.assert_close(kernel_matrix(x, y, "rbf"), ref, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernel_matrix(x, y, "laplace")


def test_bound_is_the_seeds_1e6_and_rms_normalize_defaults_to_eps_1e6():
    """BOUND is seed 001's literal 1e6; rms_normalize's default eps is 1e-6, visible on values
    of rms ~1e-3 (mean(x^2) ~ eps), against x / sqrt(mean(x^2) + 1e-6) written out."""
    clamped = bound(torch.tensor([2.5e6, -7e6, 0.5e6], dtype=F64))
    assert clamped.tolist() == [1e6, -1e6, 0.5e6]
    z = 1e-3 * randn(3, 5, seed=62)
    ref = z / torch.sqrt(z.square().mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms_normalize(z), ref, rtol=1e-12, atol=0.0)
    assert (rms_normalize(z).square().mean(-1) < 0.9).all()  # eps is not negligible here
    scale = 1.0 / torch.sqrt(z.square().mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms_scale(z), scale, rtol=1e-12, atol=0.0)


def test_pcg_defaults_stop_at_tol_1e6_or_after_20_iterations():
    """pcg's defaults: tol 1e-6 (each column stops at the first iteration whose recurrence
    residual is <= 1e-6, on a well-conditioned system) and max_iter 20 (an ill-conditioned
    system, rbf on tight clusters with lam = 1e-3, runs exactly 20 iterations, unconverged)."""
    easy = spd_kernel(1, 30, seed=63)[0]
    v = randn(30, 2, seed=64)
    solve = pcg(easy, v, 1.0)
    hist = torch.stack(solve.history)  # [T + 1, 2]
    assert solve.converged.all() and (solve.res <= 1e-6).all()
    for c in range(2):
        t = int(solve.iters[c])
        assert 1 < t < 20 and hist[t, c] <= 1e-6 < hist[t - 1, c]
    k = clustered(60, 3, 4, 0.2, seed=9)
    hard = kernel_matrix(k, k, "rbf")
    solve = pcg(hard, randn(60, 2, seed=65), 1e-3)
    assert solve.iters.tolist() == [20, 20] and len(solve.history) == 21
    assert not solve.converged.any() and (solve.res > 1e-4).all()


def test_solve_spd_defaults_fall_back_to_cholesky_at_tol_1e6():
    """solve_spd's defaults (PCG, tol 1e-6, max_iter 20, fallback on): the hard system of
    test_pcg_defaults is re-solved by Cholesky and matches scipy; the easy one is PCG's own
    answer, to 1e-6. method "cholesky" reports every matrix direct, no iterations, converged."""
    k = clustered(60, 3, 4, 0.2, seed=9)
    K = torch.stack([kernel_matrix(k, k, "rbf"), spd_kernel(1, 60, seed=66)[0]])
    lam = torch.tensor([1e-3, 1.0], dtype=F64).view(2, 1, 1)
    v = randn(2, 60, 2, seed=67)
    ref = scipy_solve(K, v, lam)
    solve = solve_spd(K, v, lam)
    assert solve.direct.tolist() == [True, False] and solve.iters[0].tolist() == [20, 20]
    assert solve.converged.all() and (solve.res <= 1e-6).all()
    torch.testing.assert_close(solve.x[0], ref[0], rtol=1e-8, atol=1e-8)
    assert ((solve.x[1] - ref[1]).norm(dim=0) / ref[1].norm(dim=0)).max() < 1e-5
    direct = solve_spd(K, v, lam, method="cholesky")
    assert direct.direct.all() and direct.converged.all() and (direct.iters == 0).all()
    assert direct.history == []
    torch.testing.assert_close(direct.x, ref, rtol=1e-8, atol=1e-8)


def test_solver_errors_name_their_cause():
    K = spd_kernel(2, 6, seed=68)
    v = randn(2, 6, 1, seed=69)
    with pytest.raises(ValueError, match="pcg: K must be"):
        pcg(K, v[:, :5], 0.1)
    with pytest.raises(ValueError, match="batch differ"):
        solve_spd(K, v[:1], 0.1)
    bad = K.clone()
    bad[0, 1, 2] = float("inf")
    with pytest.raises(FloatingPointError, match="non-finite kernel"):
        solve_spd(bad, v, 0.1)
    # a preconditioner that returns NaN (a broken one): PCG's x turns NaN from finite inputs
    nan_precondition = lambda r: r * float("nan")  # noqa: E731
    message = (
        "KRR solve: PCG produced non-finite values from finite inputs (enable the fallback, "
        "raise lam, or use float64)"
    )
    with pytest.raises(FloatingPointError, match=f"^{re.escape(message)}$"):
        solve_spd(K, v, 0.1, precondition=nan_precondition, fallback=False)
    repaired = solve_spd(K, v, 0.1, precondition=nan_precondition)
    assert repaired.direct.all() and repaired.converged.all()
    torch.testing.assert_close(repaired.x, scipy_solve(K, v, 0.1), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("lam", [1e-9, torch.tensor(1e-9)])
def test_float32_cholesky_failure_is_refactored_in_float64(lam):
    """[[1, 1], [1, 1]] + 1e-9 I: 1 + 1e-9 rounds to 1 in float32, a singular matrix whose
    Cholesky fails; in float64 it is SPD, and v = (1, -1) (the eigenvector of eigenvalue lam)
    solves to v / lam, returned in float32."""
    K = torch.ones(2, 2)
    v = torch.tensor([[1.0], [-1.0]])
    assert int(torch.linalg.cholesky_ex(K + 1e-9 * torch.eye(2)).info) > 0
    x = cholesky_spd_solve(K, v, lam)
    assert x.dtype == torch.float32
    lam64 = float(torch.as_tensor(lam, dtype=torch.float32))  # the float32 value of 1e-9
    torch.testing.assert_close(x, v / lam64, rtol=1e-5, atol=0.0)


def test_preconditioner_arguments_are_validated():
    for make, message in [
        (lambda: DiagonalPreconditioner(heads=0), "heads and rebuild_every must be >= 1"),
        (lambda: DiagonalPreconditioner(rebuild_every=0), "heads and rebuild_every must be >= 1"),
        (lambda: LowRankPreconditioner(rank=0), "rank and max_len must be >= 1"),
        (lambda: LowRankPreconditioner(max_len=0), "rank and max_len must be >= 1"),
        (lambda: TylerPreconditioner(iters=0), "iters must be >= 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
    made = make_preconditioner("cccp", rebuild_every=4, tyler_iters=3)
    assert isinstance(made, TylerPreconditioner) and (made.iters, made.rebuild_every) == (3, 4)
    made = make_preconditioner("fast", heads=2, rank=5, basis="random", max_len=7)
    assert (made.heads, made.rank, made.basis, made.max_len) == (2, 5, "random", 7)
    assert make_preconditioner("diagonal", rebuild_every=2).rebuild_every == 2


def test_learned_scales_are_floored_at_eps_1e6_and_taken_in_absolute_value():
    """Jacobi: P = 1 / (max(|s|, 1e-6) (diag K + lam)); low rank at full rank: P = (max(|s|,
    1e-6) lam I + K)^-1 (the Nystrom factor reproduces K). Both against the dense closed form
    at s = 0 (the default eps floor) and s = -2 (the absolute value)."""
    x = randn(12, 3, seed=70)
    K = kernel_matrix(x, x, "rbf", sigma=0.5)
    lam = 0.5
    eye = torch.eye(12, dtype=F64)
    for s, eff in ((0.0, 1e-6), (-2.0, 2.0)):
        jacobi, low = DiagonalPreconditioner(), LowRankPreconditioner(rank=12)
        with torch.no_grad():
            jacobi.scale.fill_(s)
            low.scale.fill_(s)
        P = dense_precond(jacobi, K, lam)
        torch.testing.assert_close(P, torch.diag(1.0 / (eff * (torch.diagonal(K) + lam))))
        P = dense_precond(low, K, lam)
        torch.testing.assert_close(P @ (K + eff * lam * eye), eye, rtol=0.0, atol=1e-7)


def test_diag_correction_matches_the_diagonal_of_a():
    """LowRankPreconditioner(diag_correction=True), rank 4 < n: M = D + U U^T has diag(M) =
    diag(K) + lam exactly (the docstring's claim), and differs from the uncorrected M (whose
    diagonal is lam + diag(U U^T) <= diag(A)) by a diagonal only."""
    x = randn(15, 3, seed=71)
    K = kernel_matrix(x, x, "rbf")
    lam = 0.5
    A_diag = torch.diagonal(K) + lam
    M_plain = torch.linalg.inv(dense_precond(LowRankPreconditioner(rank=4), K, lam))
    M_corr = torch.linalg.inv(
        dense_precond(LowRankPreconditioner(rank=4, diag_correction=True), K, lam)
    )
    torch.testing.assert_close(torch.diagonal(M_corr), A_diag, rtol=1e-9, atol=1e-9)
    left_out = A_diag - torch.diagonal(M_plain)
    assert (left_out > -1e-9).all() and left_out.max() > 0.1
    torch.testing.assert_close(M_corr - M_plain, torch.diag(left_out), rtol=0.0, atol=1e-8)
    # on a batch of two kernels, each entry's diagonal
    Kb = torch.stack([K, kernel_matrix(x, x, "rbf", sigma=0.5)])
    pre = LowRankPreconditioner(rank=4, diag_correction=True)
    M_b = torch.linalg.inv(dense_precond(pre, Kb, lam))
    diag = lambda t: torch.diagonal(t, dim1=-2, dim2=-1)  # noqa: E731
    torch.testing.assert_close(diag(M_b), diag(Kb) + lam, rtol=1e-9, atol=1e-9)


def test_random_basis_is_a_seeded_gaussian_scaled_by_one_over_sqrt_rank():
    """The seed's random basis: lr_base = randn(heads, max_len, rank) / sqrt(rank) from a
    generator seeded with `seed` (0 by default), so every module starts from the same basis."""
    pre = LowRankPreconditioner(heads=2, rank=4, basis="random", max_len=6)
    for seed, made in ((0, pre), (3, LowRankPreconditioner(rank=4, basis="random", seed=3))):
        g = torch.Generator().manual_seed(seed)
        heads, max_len = made.lr_base.shape[:2]
        ref = torch.randn(heads, max_len, 4, generator=g) / 2.0
        torch.testing.assert_close(made.lr_base, ref, rtol=0.0, atol=0.0)


@pytest.mark.parametrize(
    "field, bad, ok, message",
    [
        ("heads", 0, 1, "heads must be >= 1"),
        ("temp", 0.0, 1e-9, "temp must be > 0"),
        ("sigma", 0.0, 1e-9, "sigma must be > 0"),
        ("lam_eps", 0.0, 1e-9, "lam_eps must be > 0"),
        ("lam_init", 1e-6, 2e-6, "lam_init must exceed lam_eps"),
        ("xsa", "subtract", "zero", "xsa must be None or one of"),
        ("rank", 0, 1, "rank must be >= 1"),
        ("max_len", 0, 1, "max_len must be >= 1"),
        ("rebuild_every", 0, 1, "rebuild_every must be >= 1"),
        ("tyler_iters", 0, 1, "tyler_iters must be >= 1"),
        ("tol", -1e-9, 0.0, "tol must be in"),
        ("tol", 1.0, 0.999, "tol must be in"),
        ("max_iter", 0, 1, "max_iter must be >= 1"),
        ("rms_eps", 0.0, 1e-12, "rms_eps must be > 0"),
    ],
)
def test_krr_config_rejects_each_field_at_its_boundary(field, bad, ok, message):
    """Each KRRConfig check at its boundary: the first invalid value is refused with its own
    message, the nearest valid one is accepted."""
    with pytest.raises(ValueError, match=f"KRRConfig: {message}"):
        KRRConfig(**{field: bad})
    assert getattr(KRRConfig(**{field: ok}), field) == ok


def test_attention_input_errors_and_the_multihead_shapes():
    q = randn(2, 5, 4)
    one = torch.ones(1, 1, dtype=F64)
    for call, message in [
        (lambda: krr_attention(q, q, q, one, kernel="laplace"), "kernel must be one of"),
        (lambda: krr_attention(q[0, 0], q, q, one), "at least 2-D"),
        (lambda: krr_attention(q, randn(3, 5, 4), randn(3, 5, 2), one), "do not broadcast"),
        (lambda: krr_attention(q, q, q, one, xsa="subtract"), "xsa must be None or one of"),
        (
            # broadcastable, but to a bigger shape than [2, 5, 5]
            lambda: krr_attention(q, q, q, one, torch.ones(3, 2, 5, 5, dtype=torch.bool)),
            "does not broadcast to",
        ),
        (lambda: MultiHeadKRRConfig(dim=0, heads=1), "positive multiple of heads"),
        (lambda: MultiHeadKRRConfig(dim=8, heads=0), "positive multiple of heads"),
    ]:
        with pytest.raises(ValueError, match=message):
            call()
    block = MultiHeadKRRAttention(MultiHeadKRRConfig(dim=8, heads=2))
    x = torch.randn(3, 5, 8, generator=gen(72))
    with pytest.raises(ValueError, match="x must be"):
        block(x[0])
    with pytest.raises(ValueError, match="context must be"):
        block(x, x[:2])
    with pytest.raises(ValueError, match="context must be"):
        block(x, x[..., :4])
    assert MultiHeadKRRConfig(dim=8, heads=2).krr.heads == 2  # the default operator's heads


@pytest.mark.parametrize("xsa", [None, "projection", "zero", "mask"])
def test_xsa_modes_with_a_scale_match_the_closed_form(xsa):
    """XSA with scale s = 0.7 on queries != keys (Nq = Nk), against the seed's formulas written
    out with scipy's solve: "zero"/"mask" scale K_qk's diagonal by (1 - s), "projection"/"mask"
    subtract s (y_i . v_i) / (v_i . v_i) v_i from the output."""
    n = 8
    q, k, v = randn(n, 4, seed=73), randn(n, 4, seed=74), randn(n, 3, seed=75)
    lam, s = 0.4, 0.7
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    K_kk, K_qk = torch.exp(unit(k) @ unit(k).T), torch.exp(unit(q) @ unit(k).T)
    if xsa in ("zero", "mask"):
        K_qk = K_qk - s * torch.diag(torch.diagonal(K_qk))
    y = K_qk @ scipy_solve(K_kk, v, lam)
    if xsa in ("projection", "mask"):
        y = y - s * ((y * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True)) * v
    out, w, _ = krr_attention(
        q, k, v, torch.tensor(lam, dtype=F64).view(1, 1), xsa=xsa,
        xsa_scale=torch.tensor([s], dtype=F64), tol=1e-12, max_iter=100, need_weights=True,
    )  # fmt: skip
    torch.testing.assert_close(out, y, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(w @ v, y, rtol=1e-9, atol=1e-10)


def test_krr_attention_defaults_solve_to_tol_1e4_with_rms_eps_1e6():
    """krr_attention with only (q, k, v, lam): the exp kernel at temp 1 on normalised inputs,
    PCG to tol 1e-4 (kappa(A) < 20 here, so out is within 2e-3 of the exact KRR), and with
    rms_alpha the default rms_eps 1e-6, visible on values of rms ~1e-3."""
    q, k = randn(6, 4, seed=76), randn(9, 4, seed=77)
    v = 1e-3 * randn(9, 3, seed=78)
    lam = torch.tensor(1.0, dtype=F64).view(1, 1)
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    K_kk, K_qk = torch.exp(unit(k) @ unit(k).T), torch.exp(unit(q) @ unit(k).T)
    ev = torch.linalg.eigvalsh(K_kk + torch.eye(9, dtype=F64))
    assert ev[-1] / ev[0] < 20
    alpha = scipy_solve(K_kk, v, 1.0)
    out, w, solve = krr_attention(q, k, v, lam)
    assert w is None and solve.converged.all() and (solve.res <= 1e-4).all()
    assert (out - K_qk @ alpha).norm() / (K_qk @ alpha).norm() < 2e-3
    out, _, _ = krr_attention(q, k, v, lam, rms_alpha=True)
    ref = K_qk @ (alpha / torch.sqrt(alpha.square().mean(-1, keepdim=True) + 1e-6))
    assert (out - ref).norm() / ref.norm() < 2e-3


def test_a_mask_is_one_system_for_every_query_exactly_when_it_is_a_key_mask():
    """_mask_rows: a key mask [Nk] or [..., 1, Nk] gives E = 1 system row, a per-query mask
    [Nq, Nk] gives E = Nq (here Nq = 2)."""
    keys = torch.tensor([True, False, True])
    assert _mask_rows(keys, torch.Size([4]), 2, 3).shape == (4, 1, 3)
    assert _mask_rows(keys.view(1, 3), torch.Size([4]), 2, 3).shape == (4, 1, 3)
    per_query = torch.tensor([[True, False, True], [True, True, False]])
    got = _mask_rows(per_query, torch.Size([4]), 2, 3)
    assert got.shape == (4, 2, 3) and torch.equal(got[1], per_query)


def test_a_per_query_mask_over_two_queries_regresses_each_on_its_own_keys():
    """Two queries, each with its own allowed keys: each output is kernel ridge regression on
    those keys alone (scipy), and a default call returns no weights."""
    q, k, v = randn(2, 3, seed=60), randn(6, 3, seed=61), randn(6, 2, seed=62)
    allowed = torch.tensor([[1, 1, 0, 1, 0, 1], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)
    attn = KernelRidgeAttention(KRRConfig(kernel="rbf", lam_init=0.2, tol=1e-12, max_iter=100))
    out, none = attn.double()(q, k, v, mask=allowed)
    assert none is None and out.shape == (2, 2)  # unbatched inputs keep their shape
    lam = float(attn.lam())
    for i in range(2):
        ref = krr_reference(q[i : i + 1], k[allowed[i]], v[allowed[i]], lam, "rbf")
        torch.testing.assert_close(out[i : i + 1], ref, rtol=1e-9, atol=1e-10)
    out_w, w = attn(q, k, v, mask=allowed, need_weights=True)
    assert w.shape == (2, 6) and (w[~allowed] == 0).all()
    torch.testing.assert_close(w @ v, out_w, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(out_w, out, rtol=1e-9, atol=1e-10)


def test_xsa_projects_out_values_of_any_length():
    """xsa_project against its closed form y - s (y.v / v.v) v for values of norm < 1 and > 1
    (the zero test is v.v > 0, not a threshold)."""
    y, v = randn(4, 3, seed=63), randn(4, 3, seed=64)
    v = (
        v
        * torch.tensor([0.01, 0.5, 2.0, 30.0], dtype=F64).unsqueeze(-1)
        / v.norm(dim=-1, keepdim=True)
    )
    scale = torch.tensor(0.7, dtype=F64)
    got, c = xsa_project(y, v, scale)
    want_c = 0.7 * (y * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True)
    torch.testing.assert_close(c, want_c, rtol=1e-13, atol=0)
    torch.testing.assert_close(got, y - want_c * v, rtol=1e-13, atol=1e-15)


def test_a_detached_solve_keeps_every_field_and_cuts_the_graph():
    x = randn(3, 2, seed=65).requires_grad_()
    res, history = torch.rand(2, dtype=F64), [torch.ones(2, dtype=F64)]
    solve = Solve(2 * x, torch.tensor([4, 5]), torch.tensor([True, False]), res, history, None)
    cut = solve.detached()
    assert not cut.x.requires_grad and torch.equal(cut.x, 2 * x.detach())
    assert cut.iters is solve.iters and cut.converged is solve.converged
    assert cut.res is res and cut.history is history and cut.direct is None


# --------------------------------------------------------------------------- options reach the math


def _gram(kind, a, b, temp=1.0, sigma=1.0):
    """exp(<a_i, b_j> / temp) (inputs not normalised) or exp(-|a_i - b_j|^2 / (2 sigma^2)),
    pair by pair."""
    if kind == "exp":
        f = lambda x, y: math.exp(float(x @ y) / temp)  # noqa: E731
    else:
        f = lambda x, y: math.exp(-float((x - y).square().sum()) / (2.0 * sigma**2))  # noqa: E731
    return torch.tensor([[f(x, y) for y in b] for x in a], dtype=F64)


@pytest.mark.parametrize("kind", ["exp", "rbf"])
def test_kernel_options_reach_both_kernels_in_the_function_and_the_module(kind):
    """temp and normalize_inputs=False (exp) and sigma (rbf) shape K_kk and K_qk alike, given to
    krr_attention or in KernelRidgeAttention's config: against the kernels written out pair by
    pair and scipy's solve."""
    q, k, v = 0.5 * randn(5, 3, seed=80), 0.5 * randn(7, 3, seed=81), randn(7, 2, seed=82)
    opts = dict(temp=0.5, normalize_inputs=False) if kind == "exp" else dict(sigma=0.6)
    gram = lambda a, b: _gram(kind, a, b, temp=0.5, sigma=0.6)  # noqa: E731
    lam = torch.tensor(0.3, dtype=F64).view(1, 1)
    out, _, _ = krr_attention(q, k, v, lam, kernel=kind, tol=1e-12, max_iter=100, **opts)
    ref = gram(q, k) @ scipy_solve(gram(k, k), v, 0.3)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
    attn = KernelRidgeAttention(KRRConfig(kernel=kind, lam_init=0.3, tol=1e-12, **opts)).double()
    out, _ = attn(q, k, v)
    ref = gram(q, k) @ scipy_solve(gram(k, k), v, float(attn.lam().detach()))
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)


def test_krr_attention_runs_20_iterations_then_falls_back_unless_told_not_to():
    """A hard system (rbf on tight clusters, lam = 1e-3): with krr_attention's defaults (no
    preconditioner, tol 1e-4) PCG stops after max_iter = 20 unconverged and the Cholesky fallback
    gives scipy's answer; fallback=False, to the function or in the module's config, keeps PCG's
    unconverged answer; solver="cholesky" in the config solves directly, with no iterations."""
    k = clustered(60, 3, 4, 0.2, seed=9)
    q, v = randn(4, 3, seed=83), randn(60, 2, seed=84)
    lam = torch.tensor(1e-3, dtype=F64).view(1, 1)
    out, _, solve = krr_attention(q, k, v, lam, kernel="rbf")
    assert solve.iters.tolist() == [20, 20] and solve.direct and solve.converged.all()
    torch.testing.assert_close(out, krr_reference(q, k, v, 1e-3, "rbf"), rtol=1e-8, atol=1e-8)
    assert not krr_attention(q, k, v, lam, kernel="rbf", fallback=False)[2].converged.any()
    cfg = dict(kernel="rbf", lam_init=1e-3, preconditioner="identity")
    pcg_only = KernelRidgeAttention(KRRConfig(**cfg, fallback=False)).double()
    pcg_only(q, k, v)
    assert pcg_only.last_solve.iters.tolist() == [20, 20]
    assert not pcg_only.last_solve.converged.any()
    direct = KernelRidgeAttention(KRRConfig(**cfg, solver="cholesky")).double()
    out, _ = direct(q, k, v)
    assert direct.last_solve.iters.tolist() == [0, 0] and direct.last_solve.direct
    ref = krr_reference(q, k, v, float(direct.lam().detach()), "rbf")
    torch.testing.assert_close(out, ref, rtol=1e-8, atol=1e-8)


def _xsa_mask_reference(q, k, v, lam, s):
    """XSA "mask" written out: K_qk's diagonal scaled by 1 - s, then s (y.v / v.v) v removed."""
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    K_kk, K_qk = torch.exp(unit(k) @ unit(k).mT), torch.exp(unit(q) @ unit(k).mT)
    y = (K_qk - s * torch.diag(torch.diagonal(K_qk))) @ scipy_solve(K_kk, v, lam)
    return y - s * ((y * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True)) * v


def test_lam_and_the_xsa_scale_are_taken_in_the_queries_dtype_and_the_scale_defaults_to_one():
    """lam as a Python float is 0.1 in float64 inputs' dtype (scipy's 0.1, not float32's); a
    float64 lam, or a float64 module, with float32 inputs gives float32 outputs and weights;
    XSA without a scale uses 1 (the closed form at s = 1)."""
    q, k, v = randn(6, 4, seed=85), randn(6, 4, seed=86), randn(6, 3, seed=87)
    out, _, _ = krr_attention(q, k, v, 0.1, solver="cholesky")
    torch.testing.assert_close(out, krr_reference(q, k, v, 0.1), rtol=1e-12, atol=1e-13)
    out, _, _ = krr_attention(q, k, v, 0.1, xsa="mask", solver="cholesky")
    torch.testing.assert_close(out, _xsa_mask_reference(q, k, v, 0.1, 1.0), rtol=1e-9, atol=1e-12)
    q32, k32, v32 = q.float(), k.float(), v.float()
    lam64 = torch.tensor([[0.1]], dtype=F64)
    out, w, _ = krr_attention(q32, k32, v32, lam64, solver="cholesky", need_weights=True)
    assert out.dtype == w.dtype == torch.float32
    torch.testing.assert_close(out.double(), krr_reference(q, k, v, 0.1), rtol=1e-4, atol=1e-5)
    attn = KernelRidgeAttention(KRRConfig(xsa="mask", solver="cholesky")).double()
    with torch.no_grad():
        attn.xsa_scale.fill_(0.8)
    out, w = attn(q32, k32, v32, need_weights=True)
    assert out.dtype == w.dtype == torch.float32
    ref = _xsa_mask_reference(q, k, v, float(attn.lam().detach()), 0.8)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)


def test_leading_dims_broadcast_from_any_input_and_lam_meets_the_mask_per_entry():
    """A batch axis on the keys or on the values alone broadcasts the whole call; lam with one
    value per entry of the last of four batch axes ([1, 1, 1, 2, 1, 1]) under a key mask gives
    each entry its own lam. Against scipy, entry by entry."""
    q, one = randn(5, 4, seed=91), torch.tensor(0.2, dtype=F64).view(1, 1)
    k, v = randn(2, 6, 4, seed=92), randn(2, 6, 3, seed=93)
    for keys, values in ((k, v[0]), (k[0], v)):
        out, _, _ = krr_attention(q, keys, values, one, solver="cholesky")
        assert out.shape == (2, 5, 3)
        for b in range(2):
            ref = krr_reference(q, keys.expand(2, 6, 4)[b], values.expand(2, 6, 3)[b], 0.2)
            torch.testing.assert_close(out[b], ref, rtol=1e-10, atol=1e-12)
    lams = [0.1, 1.0]
    lam = torch.tensor(lams, dtype=F64).view(1, 1, 1, 2, 1, 1)
    keep = torch.tensor([True, False, True, True, False, True])
    out, _, _ = krr_attention(q, k.view(1, 1, 1, 2, 6, 4), v, lam, keep, solver="cholesky")
    for b in range(2):
        ref = krr_reference(q, k[b][keep], v[b][keep], lams[b])
        torch.testing.assert_close(out[0, 0, 0, b], ref, rtol=1e-10, atol=1e-12)


def test_rms_eps_reaches_the_scaling_of_alpha():
    """rms_alpha with rms_eps = 1e-2 (given to krr_attention or in the config), on values of rms
    ~0.1 where eps is not negligible: alpha / sqrt(mean(alpha^2) + 1e-2) written out."""
    q, k, v = randn(5, 4, seed=100), randn(7, 4, seed=101), 0.1 * randn(7, 3, seed=102)
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    K_kk, K_qk = torch.exp(unit(k) @ unit(k).T), torch.exp(unit(q) @ unit(k).T)
    lam = torch.tensor(0.5, dtype=F64).view(1, 1)
    opts = dict(rms_alpha=True, rms_eps=1e-2, solver="cholesky")
    attn = KernelRidgeAttention(KRRConfig(lam_init=0.5, **opts)).double()
    for out, lam_value in (
        (krr_attention(q, k, v, lam, **opts)[0], 0.5),
        (attn(q, k, v)[0], float(attn.lam().detach())),
    ):
        alpha = scipy_solve(K_kk, v, lam_value)
        ref = K_qk @ (alpha / torch.sqrt(alpha.square().mean(-1, keepdim=True) + 1e-2))
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


def test_errors_of_the_attention_calls_are_exact():
    """The messages in full (anchored), for the inputs that raise them."""
    q, one = randn(5, 4), torch.ones(1, 1, dtype=F64)
    two_d = "queries, keys and values must be at least 2-D: [..., N, d]"
    for args in ((q, q[0], q), (q, q, q[0])):
        with pytest.raises(ValueError, match=f"^{re.escape(two_d)}$"):
            krr_attention(*args, one)
    choices = f"KRRConfig.kernel must be one of {KERNELS}, got 'laplace'"
    with pytest.raises(ValueError, match=f"^{re.escape(choices)}$"):
        KRRConfig(kernel="laplace")
    block = MultiHeadKRRAttention(
        MultiHeadKRRConfig(dim=8, heads=2, krr=KRRConfig(heads=2, xsa="zero"))
    )
    x = torch.randn(3, 5, 8, generator=gen(103))
    xsa = "XSA removes each token's own value: use it for self-attention"
    with pytest.raises(ValueError, match=f"^{re.escape(xsa)}$"):
        block(x, x)
    plain = MultiHeadKRRAttention(MultiHeadKRRConfig(dim=8, heads=2))
    with pytest.raises(
        ValueError, match=f"^{re.escape('context must be [3, N, 8], got (2, 5, 8)')}$"
    ):
        plain(x, x[:2])


def test_the_modules_build_what_their_configs_say():
    """KernelRidgeAttention: the preconditioner takes the config's heads, rank, basis, max_len,
    rebuild_every (and tyler_iters for cccp); no XSA scale without XSA; no solve record before
    the first call. MultiHeadKRRAttention: bias=True puts a bias in all three projections, a
    default call returns no weights, and a per-query mask [B, Nq, Nk] acts as its head-axis
    form [B, 1, Nq, Nk]."""
    attn = KernelRidgeAttention(
        KRRConfig(heads=3, rank=5, basis="random", max_len=40, rebuild_every=4)
    )
    pre = attn.preconditioner
    assert (pre.heads, pre.rank, pre.basis, pre.max_len, pre.rebuild_every) == (
        3,
        5,
        "random",
        40,
        4,
    )
    assert attn.xsa_scale is None and attn.last_solve is None
    cccp = KernelRidgeAttention(KRRConfig(preconditioner="cccp", tyler_iters=3)).preconditioner
    assert isinstance(cccp, TylerPreconditioner) and cccp.iters == 3
    torch.manual_seed(0)
    block = MultiHeadKRRAttention(MultiHeadKRRConfig(dim=8, heads=2, bias=True)).double()
    assert all(lin.bias is not None for lin in (block.to_q, block.to_kv, block.to_out))
    x = torch.randn(2, 5, 8, generator=gen(104), dtype=F64)
    assert block(x)[1] is None
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand(2, 5, 5)
    y3, w3 = block(x, mask=causal, need_weights=True)
    y4, w4 = block(x, mask=causal.unsqueeze(1), need_weights=True)
    torch.testing.assert_close(y3, y4, rtol=0.0, atol=0.0)
    torch.testing.assert_close(w3, w4, rtol=0.0, atol=0.0)


# --------------------------------------------------------------------------- solver records


def test_the_direct_solve_record_and_zero_columns_at_tol_0():
    """method "cholesky": direct is a bool per matrix ([...] = K's batch shape), iters int64
    zeros, res the true relative residual |v - A x| / |v| recomputed here. A zero right-hand side
    is solved by x = 0 exactly, residual 0 <= tol = 0: converged on the direct path and after
    PCG's fallback (which re-checks every column of a matrix it re-solves)."""
    K = spd_kernel(3, 8, seed=105)
    v = randn(3, 8, 2, seed=106)
    v[..., 1] = 0.0
    lam = 0.5
    for method in ("cholesky", "pcg"):
        solve = solve_spd(K, v, lam, method=method, tol=0.0)
        assert solve.direct.dtype == torch.bool and solve.direct.tolist() == [True] * 3
        assert solve.converged[:, 1].all() and (solve.x[..., 1] == 0).all()
        r = v - (K + lam * torch.eye(8, dtype=F64)) @ solve.x
        torch.testing.assert_close(solve.res[:, 0], r[..., 0].norm(dim=-1) / v[..., 0].norm(dim=-1))
        assert (solve.res[:, 1] == 0).all()
    assert solve.iters.dtype == torch.int64
    direct = solve_spd(K, v, lam, method="cholesky")
    assert direct.iters.dtype == torch.int64 and direct.iters.tolist() == [[0, 0]] * 3


def test_tyler_scatter_starts_from_the_identity_and_normalises_each_batch_entry():
    """iters = 0 returns Sigma_0 = I in the batch shape; one step from I on a batch of two
    sample sets is, entry by entry, p U^T U / trace(U^T U) with U the rows scaled to unit
    length (x_i x_i^T / (x_i^T I^-1 x_i)), each of trace p."""
    x = randn(2, 7, 3, seed=107)
    x[1] = 10.0 * x[1] @ torch.diag(torch.tensor([1.0, 3.0, 0.2], dtype=F64))
    assert torch.equal(tyler_scatter(x, 0), torch.eye(3, dtype=F64).expand(2, 3, 3))
    sigma = tyler_scatter(x, 1)
    for b in range(2):
        u = x[b] / x[b].norm(dim=-1, keepdim=True)
        ref = 3.0 * (u.T @ u) / torch.trace(u.T @ u)
        torch.testing.assert_close(sigma[b], ref, rtol=1e-12, atol=1e-14)


def test_preconditioner_defaults_and_arguments():
    """Every preconditioner has one head and rebuilds on every call by default (rebuild_every =
    1; the step counter counts the calls); make_preconditioner's and LowRankPreconditioner's
    defaults are KRRConfig's (rank, max_len >= 1 allowed down to 1); make_preconditioner passes
    heads and rebuild_every to every kind; a preconditioner with 2 heads refuses a kernel
    without a head axis of 2 (one clear error); Jacobi with heads = 3 scales each head's
    diagonal by its own |s|."""
    K = spd_kernel(3, 6, seed=108)
    for pre in (
        IdentityPreconditioner(),
        DiagonalPreconditioner(),
        TylerPreconditioner(),
        LowRankPreconditioner(rank=2),
        make_preconditioner("identity"),
        make_preconditioner("fast"),
        make_preconditioner("cccp"),
    ):
        pre.prepare(K, 0.1)
        pre.prepare(K, 0.1)
        assert pre.n_builds == 2 and pre.step == 2, pre
    every_other = LowRankPreconditioner(rank=2, rebuild_every=2)
    for _ in range(4):
        every_other.prepare(K, 0.1)
    assert (every_other.n_builds, every_other.step) == (2, 4)
    cfg = KRRConfig()
    low = LowRankPreconditioner(basis="random")
    assert (low.rank, low.max_len, low.rebuild_every) == (cfg.rank, cfg.max_len, cfg.rebuild_every)
    assert low.lr_base.shape == (1, cfg.max_len, cfg.rank)
    assert LowRankPreconditioner(rank=1, basis="random", max_len=1).lr_base.shape == (1, 1, 1)
    two = LowRankPreconditioner(heads=2, rank=2)
    for bad in (K, K[0]):
        message = (
            f"preconditioner has 2 heads: expected the kernel's axis -3 to be heads, got shape "
            f"{tuple(bad.shape)}"
        )
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            two.prepare(bad, 0.1)
    fast, cccp = make_preconditioner("fast"), make_preconditioner("cccp")
    assert (fast.heads, fast.rank, fast.basis, fast.max_len, fast.rebuild_every) == (
        cfg.heads, cfg.rank, cfg.basis, cfg.max_len, cfg.rebuild_every,
    )  # fmt: skip
    assert cccp.iters == TylerPreconditioner().iters == cfg.tyler_iters
    for name in PRECONDITIONERS:
        made = make_preconditioner(name, heads=3, rebuild_every=4)
        assert (made.heads, made.rebuild_every) == (3, 4), name
    jacobi = DiagonalPreconditioner(heads=3)
    s = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    with torch.no_grad():
        jacobi.scale.copy_(s)
    ref = torch.diag_embed(1.0 / (s.abs().view(3, 1) * (torch.diagonal(K, dim1=-2, dim2=-1) + 0.1)))
    torch.testing.assert_close(dense_precond(jacobi, K, 0.1), ref, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("pre", ["diagonal", "fast", "random", "cccp"])
def test_float64_modules_take_float32_inputs_in_float32_whatever_the_default_dtype(pre):
    """The module's parameters (lam, the XSA scale, per-head preconditioner scales and
    importances, the random basis) are taken in the inputs' dtype: a float64 module on float32
    inputs, and a float32 module on float32 inputs under a float64 default dtype, give float32
    outputs and weights, close to the float64 computation (causal mask, XSA, three heads)."""
    x = randn(2, 3, 6, 4, seed=110)
    basis = "random" if pre == "random" else "nystrom"
    cfg = KRRConfig(heads=3, preconditioner="fast" if pre == "random" else pre, basis=basis,
                    rank=3, max_len=8, xsa="mask", tol=1e-6, max_iter=50)  # fmt: skip
    attn = KernelRidgeAttention(cfg).double()
    with torch.no_grad():
        attn.xsa_scale.fill_(0.8)
        for p in attn.preconditioner.parameters():
            p.copy_(0.5 + randn(*p.shape, seed=111).abs())  # scale, importance
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    ref, ref_w = attn(x, x, x, mask=causal, need_weights=True)
    x32 = x.float()
    outs = [attn(x32, x32, x32, mask=causal, need_weights=True)]
    attn32 = KernelRidgeAttention(cfg)
    attn32.load_state_dict(attn.float().state_dict())
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for mask in (causal, causal[-1]):  # per-query and key padding
            outs.append(attn32(x32, x32, x32, mask=mask, need_weights=True))
    finally:
        torch.set_default_dtype(default)
    ref_pad, ref_pad_w = attn.double()(x, x, x, mask=causal[-1], need_weights=True)
    for (out, w), (r, rw) in zip(
        outs, [(ref, ref_w), (ref, ref_w), (ref_pad, ref_pad_w)], strict=True
    ):
        assert out.dtype == w.dtype == torch.float32
        torch.testing.assert_close(out.double(), r, rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(w.double(), rw, rtol=1e-3, atol=1e-4)


def test_the_low_rank_preconditioner_inverts_its_weighted_basis():
    """P = (|s| lam I + U U^T)^-1 with U = B diag(softplus(w)): the random basis B (lr_base's
    first n rows), importance w and scale s = -1.5 set by hand, written out densely (softplus
    as log(1 + e^w))."""
    pre = LowRankPreconditioner(rank=3, basis="random", max_len=10).double()
    w = randn(1, 3, seed=112)
    with torch.no_grad():
        pre.importance.copy_(w)
        pre.scale.fill_(-1.5)
    K = spd_kernel(1, 8, seed=113)[0]
    U = pre.lr_base[0, :8] * torch.log1p(torch.exp(w[0]))
    ref = torch.linalg.inv(1.5 * 0.2 * torch.eye(8, dtype=F64) + U @ U.T)
    torch.testing.assert_close(dense_precond(pre, K, 0.2), ref, rtol=1e-10, atol=1e-12)


def test_pcg_stopping_rule_and_breakdown_guards_at_their_boundaries():
    """pcg's rule |r| <= tol |v| and its breakdown guards, on systems whose CG steps are exact
    in floating point. tol = 1: r_0 = v already meets it, so nothing runs (x = 0, iters 0 as
    int64, converged with res = 1 <= 1, history [|v| / |v|] = [1], 0 for a zero column).
    A = 2I (K = I, lam = 1): one step gives x = v / 2 and r = 0 exactly, and at tol = 0 the
    system stops there (0 <= 0): one iteration, history [1, 0]. Breakdown before the first
    step: A = 0 (K = -I, lam = 1: p.Ap = 0) and an indefinite P with r.z = 0 (P = diag(1, -1),
    v = (1, 1)) freeze the system at x = 0, no iteration counted. A non-square K is refused."""
    K = spd_kernel(1, 6, seed=120)[0]
    v = randn(6, 2, seed=121)
    v[:, 1] = 0.0
    solve = pcg(K, v, 0.1, tol=1.0)
    assert solve.iters.dtype == torch.int64 and solve.iters.tolist() == [0, 0]
    assert (solve.x == 0).all() and solve.converged.all() and solve.res.tolist() == [1.0, 0.0]
    assert len(solve.history) == 1 and solve.history[0].tolist() == [1.0, 0.0]
    eye = torch.eye(4, dtype=F64)
    w = randn(4, 1, seed=122)
    solve = pcg(eye, w, 1.0, tol=0.0)
    assert solve.iters.tolist() == [1] and torch.equal(solve.x, w / 2) and solve.converged.all()
    assert torch.cat(solve.history).tolist() == [1.0, 0.0]
    flip = torch.tensor([[1.0], [-1.0]], dtype=F64)
    for K_, v_, precondition in (
        (-eye, w, None),
        (eye[:2, :2], torch.ones(2, 1, dtype=F64), flip.mul),
    ):
        solve = pcg(K_, v_, 1.0, precondition, tol=1e-10, max_iter=5)
        assert solve.iters.tolist() == [0] and (solve.x == 0).all() and not solve.converged.any()
    bad = f"pcg: K must be [..., n, n] and v [..., n, m]; got {K[:, :5].shape}, {v[:5].shape}"
    with pytest.raises(ValueError, match=f"^{re.escape(bad)}$"):
        pcg(K[:, :5], v[:5], 0.1)


def test_a_frozen_system_restarts_its_search_direction():
    """A system frozen by breakdown (P = -I on matrix 1 makes r.z < 0) takes beta = 0, so its
    search direction is z again each iteration, not an accumulation: with right-hand sides of
    1e307, which 20 accumulated directions would overflow, its x stays exactly 0 while matrix 0
    (rbf on tight clusters, lam = 1e-3) iterates on."""
    k = clustered(60, 3, 4, 0.2, seed=9)
    K = torch.stack([kernel_matrix(k, k, "rbf"), torch.zeros(60, 60, dtype=F64)])
    v = torch.stack([randn(60, 1, seed=123), torch.full((60, 1), 1e307, dtype=F64)])
    sign = torch.tensor([1.0, -1.0], dtype=F64).view(2, 1, 1)
    solve = pcg(K, v, 1e-3, sign.mul, tol=1e-12, max_iter=25)
    assert solve.iters.tolist() == [[25], [0]]
    assert (solve.x[1] == 0).all() and torch.isfinite(solve.x).all()
