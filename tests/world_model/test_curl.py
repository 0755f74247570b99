"""The Boris kick's value curl (world_model/geodesic/curl.py): F = dA against autograd, the
curl-free model at the start, and a curl that bends trajectories without doing work."""

from __future__ import annotations

import geoopt
import pytest
import torch

from world_model.geodesic import ContextConfig, GeodesicConfig, GeodesicDynamics, IntegratorConfig
from world_model.geodesic.curl import ValueCurl


def _dynamics(curl: bool, dt: float = 0.1) -> GeodesicDynamics:
    torch.manual_seed(2)
    cfg = GeodesicConfig(
        latent_dim=4,
        encoder="identity",
        integrator=IntegratorConfig(dt=dt, curl=curl, curl_rank=3),
        context=ContextConfig(
            prototypes=8, feature_dim=8, window=0, memory="none", routing="dense"
        ),
    )
    dyn = GeodesicDynamics(obs_dim=8, action_dim=2, config=cfg).double()
    with torch.no_grad():  # a kick head that is not zero; no friction
        dyn.integrator.kick_head.w_o.weight.normal_(0.0, 0.5)
        dyn.integrator.friction_raw.fill_(-1.0)
    return dyn


def test_the_two_form_is_the_exterior_derivative_of_the_one_form():
    """F_mj = d_m A_j - d_j A_m, against autograd's Jacobian of A, in float64."""
    torch.manual_seed(0)
    curl = ValueCurl(5, 3).double()
    with torch.no_grad():
        curl.outer.normal_()
    z = 0.4 * torch.randn(4, 5, dtype=torch.float64)
    for b in range(4):
        jac = torch.autograd.functional.jacobian(lambda x: curl.one_form(x[None])[0], z[b])
        # jac[j, m] = d_m A_j, so F = jac^T - jac
        torch.testing.assert_close(curl.two_form(z)[b], jac.T - jac, rtol=1e-12, atol=1e-12)


def test_with_no_curl_at_the_start_the_step_is_the_curl_free_one():
    """curl on with W = 0 (its initial value) steps as curl off with the same other
    parameters; curl off holds no curl parameters (old checkpoints load unchanged)."""
    off, on = _dynamics(False), _dynamics(True)
    assert not any("curl" in name for name in off.state_dict())
    missing = on.load_state_dict(off.state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["integrator.curl.inner.bias", "integrator.curl.inner.weight",
                               "integrator.curl.outer"]  # fmt: skip
    state = off.encode(0.3 * torch.randn(5, 8, dtype=torch.float64))
    action = torch.rand(5, 2, dtype=torch.float64) * 2 - 1
    with torch.no_grad():
        a = off.next(state, action, off.context(state))
        b = on.next(state, action, on.context(state))
    torch.testing.assert_close(b.z, a.z, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(b.p, a.p, rtol=1e-12, atol=1e-14)


@torch.no_grad()
def _energy_error(dyn: GeodesicDynamics, steps: int) -> tuple[float, torch.Tensor]:
    ball = geoopt.PoincareBall()
    torch.manual_seed(5)
    z = ball.expmap0(0.4 * torch.randn(6, 4, dtype=torch.float64))
    p = 0.5 * torch.randn(6, 4, dtype=torch.float64)
    state = dyn.state_type(z, p)
    context = dyn.context(state)
    h0 = dyn.integrator.hamiltonian(state.z, state.p, context)
    worst = 0.0
    for _ in range(steps):
        state = dyn.next(state, torch.zeros(6, 2, dtype=torch.float64), context)
        h = dyn.integrator.hamiltonian(state.z, state.p, context)
        worst = max(worst, float(((h - h0).abs() / h0.abs().mean()).max()))
    return worst, state.z


@pytest.mark.parametrize("scale", [2.0])
def test_a_curl_bends_the_trajectory_and_does_no_work(scale):
    """Frictionless, action-free, noise-free rollouts with a strong learned curl: the Lorentz
    force changes where the latent goes, and the energy (whose Hamiltonian has no curl term)
    stays conserved to O(dt^2): the error falls ~4x per halving of dt over the same time."""
    errors = []
    for dt in (0.1, 0.05):
        off, on = _dynamics(False, dt), _dynamics(True, dt)
        on.load_state_dict(off.state_dict(), strict=False)
        with torch.no_grad():
            on.integrator.curl.outer.normal_(0.0, scale)
        steps = round(2.0 / dt)
        error, z_on = _energy_error(on, steps)
        _, z_off = _energy_error(off, steps)
        errors.append(error)
        assert float((z_on - z_off).abs().max()) > 1e-2  # the curl is felt
    assert errors[0] < 5e-2
    assert 3.0 < errors[0] / errors[1] < 5.0


def test_the_curl_rank_is_checked():
    with pytest.raises(ValueError, match="curl_rank must be an integer >= 1"):
        IntegratorConfig(curl=True, curl_rank=0)
