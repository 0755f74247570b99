"""geometry.su2: Pauli algebra, the chiral projector (seed 003 Def 285), commitment strength and
its SU(2) invariance (Thm 101), degenerate directions, and the seed listing's real proxy."""

from __future__ import annotations

import mpmath
import torch

from geometry import su2

F64 = torch.float64


def levi_civita() -> torch.Tensor:
    eps = torch.zeros(3, 3, 3, dtype=torch.complex128)
    for a, b, c in [(0, 1, 2), (1, 2, 0), (2, 0, 1)]:
        eps[a, b, c], eps[b, a, c] = 1, -1
    return eps


def test_pauli_algebra():
    s = su2.pauli()
    eye = torch.eye(2, dtype=torch.complex128)
    prod = torch.einsum("aij,bjk->abik", s, s)
    ref = torch.eye(3)[:, :, None, None] * eye + 1j * torch.einsum(
        "abc,cik->abik", levi_civita(), s
    )
    torch.testing.assert_close(prod, ref)
    torch.testing.assert_close(s, s.conj().transpose(-1, -2))  # Hermitian


def _random_directions(n, seed, scale=1.0):
    return scale * torch.randn(
        n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )


def test_projector_is_rank_one_hermitian_idempotent():
    n = _random_directions(256, 0, scale=3.0)
    proj, degenerate = su2.chiral_projector(n)
    assert not degenerate.any()
    assert (proj - proj @ proj).abs().amax() < 1e-10
    assert (proj - proj.conj().transpose(-1, -2)).abs().amax() < 1e-10
    trace = torch.diagonal(proj, dim1=-2, dim2=-1).sum(-1)
    assert (trace - 1).abs().max() < 1e-10
    # it projects onto the +1 eigenspace of n_hat . sigma
    n_hat = n / n.norm(dim=-1, keepdim=True)
    n_sigma = torch.einsum("...a,aij->...ij", n_hat.to(torch.complex128), su2.pauli())
    assert (n_sigma @ proj - proj).abs().amax() < 1e-10


def _seed_listing_real_projector(n: torch.Tensor) -> torch.Tensor:
    """The seed 003 listing's ChiralProjector: sigma_2 replaced by the real [[0, -1], [1, 0]]."""
    n_hat = n / n.norm(dim=-1, keepdim=True)
    s1 = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=n.dtype)
    s2 = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=n.dtype)
    s3 = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=n.dtype)
    x, y, z = n_hat.unbind(-1)
    return 0.5 * (
        torch.eye(2, dtype=n.dtype)
        + x[:, None, None] * s1
        + y[:, None, None] * s2
        + z[:, None, None] * s3
    )


def test_seed_listing_real_proxy_is_not_idempotent():
    n = _random_directions(256, 1)
    fake = _seed_listing_real_projector(n)
    violation = torch.linalg.matrix_norm(fake - fake @ fake)
    # exact: (P - P^2) = n_2^2 / 2 * I for the proxy, so ||.||_F = n_2^2 / sqrt(2)
    n_hat = n / n.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(violation, n_hat[:, 1] ** 2 / 2**0.5)
    assert violation.max() > 0.3


def test_degenerate_direction_gives_flag_and_zero_commitment():
    n = torch.tensor(
        [[0.0, 0.0, 0.0], [1e-9, 0.0, 0.0], [0.0, 1.0, 0.0]],
        dtype=torch.float64,
        requires_grad=True,
    )
    proj, degenerate = su2.chiral_projector(n)
    assert degenerate.tolist() == [True, True, False]
    assert (proj[:2] == 0).all()  # not I/2: no fake projector
    psi = torch.randn(3, 2, 5, dtype=torch.complex128)
    c = su2.commitment_strength(psi, proj)
    assert (c[:2] == 0).all() and (c[2] > 0).all()
    (g,) = torch.autograd.grad(c.sum(), n)
    assert torch.isfinite(g).all()


