"""geometry.langevin: the BAOAB splitting on the Poincare disk samples the Gibbs density (seed 003
Thm 103) only when the geodesic term is carried exactly once; with T = 0 and no friction it keeps
the energy bounded over 10^4 steps, where explicit Euler drifts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from geometry import langevin as L
from geometry import poincare as P
from geometry import potentials
from tests.conftest import ball_points

K_SPRING, TEMP, GAMMA, H, DIM = 1.0, 0.5, 1.0, 0.1, 2


def potential(z):
    """Phi = k/2 d_H(0, z)^2: grows with hyperbolic distance, so lambda^d e^(-Phi/T) normalises."""
    r = 2 * torch.atanh(z.norm(dim=-1, keepdim=True).clamp_max(1 - 1e-12))
    return 0.5 * K_SPRING * r.square()


def force(z):
    """-dPhi/dz in closed form: d_H(0, z) = 2 artanh|z| has gradient lambda(z) z / |z|."""
    n = z.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    r = 2 * torch.atanh(n.clamp_max(1 - 1e-12))
    return -K_SPRING * r * P.conformal_factor(z) * z / n


def test_closed_form_force_matches_autograd():
    z = (0.6 * torch.rand(32, DIM, dtype=torch.float64)).requires_grad_(True)  # |z| < 0.85
    (g,) = torch.autograd.grad(potential(z).sum(), z)
    torch.testing.assert_close(force(z), -g)


def _radial_reference():
    """CDF and moments of |z| under rho(z) ~ lambda(z)^d exp(-Phi/T) dz (d = 2: area r dr)."""
    r = np.linspace(1e-7, 1 - 1e-7, 400_001)
    lam = 2 / (1 - r**2)
    d_h = 2 * np.arctanh(r)
    dens = r ** (DIM - 1) * lam**DIM * np.exp(-K_SPRING * d_h**2 / 2 / TEMP)
    dens /= np.trapezoid(dens, r)
    cdf = np.cumsum(dens) * (r[1] - r[0])
    return r, cdf, np.trapezoid(d_h**2 * dens, r)


def _sample(drift, n_chains=3000, n_steps=1200, burn=300, every=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.zeros(n_chains, DIM, dtype=torch.float64)
    p = torch.zeros_like(z)
    zs, ps = [], []
    for s in range(n_steps):
        xi = torch.randn(z.shape, generator=g, dtype=z.dtype)
        z, p = L.baoab_step(z, p, force, H, GAMMA, TEMP, noise=xi, drift=drift)
        if s >= burn and s % every == 0:
            zs.append(z)
            ps.append(p)
    return torch.cat(zs), torch.cat(ps)


def _gibbs_errors(drift):
    z, p = _sample(drift)
    grid, cdf, ref_dh2 = _radial_reference()
    radius = z.norm(dim=-1).numpy()
    if not np.isfinite(radius).all() or not torch.isfinite(p).all():
        return dict(ks=1.0, dh2=float("inf"), kinetic=float("inf"), cross=float("inf"))
    emp = np.searchsorted(np.sort(radius), grid) / len(radius)
    # momentum covariance must be T G(z): E[p p^T / lambda^2] = T I
    scaled = p * P.conformal_factor(z).reciprocal()
    cov = (scaled.T @ scaled / len(scaled)).numpy()
    return dict(
        ks=float(np.abs(emp - cdf).max()),
        dh2=float(np.mean((2 * np.arctanh(radius)) ** 2) / ref_dh2 - 1),
        kinetic=float(np.abs(np.diag(cov) / TEMP - 1).max()),
        cross=float(np.abs(cov[0, 1]) / TEMP),
    )


@pytest.mark.slow
def test_baoab_with_geodesic_flow_samples_the_gibbs_density():
    """z-marginal ~ lambda(z)^d e^(-Phi/T) and momentum covariance T G(z) (Thm 103, idealised).
    3000 chains x 90 correlated samples: KS ~ 3e-3 measured, tolerance 1.5e-2."""
    err = _gibbs_errors("geodesic")
    assert err["ks"] < 0.015, err
    assert abs(err["dh2"]) < 0.02, err
    assert err["kinetic"] < 0.02 and err["cross"] < 0.02, err


@pytest.mark.slow
def test_gibbs_test_fails_without_the_geodesic_term_and_when_it_is_doubled():
    """The seed listing's step (Euclidean drift, grad Phi kick only) misses the lambda^d factor:
    measured KS ~ 0.12 and E[d_H^2] 30% low. Counting the term twice diverges."""
    none = _gibbs_errors("none")
    assert none["ks"] > 0.06 and none["dh2"] < -0.15, none
    doubled = _gibbs_errors("doubled")
    assert doubled["ks"] > 0.06, doubled
    # carrying it once in the kick instead (explicit, O(h) bias) is close but not exact
    kick = _gibbs_errors("kick")
    assert kick["ks"] < 0.03, kick


@pytest.mark.slow
def test_energy_bounded_over_ten_thousand_steps_where_euler_drifts():
    """T = 0, gamma = 0, no action: kick-flow-kick is symplectic (both pieces are exact
    Hamiltonian flows), so the energy error oscillates without secular growth."""
    g = torch.Generator().manual_seed(1)
    z0 = 0.5 * torch.rand(32, DIM, generator=g, dtype=torch.float64)
    p0 = 3 * torch.randn(32, DIM, generator=g, dtype=torch.float64)
    h0 = L.hamiltonian(z0, p0, potential)
    zb, pb, ze, pe = z0, p0, z0, p0
    err_b, err_e = [], []
    h = 0.05
    for s in range(10_000):
        zb, pb = L.baoab_step(zb, pb, force, h)
        f = force(ze) - P.kinetic_energy_grad(ze, pe)  # explicit Euler of the same dynamics
        ze, pe = P.project(ze + h * pe * P.inverse_metric_factor(ze), 1 - 1e-5), pe + h * f
        if s % 100 == 99:
            err_b.append(((L.hamiltonian(zb, pb, potential) - h0).abs() / h0).max().item())
            err_e.append(((L.hamiltonian(ze, pe, potential) - h0).abs() / h0).max().item())
    first, last = np.mean(err_b[:20]), np.mean(err_b[-20:])
    assert max(err_b) < 2e-3, max(err_b)  # measured 6.4e-4
    assert last < 2 * first, (first, last)  # no secular growth
    # explicit Euler drifts: measured 0.33 -> 58
    assert err_e[-1] > 10 * err_e[0] and err_e[-1] > 1.0, (err_e[0], err_e[-1])


def test_ou_step_preserves_the_maxwell_boltzmann_law_and_its_mean_is_deterministic():
    g = torch.Generator().manual_seed(2)
    z = 0.95 * torch.rand(200_000, DIM, generator=g, dtype=torch.float64) / DIM**0.5
    lam = P.conformal_factor(z)
    p = TEMP**0.5 * lam * torch.randn(z.shape, generator=g, dtype=z.dtype)  # ~ N(0, T G)
    c1, c2 = L.ou_coefficients(GAMMA, H, TEMP)
    p_new = L.ou_step(z, p, c1, c2, torch.randn(z.shape, generator=g, dtype=z.dtype))
    ratio = (p_new / lam).square().mean(0) / TEMP
    assert (ratio - 1).abs().max() < 0.01, ratio
    torch.testing.assert_close(L.ou_step(z, p, c1, c2, None), c1 * p)
    assert L.ou_coefficients(0.0, H, TEMP) == (1.0, 0.0)  # zero friction is exactly reachable


def test_geodesic_drift_without_forces_is_the_geodesic_flow():
    """With no force and no noise the step is exactly two half flows: the kick adds nothing, so
    the kinetic term is not counted in the kick as well (it is not doubled)."""
    g = torch.Generator().manual_seed(7)
    z = 0.8 * torch.rand(16, DIM, generator=g, dtype=torch.float64) / DIM**0.5  # |z| < 0.8
    p = torch.randn(16, DIM, generator=g, dtype=torch.float64)
    z1, p1 = L.baoab_step(z, p, lambda x: torch.zeros_like(x), H)
    z2, p2 = P.geodesic_flow(z, p, H)
    torch.testing.assert_close(z1, z2)
    torch.testing.assert_close(p1, p2)


@pytest.mark.parametrize("boris", [False, True])
def test_baoab_composes_toy_substeps_as_its_contract_says(boris):
    """B A B (O the identity: one merged drift of length h) on toy substeps that read all they
    are given: the position terms reach the opening kick, the drift and the closing kick; B is
    p + h/2 F, or with `rotate` half the force, the rotation for h/2, the other half."""
    h = 0.2
    z = torch.tensor([[0.1, -0.2]], dtype=torch.float64)
    p = torch.tensor([[0.3, 0.4]], dtype=torch.float64)

    def position(x):
        return 2.0 * x

    def kick(x, q, terms):
        return terms - q

    def drift(x, q, t, terms, _reuse):
        return x + t * q + t * terms, q, None

    def rotate(x, q, t, terms):
        return q + t * (terms + q)

    def b(x, q, terms):
        f = kick(x, q, terms)
        if not boris:
            return q + 0.5 * h * f
        return rotate(x, q + 0.25 * h * f, 0.5 * h, terms) + 0.25 * h * f

    p1 = b(z, p, position(z))
    z1 = z + h * p1 + h * position(z)
    want = (z1, b(z1, p1, position(z1)), position(z1))
    got = L.baoab(z, p, h, position, kick, drift, None, rotate=rotate if boris else None)
    torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("drift", ["kick", "doubled"])
def test_the_kick_drifts_add_minus_dk_dz_to_the_force(drift):
    """drift "kick" (Euclidean drift, -dK/dz in the kick) and "doubled" (the geodesic flow and
    -dK/dz as well): one frictionless step is B A A B composed by hand, each B
    p + h/2 (F(z) - dK/dz(z, p))."""
    g = torch.Generator().manual_seed(4)
    z = 0.6 * torch.rand(8, DIM, generator=g, dtype=torch.float64) / DIM**0.5
    p = torch.randn(8, DIM, generator=g, dtype=torch.float64)

    def b(x, q):
        return q + H / 2 * (force(x) - P.kinetic_energy_grad(x, q))

    def a(x, q):
        if drift == "doubled":  # the geodesic flow
            x, q = P.geodesic_flow(x, q, H / 2)
        else:  # Euclidean: dz = G^-1 p dt
            x = x + H / 2 * q * P.inverse_metric_factor(x)
        return P.project(x, 1 - 1e-5), q

    p1 = b(z, p)
    z1, p1 = a(*a(z, p1))
    got = L.baoab_step(z, p, force, H, drift=drift)
    torch.testing.assert_close(got, (z1, b(z1, p1)), rtol=1e-12, atol=1e-12)


def test_the_defaults_are_frictionless_and_cold_and_noise_false_is_the_mean():
    """Without gamma and temperature a step is frictionless and cold; with friction but no
    temperature (T = 0) the noise does nothing; noise=False runs the O step's mean."""
    g = torch.Generator().manual_seed(5)
    z = 0.6 * torch.rand(8, DIM, generator=g, dtype=torch.float64) / DIM**0.5
    p = torch.randn(8, DIM, generator=g, dtype=torch.float64)
    xi = torch.randn(8, DIM, generator=g, dtype=torch.float64)
    cold = L.baoab_step(z, p, force, H, 1.0)
    torch.testing.assert_close(L.baoab_step(z, p, force, H, 1.0, noise=xi), cold)
    steps = [(z, p)]
    for _ in range(3):
        steps.append(L.baoab_step(*steps[-1], force, H))
    torch.testing.assert_close(L.baoab_substeps(z, p, force, H, 3), steps[-1])
    two_cold = L.baoab_step(*cold, force, H, 1.0)
    torch.testing.assert_close(L.baoab_substeps(z, p, force, H, 2, 1.0), two_cold)
    for temperature, noise in ((0.0, True), (0.5, False)):  # no noise drawn: O is c1 p
        za, pa = L.baoab_substeps(z, p, force, H, 2, 1.0, temperature, noise=noise)
        zb, pb = L.baoab_step(*L.baoab_step(z, p, force, H, 1.0), force, H, 1.0)
        torch.testing.assert_close((za, pa), (zb, pb), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_substeps_equal_repeated_single_steps(gamma):
    """baoab_substeps reuses force evaluations and merges half-flows: the same map, exactly."""
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    z = 0.7 * torch.rand(8, DIM, dtype=torch.float64) / DIM**0.5
    p = torch.randn(8, DIM, dtype=torch.float64)
    za, pa = L.baoab_substeps(z, p, force, H, 7, gamma, TEMP, generator=g1)
    zb, pb = z, p
    for _ in range(7):
        xi = torch.randn(z.shape, generator=g2, dtype=z.dtype) if gamma > 0 else None
        zb, pb = L.baoab_step(zb, pb, force, H, gamma, TEMP, noise=xi)
    torch.testing.assert_close(za, zb, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(pa, pb, rtol=1e-12, atol=1e-12)


def test_ou_coefficients_and_step_are_thm_103s():
    """c1 = exp(-gamma h), c2 = sqrt((1 - c1^2) T), from floats and from tensors; the O step is
    c1 p + c2 lambda(z) xi."""
    gamma, h, temperature = 0.7, 0.3, 0.4
    c1 = math.exp(-gamma * h)
    want = (c1, math.sqrt((1 - c1 * c1) * temperature))
    assert L.ou_coefficients(gamma, h, temperature) == pytest.approx(want, rel=1e-14)
    got = L.ou_coefficients(torch.tensor(gamma, dtype=torch.float64), h, temperature)
    assert [float(c) for c in got] == pytest.approx(want, rel=1e-14)
    z = torch.tensor([[0.3, -0.4]], dtype=torch.float64)
    p, xi = (
        torch.tensor([[1.0, 2.0]], dtype=torch.float64),
        torch.tensor([[0.5, -1.5]], dtype=torch.float64),
    )
    lam = 2.0 / (1.0 - 0.25)
    torch.testing.assert_close(
        L.ou_step(z, p, 0.9, 0.2, xi), 0.9 * p + 0.2 * lam * xi, rtol=1e-15, atol=0
    )


def test_ou_coefficient_gradients_stay_finite_at_zero_friction():
    """A learned friction gamma = raw^2 passes through 0; c2 = sqrt((1 - c1^2) T) has an infinite
    derivative there, which used to turn the friction's gradient into NaN."""
    raw = torch.tensor([0.0, 1e-8, 0.3], dtype=torch.float64, requires_grad=True)
    c1, c2 = L.ou_coefficients(raw.square(), 1.0, 1e-3)
    (g,) = torch.autograd.grad((c1 + c2).sum(), raw)
    assert torch.isfinite(g).all(), g
    torch.testing.assert_close(c2[2], torch.sqrt((1 - c1[2] ** 2) * 1e-3))


def test_the_rollout_carries_the_closing_position_terms_into_the_next_opening_kick():
    """baoab_rollout evaluates position(z) once per step (the closing kick's terms are returned
    and reused by the next opening kick), and is the same map, bit for bit, as steps that
    recompute them; the second half-drift receives what the first handed on."""
    g = torch.Generator().manual_seed(5)
    z = 0.7 * torch.rand(8, DIM, generator=g, dtype=torch.float64) / DIM**0.5
    p = torch.randn(8, DIM, generator=g, dtype=torch.float64)
    calls, handed = [], []

    def position(x):
        calls.append(1)
        return force(x)

    def drift(x, q, t, terms, reuse):
        handed.append((terms is None, reuse))
        x, q = P.geodesic_flow(x, q, t)
        return P.project(x, 1 - 1e-5), q, "first" if terms is not None else None

    def kick(_x, _q, f):
        return f

    def thermostat(x, q):
        return L.ou_step(x, q, 0.9, 0.0, None)

    za, pa, terms = L.baoab_rollout(z, p, H, 5, position, kick, drift, thermostat)
    assert len(calls) == 6 and torch.equal(terms, force(za))
    assert handed[:2] == [(False, None), (True, "first")]
    zb, pb = z, p
    for _ in range(5):
        zb, pb, _ = L.baoab(zb, pb, H, position, kick, drift, thermostat)
    assert torch.equal(za, zb) and torch.equal(pa, pb)


def _two_form(n: int, d: int, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    m = scale * torch.randn(n, d, d, generator=g, dtype=torch.float64)
    return m - m.transpose(-1, -2)  # [n, d, d] antisymmetric


def test_boris_rotation_keeps_the_metric_norm_and_is_the_implicit_midpoint_of_the_lorentz_flow():
    """A pure-curl kick rotates p in the metric: |p|_G = |p| / lambda(z) is preserved to
    rounding at every step size; it solves p' - p = t Omega (p + p') / 2 with
    Omega = F / lambda(z)^2 (Omega p = F G^-1 p); its error against the exact flow
    exp(t Omega) p (torch.linalg.matrix_exp) is O(t^3) per step (8x per halving)."""
    g = torch.Generator().manual_seed(1)
    z = P.expmap0(0.5 * torch.randn(6, 5, dtype=torch.float64, generator=g))
    p = torch.randn(6, 5, dtype=torch.float64, generator=g)
    form = _two_form(6, 5, 3.0, 3)
    omega = form * P.inverse_metric_factor(z).unsqueeze(-1)  # [6, 5, 5]
    errors = []
    for t in (0.4, 0.2, 0.1):
        out = L.boris_rotation(z, p, form, t)
        torch.testing.assert_close(out.norm(dim=-1), p.norm(dim=-1), rtol=1e-13, atol=0.0)
        midpoint = 0.5 * t * (omega @ (p + out).unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(out - p, midpoint, rtol=1e-12, atol=1e-13)
        exact = (torch.linalg.matrix_exp(t * omega) @ p.unsqueeze(-1)).squeeze(-1)
        errors.append(float((out - exact).norm()))
    assert errors[0] > 1e-4  # the field is strong enough to tell the orders apart
    for coarse, fine in itertools.pairwise(errors):
        assert 6.0 < coarse / fine < 10.0
    # no curl: the identity, exactly
    assert torch.equal(L.boris_rotation(z, p, torch.zeros_like(form), 0.3), p)


def test_a_boris_kick_in_baoab_conserves_energy_as_the_plain_kick_does():
    """baoab with `rotate` (Boris: half force, rotation, half force) on the disk with a constant
    2-form, frictionless: the energy error stays O(h^2) (the Lorentz force does no work), and
    the curl changes the trajectory."""
    z0 = torch.tensor([[0.3, -0.2], [0.1, 0.5]], dtype=torch.float64)
    p0 = torch.tensor([[0.4, 0.1], [-0.3, 0.2]], dtype=torch.float64)
    form = torch.tensor([[0.0, 1.5], [-1.5, 0.0]], dtype=torch.float64).expand(2, 2, 2)

    def energy(z, p):
        return 0.5 * P.dist0(z).square() + P.kinetic_energy(z, p).squeeze(-1)

    def run(h, rotate):
        z, p, worst = z0, p0, 0.0
        for _ in range(round(4.0 / h)):
            z, p, _ = L.baoab(z, p, h, potentials.confining_force, lambda x, q, f: f,
                              _projected_geodesic, None, rotate=rotate)  # fmt: skip
            worst = max(worst, float((energy(z, p) - energy(z0, p0)).abs().max()))
        return z, worst

    def rotate(x, q, t, _terms):
        return L.boris_rotation(x, q, form, t)

    z_plain, _ = run(0.1, None)
    z_curl, coarse = run(0.1, rotate)
    _, fine = run(0.05, rotate)
    assert float((z_curl - z_plain).abs().max()) > 1e-2
    assert coarse < 5e-3 and 3.0 < coarse / fine < 5.0


def _projected_geodesic(z, p, t, _terms, _reuse):
    z, p = L.drift_step(z, p, t, "geodesic")
    return z, p, None


def test_hamiltonian_adds_the_potential_to_the_kinetic_energy_in_either_shape():
    """H = Phi(z) + |p|^2 / (2 lambda(z)^2), [..., 1], whether the potential returns [...] or
    [..., 1]; on a batch [2, 3]."""
    z = ball_points(6, 3, 0.9, seed=4).reshape(2, 3, 3)
    p = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    kinetic = 0.5 * p.square().sum(-1, keepdim=True) / P.conformal_factor(z).square()
    phi = potentials.confining_potential(z)  # [2, 3]
    for potential in (
        potentials.confining_potential,
        lambda x: potentials.confining_potential(x)[..., None],
    ):
        h = L.hamiltonian(z, p, potential)
        assert h.shape == (2, 3, 1)
        torch.testing.assert_close(h, phi.unsqueeze(-1) + kinetic)
