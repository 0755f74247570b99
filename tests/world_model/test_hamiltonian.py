"""GeodesicCrossAttention.hamiltonian: its potential is the one the kick differentiates (autograd
of H against kick_force), and without friction, action and noise the BAOAB step conserves it to
O(dt^2) (the deviation over a fixed time falls ~4x per halving of dt) with no secular drift."""

from __future__ import annotations

import pytest
import torch

from world_model.geodesic import (
    ContextConfig,
    GeodesicConfig,
    GeodesicDynamics,
    GeodesicHeadOptions,
    IntegratorConfig,
)

OBS = [[0.3, -0.2, 0.5, 0.4], [-0.5, 0.1, -0.3, 0.8]]


def _disk_model(dt: float, force: str = "potential") -> GeodesicDynamics:
    torch.manual_seed(0)
    cfg = GeodesicConfig(
        latent_dim=2,
        encoder="identity",
        head=GeodesicHeadOptions(d_k=8, kernel="softmax"),
        integrator=IntegratorConfig(dt=dt, drift_correction=False, potential_wells=4, force=force),
        context=ContextConfig(prototypes=8, window=0, memory="none", routing="dense"),
    )
    dyn = GeodesicDynamics(4, 2, cfg).double()
    with torch.no_grad():
        dyn.integrator.kick_head.w_o.weight.normal_(0.0, 0.5)  # w_o starts at 0
        dyn.integrator.friction_raw.fill_(-1.0)  # friction relu(-1) = 0
    return dyn


def test_the_kick_is_minus_the_gradient_of_the_hamiltonians_potential():
    dyn = _disk_model(0.1)
    z = torch.tensor([[0.3, -0.2], [0.6, 0.5], [-0.9, 0.1]], dtype=torch.float64)
    ctx = dyn.context(dyn.state_type(z, torch.zeros_like(z)))
    zq = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(
        dyn.integrator.hamiltonian(zq, torch.zeros_like(z), ctx).sum(), zq
    )
    force, _ = dyn.integrator.kick_force(z, ctx)
    torch.testing.assert_close(-grad, force.detach(), rtol=1e-9, atol=1e-10)


@torch.no_grad()
def _energy_deviation(dt: float, time: float = 4.0) -> float:
    dyn = _disk_model(dt)
    state = dyn.encode(torch.tensor(OBS, dtype=torch.float64))
    ctx = dyn.context(state)
    h0 = dyn.integrator.hamiltonian(state.z, state.p, ctx)
    worst = 0.0
    for _ in range(round(time / dt)):
        state = dyn.next(state, torch.zeros(2, 2, dtype=torch.float64), ctx)
        worst = max(
            worst, float((dyn.integrator.hamiltonian(state.z, state.p, ctx) - h0).abs().max())
        )
    return worst


def test_the_frictionless_step_conserves_energy_to_second_order():
    coarse, fine = _energy_deviation(0.1), _energy_deviation(0.05)
    assert coarse < 1e-3  # |H| ~ 0.25 at the start
    assert 3.0 < coarse / fine < 5.0  # O(dt^2)
    assert _energy_deviation(0.1, time=16.0) < 2 * coarse  # bounded: no secular drift


def test_the_hamiltonian_needs_a_potential_force():
    dyn = _disk_model(0.1, force="field")
    z = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="force 'potential'"):
        dyn.integrator.hamiltonian(z, z, dyn.context(dyn.state_type(z, z)))