def test_commitment_is_su2_invariant_thm_101():
    g = torch.Generator().manual_seed(2)
    n = _random_directions(64, 3)
    psi = torch.complex(
        torch.randn(64, 2, 7, generator=g, dtype=torch.float64),
        torch.randn(64, 2, 7, generator=g, dtype=torch.float64),
    )
    u = su2.su2_element(_random_directions(64, 4, scale=2.0))
    # U is in SU(2)
    eye = torch.eye(2, dtype=torch.complex128)
    torch.testing.assert_close(u @ u.conj().transpose(-1, -2), eye.expand(64, 2, 2))
    torch.testing.assert_close(torch.linalg.det(u), torch.ones(64, dtype=torch.complex128))
    rot = su2.adjoint_rotation(u)
    torch.testing.assert_close(
        rot @ rot.transpose(-1, -2), torch.eye(3, dtype=torch.float64).expand(64, 3, 3)
    )
    proj, _ = su2.chiral_projector(n)
    proj_u, _ = su2.chiral_projector(torch.einsum("bij,bj->bi", rot, n))
    # Pi transforms in the adjoint: Pi(R n) = U Pi(n) U^dagger
    torch.testing.assert_close(proj_u, u @ proj @ u.conj().transpose(-1, -2))
    c = su2.commitment_strength(psi, proj)
    c_u = su2.commitment_strength(u @ psi, proj_u)
    torch.testing.assert_close(c_u, c)
    # and it is a real number between 0 and |Psi|^2 per channel
    assert (c >= -1e-12).all() and (c <= psi.abs().square().sum(-2) + 1e-12).all()


def test_gradcheck():
    n = _random_directions(3, 5).requires_grad_(True)
    psi = torch.randn(3, 2, 4, dtype=torch.complex128, requires_grad=True)

    def projector_real_imag(nn):
        p, _ = su2.chiral_projector(nn)
        return torch.view_as_real(p)

    assert torch.autograd.gradcheck(projector_real_imag, (n,))
    assert torch.autograd.gradcheck(
        lambda nn, ps: su2.commitment_strength(ps, su2.chiral_projector(nn)[0]), (n, psi)
    )


def test_su2_exp_closed_form_matches_matrix_exp():
    theta = torch.cat(
        [_random_directions(64, 6, scale=4.0), torch.zeros(1, 3, dtype=torch.float64)]
    )
    gen = torch.einsum("...a,aij->...ij", theta.to(torch.complex128), su2.pauli())
    torch.testing.assert_close(su2.su2_exp(theta), torch.linalg.matrix_exp(-0.5j * gen))
    t = _random_directions(3, 7).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: torch.view_as_real(su2.su2_exp(x)), (t,))
    tz = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)  # smooth at theta = 0
    (g,) = torch.autograd.grad(torch.view_as_real(su2.su2_exp(tz)).sum(), tz)
    assert torch.isfinite(g).all()


def test_su2_quaternion_is_the_closed_form_exponential():
    """q_0 I - i q . sigma rebuilt from su2_quaternion is su2_exp's matrix, a unit quaternion,
    with finite gradients at theta = 0."""
    theta = torch.cat(
        [_random_directions(64, 8, scale=4.0), torch.zeros(1, 3, dtype=torch.float64)]
    )
    q = su2.su2_quaternion(theta)  # [65, 4]
    eye = torch.eye(2, dtype=torch.complex128)
    rebuilt = q[:, :1, None] * eye - 1j * torch.einsum(
        "ba,aij->bij", q[:, 1:].cdouble(), su2.pauli()
    )
    torch.testing.assert_close(rebuilt, su2.su2_exp(theta))
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(65, dtype=torch.float64))
    tz = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(su2.su2_quaternion(tz).sum(), tz)
    assert torch.isfinite(g).all()


def test_su2_exp_jacobian_vjp_is_the_left_trivialised_derivative():
    """U^-1 dU/dtheta_a = sum_b J[b, a] E_b (E_b = -i sigma_b / 2), checked against autograd's
    Jacobian of the closed-form exponential, at ordinary and tiny angles (series branch)."""
    e_basis = -0.5j * su2.pauli()
    for scale in (1.3, 1e-3, 0.0):
        theta = scale * torch.randn(4, 3, generator=torch.Generator().manual_seed(3), dtype=F64)
        for i in range(theta.shape[0]):
            u = su2.su2_exp(theta[i])
            jac = torch.autograd.functional.jacobian(
                lambda t: torch.view_as_real(su2.su2_exp(t)), theta[i]
            )  # [2, 2, 2 (re, im), 3]
            du = torch.complex(jac[..., 0, :], jac[..., 1, :])  # [2, 2, 3]
            left = torch.einsum("ij,jka->aik", torch.linalg.inv(u), du)  # [3, 2, 2]
            # J^T applied to the basis vector delta_c is row c of J: stacked, J itself
            jac_j = su2.su2_exp_jacobian_vjp(theta[i].expand(3, 3), torch.eye(3, dtype=F64))
            ref = torch.einsum("ba,bij->aij", jac_j.to(e_basis.dtype), e_basis)
            torch.testing.assert_close(left, ref, rtol=1e-10, atol=1e-12)


def test_su2_exp_jacobian_vjp_against_its_closed_form_in_mpmath():
    """J^T e = e + (1 - cos t)/t^2 theta x e + (t - sin t)/t^3 (theta (theta . e) - t^2 e) in
    50-digit arithmetic, on both sides of the series switch at t = 1e-2 and at large angles: the
    float64 result within 1e-15 (the series' truncation t^4 / 5040 is below them)."""
    mpmath.mp.dps = 50
    direction = torch.tensor([0.48, -0.6, 0.64], dtype=F64)  # unit
    e = torch.tensor([0.3, 0.9, -0.2], dtype=F64)
    for t in (1e-4, 3e-3, 9.9e-3, 1.01e-2, 0.3, 2.5):
        theta = t * direction
        got = su2.su2_exp_jacobian_vjp(theta, e)
        th = [mpmath.mpf(float(x)) for x in theta]
        ev = [mpmath.mpf(float(x)) for x in e]
        tm = mpmath.sqrt(sum(x * x for x in th))
        a = (1 - mpmath.cos(tm)) / tm**2
        b = (tm - mpmath.sin(tm)) / tm**3
        cross = [
            th[1] * ev[2] - th[2] * ev[1],
            th[2] * ev[0] - th[0] * ev[2],
            th[0] * ev[1] - th[1] * ev[0],
        ]
        dot = sum(x * y for x, y in zip(th, ev, strict=True))
        ref = [ev[i] + a * cross[i] + b * (th[i] * dot - tm**2 * ev[i]) for i in range(3)]
        torch.testing.assert_close(
            got, torch.tensor([float(r) for r in ref], dtype=F64), rtol=0, atol=1e-15
        )


def _matrix(q: torch.Tensor) -> torch.Tensor:
    """U(q) = q_0 I - i q . sigma, built from the Pauli matrices (independent of the tables)."""
    sig = su2.pauli(torch.complex128)
    eye = torch.eye(2, dtype=torch.complex128)
    vec = torch.einsum("...a,aij->...ij", q[..., 1:].to(torch.complex128), sig)
    return q[..., 0, None, None].to(torch.complex128) * eye - 1j * vec


def test_quaternion_product_and_adjoint_are_the_matrix_ones():
    """quaternion_product(q, p) is U(q) U(p), and quaternion_adjoint(q) the rotation R with
    U^H E_a U = sum_b R_ab E_b (E_a = -i sigma_a / 2), checked on the 2 x 2 matrices; R is a
    rotation (orthogonal, det 1)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(6, 3, generator=g, dtype=torch.float64)
    b = torch.randn(6, 3, generator=g, dtype=torch.float64)
    qa, qb = su2.su2_quaternion(a), su2.su2_quaternion(b)
    torch.testing.assert_close(
        _matrix(su2.quaternion_product(qa, qb)), su2.su2_exp(a) @ su2.su2_exp(b)
    )
    rot = su2.quaternion_adjoint(qa)  # [6, 3, 3]
    gens = -0.5j * su2.pauli(torch.complex128)
    u = su2.su2_exp(a)[:, None]
    conj = u.conj().transpose(-1, -2) @ gens @ u  # [6, 3, 2, 2]
    torch.testing.assert_close(conj, torch.einsum("nab,bij->naij", rot.to(conj.dtype), gens))
    eye = torch.eye(3, dtype=torch.float64).expand(6, 3, 3)
    torch.testing.assert_close(rot @ rot.transpose(-1, -2), eye)
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(6, dtype=torch.float64))


def test_su2_quaternion_series_below_the_switch_to_mpmath():
    """cos(t/2) and sin(t/2)/t from their series in t^2 below t = 1e-2, to float64's rounding
    (each coefficient counts at t^2 ~ 1e-4)."""
    for t in (9.9e-3, 5e-3):
        theta = torch.tensor([t, 0.0, 0.0], dtype=torch.float64)
        q = su2.su2_quaternion(theta)
        with mpmath.workdps(40):
            half = mpmath.mpf(t) / 2
            want = (float(mpmath.cos(half)), float(mpmath.sin(half) / mpmath.mpf(t)))
        assert abs(float(q[0]) - want[0]) <= 2e-16 and abs(float(q[1]) / t - want[1]) <= 2e-16


def test_the_pauli_matrices_take_the_complex_dtype_of_their_real_one():
    assert su2.pauli(torch.float32).dtype == torch.complex64
    assert su2.pauli(torch.float64).dtype == torch.complex128
    assert su2.su2_exp(torch.zeros(2, 3)).dtype == torch.complex64
