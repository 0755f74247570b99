"""GeodesicCrossAttention (seed 003 Def 287) through the model's own code path: the physics of the
idealised integrator (Thm 103's Gibbs target, energy over 10^4 conservative steps), the geodesic
term carried exactly once, the dynamics interface (encode, next, context, consistency),
gradients to every parameter, and finite numerics at the boundary.

The idealised integrator is the model itself at initialisation: the kick head's output layer
starts at zero, so the force is the known confining term kappa * -grad(d_H(0, z)^2 / 2), an
analytic grad Phi in place of attention; the drift correction is switched off and the O step is
the exact OU update.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from agent.core.config import RunConfig, migrate_config
from geometry import langevin, poincare
from geometry.potentials import confining_force
from tests.conftest import ball_points
from world_model.attention import ida
from world_model.attention.context import ContextBank
from world_model.attention.covariant import CovariantQueries
from world_model.geodesic import (
    GeodesicConfig,
    GeodesicContext,
    GeodesicDynamics,
    GeodesicState,
    StepCarry,
)
from world_model.geodesic.config import (
    ContextConfig,
    GeodesicHeadOptions,
    IntegratorConfig,
    migrate_flat_dynamics,
)
from world_model.memory.window import state_features
from world_model.model import EpisodeInputs, WorldModel
from world_model.registry import build_dynamics, dynamics_names

F64 = torch.float64
TEMP = 0.5


# The integrator's mechanics are tested over the fixed prototype table without the episodic
# memory (`--memory none --routing dense`); the default context (memory and routed pool) has
# its own tests (tests/world_model/memory/).
FIXED_TABLE = {"memory": "none", "routing": "dense"}


def config(head=None, integrator=None, context=None, **top) -> GeodesicConfig:
    """A GeodesicConfig from its sections' keywords (dicts) and its top-level fields."""
    return GeodesicConfig(
        **top,
        head=GeodesicHeadOptions(**(head or {})),
        integrator=IntegratorConfig(**(integrator or {})),
        context=ContextConfig(**{**FIXED_TABLE, **(context or {})}),
    )


def idealised(
    drift="geodesic", friction=1.0, temperature=TEMP, dt=0.1, **integrator
) -> GeodesicDynamics:
    cfg = config(
        latent_dim=2,
        max_norm=1 - 1e-5,
        context=dict(prototypes=8),
        # the claims here are the integrator's (the read-out potential starts at 0), so the
        # cheapest exact-enough lines: magnus4's 12 pieces cost 3x per step at 3000 chains
        head=dict(wilson="exp"),
        integrator=dict(
            drift_correction=False,
            confinement=1.0,
            friction=friction,
            thermostat_temperature=temperature,
            dt=dt,
            drift=drift,
            control="linear",
            **integrator,
        ),
    )
    torch.manual_seed(0)
    return GeodesicDynamics(4, 1, cfg).double()


def potential(z):
    return 0.5 * (2 * torch.atanh(z.norm(dim=-1, keepdim=True).clamp_max(1 - 1e-12))).square()


# --------------------------------------------------------------------------- physics


def _gibbs_errors(dyn: GeodesicDynamics) -> dict[str, float]:
    n_chains = 3000
    state = GeodesicState(torch.zeros(n_chains, 2, dtype=F64), torch.zeros(n_chains, 2, dtype=F64))
    action = torch.zeros(n_chains, 1, dtype=F64)
    torch.manual_seed(1)
    zs, ps = [], []
    with torch.no_grad():
        ctx = dyn.context(state)
        for k in range(1200):
            state = dyn.next(state, action, ctx, stochastic=True)
            if k >= 300 and k % 10 == 0:
                zs.append(state.z)
                ps.append(state.p)
    z, p = torch.cat(zs), torch.cat(ps)
    radius = z.norm(dim=-1).numpy()
    grid = np.linspace(1e-7, 1 - 1e-7, 400_001)
    lam = 2 / (1 - grid**2)
    dens = grid * lam**2 * np.exp(-((2 * np.arctanh(grid)) ** 2) / 2 / TEMP)  # d = 2
    dens /= np.trapezoid(dens, grid)
    cdf = np.cumsum(dens) * (grid[1] - grid[0])
    emp = np.searchsorted(np.sort(radius), grid) / len(radius)
    scaled = p / poincare.conformal_factor(z)
    cov = (scaled.T @ scaled / len(scaled)).numpy() / TEMP
    return {"ks": float(np.abs(emp - cdf).max()), "cov": float(np.abs(np.diag(cov) - 1).max())}


@pytest.mark.slow
def test_idealised_model_samples_the_gibbs_density_and_fails_without_the_geodesic_term():
    """Thm 103 (idealised): z-marginal ~ lambda(z)^d e^(-Phi/T_c), momentum covariance T_c G(z).
    Measured through the model: KS 2.3e-3, covariance within 0.2%. With the seed listing's
    Euclidean drift (geodesic term switched off): KS 0.12, covariance 5% high."""
    good = _gibbs_errors(idealised("geodesic"))
    assert good["ks"] < 0.015 and good["cov"] < 0.02, good
    bad = _gibbs_errors(idealised("euclidean"))
    assert bad["ks"] > 0.06, bad


@pytest.mark.slow
def test_conservative_energy_has_no_secular_growth_where_euler_does():
    """T_c = 0, gamma = 0, no action: energy error over 10^4 steps stays bounded (kick-flow-kick
    of exact sub-flows), where an explicit Euler step of the same dynamics grows."""
    dyn = idealised(friction=0.0, temperature=0.0, dt=0.05)
    assert dyn.integrator.friction.item() == 0.0  # zero friction is exactly reachable
    g = torch.Generator().manual_seed(2)
    z0 = 0.5 * torch.rand(32, 2, generator=g, dtype=F64)
    p0 = 3 * torch.randn(32, 2, generator=g, dtype=F64)
    h0 = langevin.hamiltonian(z0, p0, potential)
    action = torch.zeros(32, 1, dtype=F64)
    state, ze, pe = GeodesicState(z0, p0), z0, p0
    err_model, err_euler = [], []
    with torch.no_grad():
        ctx = dyn.context(state)
        for s in range(10_000):
            state = dyn.next(state, action, ctx)
            f = confining_force(ze) - poincare.kinetic_energy_grad(ze, pe)
            ze = poincare.project(ze + 0.05 * pe * poincare.inverse_metric_factor(ze), 1 - 1e-5)
            pe = pe + 0.05 * f
            if s % 100 == 99:
                h = langevin.hamiltonian(state.z, state.p, potential)
                err_model.append(((h - h0).abs() / h0).max().item())
                err_euler.append(
                    ((langevin.hamiltonian(ze, pe, potential) - h0).abs() / h0).max().item()
                )
    assert max(err_model) < 2e-3, max(err_model)
    assert np.mean(err_model[-20:]) < 2 * np.mean(err_model[:20]), err_model
    assert err_euler[-1] > 10 * err_euler[0], (err_euler[0], err_euler[-1])


def _wells_energy_error(dt: float, time: float = 40.0) -> tuple[float, float]:
    """Largest |H_t - H_0| over `time` of a conservative rollout with opened wells, and the
    largest change of Phi_w along it."""
    dyn = idealised(friction=0.0, temperature=0.0, dt=dt, potential_wells=3)
    integ = dyn.integrator
    with torch.no_grad():
        integ.well_depths.copy_(torch.tensor([2.0, -1.0, 1.5]))  # two wells and a bump
    g = torch.Generator().manual_seed(4)
    z0 = 0.5 * torch.rand(32, 2, generator=g, dtype=F64)
    p0 = 2 * torch.randn(32, 2, generator=g, dtype=F64)

    def energy(z, p):
        return langevin.hamiltonian(z, p, potential).squeeze(-1) + integ.wells(z)[0]

    h0, state, worst, moved = energy(z0, p0), GeodesicState(z0, p0), 0.0, 0.0
    with torch.no_grad():
        ctx = dyn.context(state)
        for _ in range(round(time / dt)):
            state = dyn.next(state, torch.zeros(32, 1, dtype=F64), ctx)
            worst = max(worst, float((energy(state.z, state.p) - h0).abs().max()))
            moved = max(moved, float((integ.wells(state.z)[0] - integ.wells(z0)[0]).abs().max()))
    return worst, moved


def test_potential_wells_are_conserved_with_the_kinetic_energy():
    """With wells (depths opened, one a bump), T_c = 0, gamma = 0 and no action, the model keeps
    H = Phi_conf + Phi_w + K (Phi_w from geometry.potentials.gaussian_wells) up to BAOAB's O(h^2)
    error: over the same time, halving the step quarters the largest energy error (measured
    0.0174 -> 0.0041 over 40 time units). A force that is not the gradient of the potential it
    claims (a sign or factor error, a non-conservative term) leaves an error that does not
    shrink."""
    coarse, moved = _wells_energy_error(0.05)
    fine, _ = _wells_energy_error(0.025)
    assert moved > 0.3  # the orbits cross the wells' landscape
    assert coarse < 0.03 and 3.0 < coarse / fine < 5.0, (coarse, fine)


def test_model_step_is_geometry_baoab_with_the_geodesic_term_once():
    """With the attention force at its initial zero, one model step is exactly
    geometry.langevin.baoab_step with the confining force and the same noise; with no force at
    all it is the exact geodesic flow: the kick adds no -dK/dz, so the term is not doubled."""
    dyn = idealised()
    g = torch.Generator().manual_seed(3)
    z = 0.8 * torch.rand(16, 2, generator=g, dtype=F64) / 2**0.5
    p = torch.randn(16, 2, generator=g, dtype=F64)
    action = torch.zeros(16, 1, dtype=F64)
    torch.manual_seed(4)
    out = dyn.next(GeodesicState(z, p), action, stochastic=True)
    torch.manual_seed(4)
    xi = torch.randn_like(p)
    ref = langevin.baoab_step(z, p, confining_force, 0.1, 1.0, TEMP, noise=xi, max_norm=1 - 1e-5)
    torch.testing.assert_close(out.z, ref[0])
    torch.testing.assert_close(out.p, ref[1])

    free = idealised(friction=0.0, temperature=0.0)
    with torch.no_grad():
        free.integrator.confinement_raw.zero_()
    out = free.next(GeodesicState(z, p), action)
    flow = poincare.geodesic_flow(z, p, 0.1)
    torch.testing.assert_close(out.z, flow[0])
    torch.testing.assert_close(out.p, flow[1])


# --------------------------------------------------------------------------- interface


def small(head=None, integrator=None, context=None, **top) -> GeodesicDynamics:
    """A small model: the given sections' keywords over latent 4, d_k 8, 12 prototypes."""
    cfg = config(
        latent_dim=4,
        encoder_dim=32,
        head={"d_k": 8, **(head or {})},
        integrator=integrator,
        context={"prototypes": 12, "feature_dim": 8, **(context or {})},
        **top,
    )
    torch.manual_seed(5)
    return GeodesicDynamics(6, 2, cfg)


def test_registered_and_wrapped_by_the_world_model():
    assert "geodesic" in dynamics_names()
    dyn = build_dynamics(
        "geodesic", 6, 2, config(latent_dim=4, head=dict(d_k=8), context=dict(prototypes=8))
    )
    model = WorldModel(6, 2, dyn)
    s = model.encode(torch.randn(5, 6))
    assert model.reward(s, torch.zeros(5, 2)).shape == (5, 1)
    assert model.decode(model.next(s, torch.zeros(5, 2))).shape == (5, 6)


def test_head_features_are_the_position_and_both_momenta():
    """The heads read (z, log_0 z, p / lambda, p); the world model's heads are sized from
    feature_dim."""
    z = ball_points(5, 4, 0.95, seed=7).float()
    p = torch.randn(5, 4)
    lam = poincare.conformal_factor(z)
    dyn = small()
    expected = torch.cat([z, poincare.logmap0(z), p / lam, p], dim=-1)
    torch.testing.assert_close(dyn.features(GeodesicState(z, p)), expected)
    assert dyn.feature_dim == expected.shape[-1]
    model = WorldModel(6, 2, dyn)
    assert model.reward(GeodesicState(z, p), torch.zeros(5, 2)).shape == (5, 1)


def test_identity_encoder_decodes_exactly_without_a_decoder_head():
    """Under the identity encoder the latent (z, p) is the observation: the world model decodes
    it exactly (no learned decoder whose error would add to every decoded prediction), and a
    decoded loss trains the dynamics through the state itself. Other encoders keep the head."""
    dyn = GeodesicDynamics(
        4, 2, config(latent_dim=2, encoder="identity", context=dict(prototypes=8))
    )
    model = WorldModel(4, 2, dyn)
    assert model._decoder is None
    assert not any("decoder" in name for name, _ in model.named_parameters())
    obs = torch.cat([ball_points(6, 2, 0.9, seed=3).float(), torch.randn(6, 2)], dim=-1)
    state = model.encode(obs)
    assert torch.equal(model.decode(state), obs)
    nxt = model.next(state, torch.rand(6, 2) * 2 - 1, stochastic=True)
    torch.testing.assert_close(model.decode(nxt), torch.cat([nxt.z, nxt.p], dim=-1))
    model.decode(nxt).square().sum().backward()
    assert dyn.integrator.control_linear.weight.grad.abs().sum() > 0
    heads = model.model_parameter_groups()["heads"]
    assert len(heads) == len([*model._reward.parameters(), *model._q.parameters()])
    assert WorldModel(6, 2, small())._decoder is not None


def test_encode_lands_in_the_ball_and_next_is_deterministic_when_planning():
    dyn = small()
    state = dyn.encode(100 * torch.randn(64, 6))  # huge observations: still inside
    assert (state.z.norm(dim=-1) <= dyn.config.max_norm + 1e-6).all()
    a = torch.rand(64, 2) * 2 - 1
    one, two = dyn.next(state, a), dyn.next(state, a)
    torch.testing.assert_close(one.z, two.z)
    torch.testing.assert_close(one.p, two.p)
    noisy = dyn.next(state, a, stochastic=True)
    assert not torch.equal(noisy.p, one.p)  # the O step samples in training
    assert dyn.features(state).shape == (64, 16)
    assert dyn.regularisers(state, None) == {}  # no regulariser of its own


def test_cached_kick_force_equals_recomputing_it():
    """The closing kick's force and control gain at z' are reused by the next opening kick
    (same map as recomputing them; the gain made non-zero so that a stale one would show)."""
    dyn = small()
    with torch.no_grad():
        dyn.integrator.control_mlp[-1].weight.normal_(0, 0.5)
    state = dyn.encode(torch.randn(8, 6))
    a = torch.rand(3, 8, 2) * 2 - 1
    ctx = dyn.context(state)
    cached = state
    for t in range(3):
        cached = dyn.next(cached, a[t], ctx)
    fresh = state
    for t in range(3):
        fresh = dyn.next(GeodesicState(fresh.z, fresh.p), a[t], ctx)  # copies drop the cache
    torch.testing.assert_close(cached.z, fresh.z)
    torch.testing.assert_close(cached.p, fresh.p)


def test_the_carry_is_explicit_and_dropped_by_copies_and_other_contexts():
    """next returns the position terms at z' in the state's carry (for the context it used);
    map-based copies (detach, indexing) start without it, and a step with another context
    recomputes the terms instead of reusing them."""
    dyn = small()
    state = dyn.encode(torch.randn(4, 6))
    ctx = dyn.context(state)
    out = dyn.next(state, torch.zeros(4, 2), ctx)
    assert out.carry.context is ctx
    torch.testing.assert_close(
        out.carry.terms.force, dyn.integrator.position_terms(out.z, ctx).force
    )
    assert out.detach().carry is None and out[:2].carry is None
    assert GeodesicState.stack([state, out]).carry is None
    other = dyn.context(state)
    a = torch.rand(4, 2)
    torch.testing.assert_close(
        dyn.next(out, a, other).p, dyn.next(GeodesicState(out.z, out.p), a, other).p
    )


def test_drift_correction_is_read_once_per_step():
    """The drift head is evaluated once per step and its output reused by the second half-drift
    (at that point's conformal factor). Recomposed here from the head's forward and the ball's
    exp map / transport."""
    dyn = small(integrator=dict(drift_correction=True, friction=0.3)).double()
    integ = dyn.integrator
    with torch.no_grad():
        integ.drift_head.w_o.weight.normal_(0, 0.5)  # a correction that is not zero
        integ.control_mlp[-1].weight.normal_(0, 0.5)  # and a state-dependent control gain
    state = dyn.encode(torch.randn(8, 6, dtype=F64))
    action = torch.rand(8, 2, dtype=F64) * 2 - 1
    calls = []
    hook = integ.drift_head.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        ctx = dyn.context(state)
        out = dyn.next(state, action, ctx)
        calls_in_step = len(calls)

        def head(z, p):  # the drift head's output (orthonormal frame) at (z, p)
            v = p * poincare.inverse_metric_factor(z)
            queries = CovariantQueries(z, state_features(z, p), velocity=v)
            return integ.drift_head(queries, ctx.correction)[0]

        def half_drift(z, p, out):  # exp_z(h/2 (v + out / lambda)), v transported
            v = p * poincare.inverse_metric_factor(z)
            step = v + out / poincare.conformal_factor(z)
            z_new = poincare.project(poincare.expmap(z, 0.5 * step), 0.999)
            v_new = poincare.parallel_transport(z, z_new, v)
            return z_new, v_new * poincare.metric_factor(z_new)

        h = 1.0
        z, p = state.z, state.p
        p = p + 0.5 * h * (integ.kick_force(z, ctx)[0] + integ.control_force(z, action))
        first = head(z, p)
        z, p = half_drift(z, p, first)
        p = p * torch.exp(-integ.friction * h)  # the OU mean (planning)
        z, p = half_drift(z, p, first)
        p = p + 0.5 * h * (integ.kick_force(z, ctx)[0] + integ.control_force(z, action))
    hook.remove()
    assert calls_in_step == 1
    torch.testing.assert_close(out.z, z)
    torch.testing.assert_close(out.p, p)


def test_consistency_loss_is_zero_on_itself_and_grows_with_distance():
    dyn = small()
    s = dyn.encode(torch.randn(16, 6))
    assert dyn.consistency_loss(s, s).abs().max() < 1e-10
    moved = GeodesicState(poincare.expmap(s.z, 0.05 * torch.randn_like(s.z)), s.p)
    farther = GeodesicState(poincare.expmap(s.z, 0.5 * torch.randn_like(s.z)), s.p)
    assert dyn.consistency_loss(moved, s).mean() < dyn.consistency_loss(farther, s).mean()


def test_consistency_loss_is_the_distance_and_the_transported_velocity_error():
    """d_H(z, z*)^2 + lambda(z*)^2 |P_{z->z*} v - v*|^2, divided by d, from the ball's own dist,
    parallel_transport and metric factors (float64, points up to |z| = 0.999)."""
    dyn = small().double()
    g = torch.Generator().manual_seed(3)
    z = ball_points(32, 4, 0.999, seed=4)
    zt = ball_points(32, 4, 0.999, seed=5)
    p, pt = torch.randn(2, 32, 4, generator=g, dtype=F64)
    v, vt = p * poincare.inverse_metric_factor(z), pt * poincare.inverse_metric_factor(zt)
    dv = poincare.parallel_transport(z, zt, v) - vt
    ref = poincare.dist(z, zt).square() + (poincare.conformal_factor(zt) * dv).square().sum(-1)
    got = dyn.consistency_loss(GeodesicState(z, p), GeodesicState(zt, pt))
    torch.testing.assert_close(got, ref / 4, rtol=1e-10, atol=1e-12)


def test_history_window_adds_texture_entries():
    dyn = small(context=dict(window=4))
    state = dyn.encode(torch.randn(8, 6))
    hist = dyn.encode(torch.randn(8 * 4, 6))
    history = GeodesicState(hist.z.view(8, 4, -1), hist.p.view(8, 4, -1))
    mask = torch.ones(8, 4, dtype=torch.bool)
    mask[:2, :2] = False  # a window reaching before the episode's start
    ctx = dyn.context(state, history=history, history_mask=mask)
    assert ctx.force_bank.size == 12 + 4 and ctx.force.charged
    out = dyn.next(state, torch.zeros(8, 2), ctx)
    assert torch.isfinite(out.z).all() and torch.isfinite(out.p).all()


def test_gradients_reach_every_parameter():
    dyn = small(
        context=dict(window=3),
        head=dict(chirality=0.5),
        integrator=dict(learned_thermostat=True, drift_correction=True, potential_wells=3),
    )
    obs = torch.randn(8, 6)
    state = dyn.encode(obs)
    hist = dyn.encode(torch.randn(8 * 3, 6))
    history = GeodesicState(hist.z.view(8, 3, -1), hist.p.view(8, 3, -1))
    with torch.no_grad():  # the output layers start at zero (exact flow): open them
        for head in dyn.integrator.heads():
            head.w_o.weight.normal_()
        dyn.integrator.control_mlp[-1].weight.normal_()
        dyn.integrator.well_depths.normal_()
    ctx = dyn.context(state, history=history, value_grad=torch.randn(8, 4))
    s = state
    for _ in range(2):
        s = dyn.next(s, torch.rand(8, 2), ctx, stochastic=True)
    (dyn.features(s).square().sum() + dyn.consistency_loss(s, state).sum()).backward()
    dead = [n for n, p in dyn.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not dead, dead


def test_finite_values_and_gradients_near_the_boundary():
    dyn = small(max_norm=1 - 1e-5, context=dict(window=2), integrator=dict(potential_wells=2))
    z = poincare.project(torch.randn(16, 4), 1 - 1e-5)  # on the cap
    p = 1e3 * torch.randn(16, 4)
    state = GeodesicState(z.requires_grad_(True), p.requires_grad_(True))
    hist = GeodesicState(z.detach().view(8, 2, 4), p.detach().view(8, 2, 4))
    ctx = dyn.context(GeodesicState(z[:8], p[:8]), history=hist)
    ctx_full = dyn.context(state)
    for c, st in ((ctx, GeodesicState(state.z[:8], state.p[:8])), (ctx_full, state)):
        out = dyn.next(st, torch.ones(st.z.shape[0], 2), c, stochastic=True)
        assert torch.isfinite(out.z).all() and torch.isfinite(out.p).all()
        assert (out.z.norm(dim=-1) <= 1 - 1e-5 + 1e-6).all()
        grads = torch.autograd.grad(dyn.features(out).sum(), [state.z, state.p])
        assert all(torch.isfinite(g).all() for g in grads)


def test_invalid_config_is_one_clear_error():
    """Each section validates itself, and its errors name GeodesicConfig.<section>.<field>."""
    for bad, match in (
        (dict(latent_dim=0), "GeodesicConfig.latent_dim must be"),
        (dict(head=dict(d_k=12)), "GeodesicConfig.head.d_k = 12 must be a multiple"),
        (dict(integrator=dict(drift="flat")), "GeodesicConfig.integrator.drift must be one of"),
        (dict(max_norm=1.0), "GeodesicConfig.max_norm must lie in"),
        (dict(integrator=dict(friction=-1.0)), "GeodesicConfig.integrator.friction must be"),
        (dict(head=dict(wilson="cubic")), "GeodesicConfig.head.wilson must be one of"),
        (dict(head=dict(string_tension=(1.0,))), "GeodesicConfig.head.string_tension needs"),
        (dict(context=dict(window=-1)), "GeodesicConfig.context.window must be"),
        (dict(encoder="cnn"), "GeodesicConfig.encoder must be one of"),
    ):
        with pytest.raises(ValueError, match=match) as err:
            config(**bad)
        assert "\n" not in str(err.value)


def test_prototypes_stay_in_the_ball_under_riemannian_adam():
    """Prototype positions are ManifoldParameters: RiemannianAdam keeps them inside the ball
    even under large steps (plain Adam pushed them outside in the feasibility study)."""
    import geoopt

    dyn = small()
    opt = geoopt.optim.RiemannianAdam(dyn.parameters(), lr=0.5)
    for _ in range(20):
        opt.zero_grad()
        bank = dyn.prototypes.force_bank()
        # pull every prototype toward a point outside the ball
        loss = (bank.positions - 3.0).square().sum()
        loss.backward()
        opt.step()
    norms = dyn.prototypes.positions.detach().norm(dim=-1)
    assert (norms < 1.0).all(), norms.max()
    assert isinstance(dyn.prototypes.force_bank(), ContextBank)


def _kernel_rollout(
    kernel: str, **head
) -> tuple[GeodesicDynamics, GeodesicState, GeodesicContext, GeodesicState]:
    """small()'s model (seed 5) with `kernel`, a window of 2 and the drift correction, every
    head's w_o (zero at initialisation: no head would act) set to the same N(0, 1) draw for every
    kernel, and two steps (the first stochastic, torch seeded 7) from fixed states, history and
    actions. Returns (model, start state, context, end state)."""
    dyn = small(
        head=dict(kernel=kernel, **head),
        context=dict(window=2),
        integrator=dict(drift_correction=True),
    )
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for h in dyn.integrator.heads():
            h.w_o.weight.copy_(torch.randn(h.w_o.weight.shape, generator=g))
    state = dyn.encode(torch.randn(8, 6, generator=g))
    hist = dyn.encode(torch.randn(16, 6, generator=g))
    history = GeodesicState(hist.z.view(8, 2, -1), hist.p.view(8, 2, -1))
    mask = torch.ones(8, 2, dtype=torch.bool)
    mask[2, 0] = mask[5, 1] = False  # two window entries missing
    ctx = dyn.context(state, history=history, history_mask=mask)
    actions = torch.rand(2, 8, 2, generator=g)
    torch.manual_seed(7)
    out = dyn.next(dyn.next(state, actions[0], ctx, stochastic=True), actions[1], ctx)
    return dyn, state, ctx, out


def test_every_attention_kernel_drives_the_model():
    """--attention: the heads read their banks with covariant softmax, HIDA or KRR (issue 7).
    The same seed's model from the same inputs steps to a different state under each kernel
    (and to the same state again under one: the differences are the kernel's), with finite
    values and gradients."""
    kernels = ("softmax", "inverse_distance", "krr")
    ends = {}
    for kernel in kernels:
        dyn, _, _, out = _kernel_rollout(kernel)
        dyn.features(out).square().sum().backward()
        assert torch.isfinite(out.z).all() and torch.isfinite(out.p).all()
        assert all(torch.isfinite(p.grad).all() for p in dyn.parameters() if p.grad is not None)
        ends[kernel] = out
    again = _kernel_rollout("krr")[3]
    torch.testing.assert_close(again.z, ends["krr"].z, rtol=0, atol=1e-6)
    for i, a in enumerate(kernels):
        for b in kernels[i + 1 :]:
            gap = float((ends[a].z - ends[b].z).detach().abs().max())  # measured: 0.3-0.4
            assert gap > 0.05, (a, b, gap)


def test_the_inverse_distance_kick_is_minus_the_gradient_of_hida_over_its_bank():
    """Kernel inverse_distance, screening off: the kick head's potential is
    Phi(z) = w_o(sum_j W_j V~_j), W the normalised (d_H(z, z'_j)^2 + eps)^-1 over the valid
    entries of its bank (seed 000 HIDA, no temperature), so the model's kick force is -grad Phi
    plus the confinement: recomputed with ida's explicit-difference distances and autograd."""
    dyn, state, ctx, _ = _kernel_rollout("inverse_distance", screening=False)
    integ, bank = dyn.integrator, ctx.force
    assert bank.mask is not None and not bank.mask.all()  # the missing window entries
    assert set(bank.levels.unique().tolist()) == {0, 1}  # prototypes and window entries
    with torch.no_grad():
        force, _ = integ.kick_force(state.z, ctx)
    z = state.z.detach().requires_grad_(True)
    mixed, _ = ida.inverse_distance_attention(
        z.unsqueeze(1), bank.positions, bank.values, integ.kick_head.config.options.ida_eps,
        "poincare", bank.mask.unsqueeze(1), form="difference",
    )  # fmt: skip
    (grad,) = torch.autograd.grad(integ.kick_head.w_o(mixed).sum(), z)
    attention_force = force - integ.confinement * confining_force(state.z)
    assert float(grad.abs().max()) > 0.1  # the head acts (measured: 0.55)
    torch.testing.assert_close(attention_force, -grad, rtol=1e-4, atol=1e-5)


def test_a_plan_context_from_one_root_serves_every_sampled_trajectory():
    """The planner builds the context from a root of batch 1 (value gradient, history window
    included) and rolls out N samples with it: each sample's rollout is the one a context
    built for that sample's own row (the root and its history repeated) gives."""
    from world_model.model import WorldModel

    dyn = small(context=dict(window=2), head=dict(chirality=0.5))
    with torch.no_grad():
        for head in dyn.integrator.heads():
            head.w_o.weight.normal_(generator=torch.Generator().manual_seed(3))
    model = WorldModel(6, 2, dyn)
    root = model.encode(torch.randn(1, 6))
    history, mask = torch.randn(2, 1, 6), torch.tensor([[False], [True]])
    ctx = model.context(root, EpisodeInputs(history, mask))
    assert ctx.value_grad.shape == (1, 4)
    rows = root.repeat(12)
    per_row = model.context(rows, EpisodeInputs(history.repeat(1, 12, 1), mask.repeat(1, 12)))
    assert per_row.value_grad.shape == (12, 4)
    a = torch.rand(2, 12, 2) * 2 - 1
    shared, own = root.expand(12), rows
    for t in range(2):
        shared, own = model.next(shared, a[t], ctx), model.next(own, a[t], per_row)
    assert not torch.allclose(shared.z[0], shared.z[1])  # the samples' actions differ
    torch.testing.assert_close(shared.z, own.z)
    torch.testing.assert_close(shared.p, own.p)


def test_a_plan_root_kicks_once_and_its_expanded_samples_reuse_it():
    """Building a context writes into no state; `root` returns the root with its kick in its
    carry, `expand` carries it to every sample, and the step equals recomputing the kick per
    sample."""
    dyn = small(context=dict(window=2))
    encoded = dyn.encode(torch.randn(1, 6))
    ctx = dyn.context(encoded)
    assert encoded.carry is None
    root = dyn.root(encoded, ctx)
    assert isinstance(root.carry, StepCarry) and root.carry.context is ctx
    calls = []
    original = dyn.integrator.kick_force

    def counting(z, *args, **kwargs):
        calls.append(z.shape[0])
        return original(z, *args, **kwargs)

    dyn.integrator.kick_force = counting
    a = torch.rand(12, 2) * 2 - 1
    reused = dyn.next(root.expand(12), a, ctx)
    assert calls == [12]  # the closing kick only: the opening one came from the root's cache
    fresh = dyn.next(GeodesicState(root.z.expand(12, -1), root.p.expand(12, -1)), a, ctx)
    assert calls == [12, 12, 12]
    torch.testing.assert_close(reused.z, fresh.z)
    torch.testing.assert_close(reused.p, fresh.p)


def test_closed_form_kick_equals_autograd_in_rollouts_and_their_gradients():
    """potential_gradient = 'closed_form' is the same model as 'autograd': equal states after a
    stochastic training rollout (history window, chiral gate) and equal parameter gradients of
    a loss on it (the closed form is differentiated once, autograd's gradient twice)."""
    results = []
    for mode in ("autograd", "closed_form"):
        dyn = small(
            context=dict(window=3),
            head=dict(chirality=0.5),
            integrator=dict(potential_gradient=mode, drift_correction=True),
        )
        dyn = dyn.double()
        with torch.no_grad():
            for head in dyn.integrator.heads():
                head.w_o.weight.normal_(generator=torch.Generator().manual_seed(8))
        obs = torch.randn(8, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        hist_obs = torch.randn(24, 6, generator=torch.Generator().manual_seed(3)).double()
        state = dyn.encode(obs)
        hist = dyn.encode(hist_obs)
        history = GeodesicState(hist.z.view(8, 3, -1), hist.p.view(8, 3, -1))
        ctx = dyn.context(state, history=history, value_grad=0.5 * state.z.detach())
        torch.manual_seed(0)
        s = GeodesicState(state.z, state.p)  # no carry: both modes kick here
        for t in range(3):
            s = dyn.next(
                s, torch.full((8, 2), 0.3 * t - 0.2, dtype=torch.float64), ctx, stochastic=True
            )
        loss = dyn.features(s).square().sum() + dyn.consistency_loss(s, state).sum()
        grads = torch.autograd.grad(loss, list(dyn.parameters()), allow_unused=True)
        results.append((s, grads))
    (s_a, g_a), (s_c, g_c) = results
    torch.testing.assert_close(s_c.z, s_a.z, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(s_c.p, s_a.p, rtol=1e-10, atol=1e-12)
    for a, c in zip(g_a, g_c, strict=True):
        if a is None:
            assert c is None or not c.abs().max() > 0
        else:
            torch.testing.assert_close(c, a, rtol=1e-8, atol=1e-10)


# --------------------------------------------------------------------------- config layout

# The flat [dynamics] table of an older run folder's config.json: the defaults of the flat
# GeodesicConfig at commit 1468b72 (world_model/geodesic.py), written out literally.
OLD_FLAT_DYNAMICS = {
    "latent_dim": 16,
    "encoder": "mlp",
    "encoder_dim": 128,
    "encoder_layers": 1,
    "activation": "silu",
    "max_norm": 0.999,
    "dt": 1.0,
    "prototypes": 64,
    "feature_dim": 16,
    "window": 4,
    "d_k": 16,
    "n_colors": 2,
    "g_s": 1.0,
    "wilson": "exp",
    "segments": 8,
    "attention": "softmax",
    "attention_temperature": "metric",
    "christoffel": "poincare",
    "string_tension": [1.0, 0.01],
    "chirality": 0.0,
    "value_gradient": True,
    "force": "potential",
    "potential_gradient": "closed_form",
    "drift_correction": True,
    "drift_correction_once": True,
    "drift": "geodesic",
    "friction": 0.1,
    "thermostat_temperature": 0.001,
    "learned_thermostat": False,
    "confinement": 0.1,
    "potential_wells": 0,
    "well_width": 0.5,
    "radius_penalty": 0.0,
    "control": "mlp",
    "prototype_init_scale": 0.7,
    "head_features": "full",
}


def test_an_old_flat_dynamics_table_migrates_to_the_sections_and_the_same_config():
    nested = migrate_flat_dynamics(OLD_FLAT_DYNAMICS)
    assert set(nested) == {
        "latent_dim", "encoder", "encoder_dim", "encoder_layers", "activation", "max_norm",
        "head", "integrator", "context",
    }  # fmt: skip
    assert nested["head"]["kernel"] == "softmax" and nested["head"]["temperature"] == "metric"
    assert "attention" not in nested["head"] and nested["context"]["window"] == 4
    assert nested["integrator"]["drift_correction"] is True and nested["integrator"]["dt"] == 1.0
    removed = ("head_features", "radius_penalty", "drift_correction_once")
    tables = [nested["head"], nested["integrator"], nested["context"]]
    assert not any(key in nested or key in table for table in tables for key in removed)
    # the old defaults are today's but for the Wilson lines (exp until magnus4 became the
    # default) and the context (the fixed table without memory until the memory and the routed
    # pool became the default): an old run keeps the model it was trained with
    loaded = migrate_config(
        {"train": {"world_model": "geodesic"}, "dynamics": OLD_FLAT_DYNAMICS}, 1
    )
    built = RunConfig.from_dict(loaded).dynamics
    today = GeodesicConfig()
    assert built.head.wilson == "exp" and built.head.segments == 8
    assert built == dataclasses.replace(
        today,
        head=dataclasses.replace(today.head, wilson="exp", segments=8),
        context=dataclasses.replace(today.context, memory="none", routing="dense"),
    )
    assert (today.context.memory, today.context.routing) == ("dense", "gsr")
    assert OLD_FLAT_DYNAMICS["d_k"] == 16  # the input is left alone
    assert "head" not in OLD_FLAT_DYNAMICS

    # already nested: unchanged; a half-nested table is merged into its sections
    assert migrate_flat_dynamics(nested) == nested
    assert migrate_flat_dynamics({"latent_dim": 8, "head": {"wilson": "exp"}}) == {
        "latent_dim": 8,
        "head": {"wilson": "exp"},
    }
    assert migrate_flat_dynamics({"d_k": 8, "head": {"wilson": "exp"}}) == {
        "head": {"d_k": 8, "wilson": "exp"}
    }
    assert migrate_flat_dynamics({}) == {}
    assert migrate_flat_dynamics({"radius_penalty": 0}) == {}  # the kept value: dropped


@pytest.mark.parametrize(
    "key, value",
    [
        ("head_features", "orthonormal"),
        ("radius_penalty", 0.01),
        ("drift_correction_once", False),
        ("drift_correction_once", 1),
        ("attention_temperature", "calibrated"),
    ],
)
def test_removed_options_other_than_their_kept_value_are_refused_in_one_line(key, value):
    with pytest.raises(ValueError, match=rf"{key} = .* was removed") as err:
        migrate_flat_dynamics({**OLD_FLAT_DYNAMICS, key: value})
    assert "\n" not in str(err.value)


def test_every_setting_has_one_default():
    """The heads' options are HeadOptions with its own defaults (the geodesic model's), a head
    built with no options gets them, every section is constructible with no arguments, and the
    model's heads share one options object."""
    import dataclasses

    from world_model.attention.covariant import CovariantAttentionConfig, HeadOptions

    assert dataclasses.asdict(GeodesicConfig().head) == dataclasses.asdict(HeadOptions())
    assert CovariantAttentionConfig(1, 1, 1, 1, 1).options == HeadOptions()
    for cls in (GeodesicConfig, GeodesicHeadOptions, IntegratorConfig, ContextConfig):
        cls()
    flat_names = {f.name for f in dataclasses.fields(GeodesicConfig)}
    for section in (HeadOptions, IntegratorConfig, ContextConfig):
        assert not flat_names & {f.name for f in dataclasses.fields(section)}
    dyn = small(integrator=dict(learned_thermostat=True))
    assert all(h.config.options is dyn.config.head for h in dyn.integrator.heads())
    assert dyn.integrator.kick_head.config.query_level == 0
    assert dyn.integrator.drift_head.config.query_level == 1


def test_every_option_table_lists_exactly_its_literal_choices():
    """An option's choices are defined once, by its field's Literal type: the tables that select
    by it (encoder, routing, memory operator, attention kernel) hold exactly those choices, and
    a value outside them is refused with the choices named."""
    from world_model.attention.covariant_kernels import ATTENTION_KERNELS
    from world_model.geodesic import dynamics as geodesic_dynamics
    from world_model.options import choices

    assert tuple(geodesic_dynamics._ENCODERS) == choices(GeodesicConfig, "encoder")
    assert tuple(geodesic_dynamics._ENCODED) == choices(GeodesicConfig, "encoder")
    assert tuple(geodesic_dynamics._POOLS) == choices(ContextConfig, "routing")
    assert choices(ContextConfig, "memory") == ("none", "dense")
    assert tuple(ATTENTION_KERNELS) == choices(GeodesicHeadOptions, "kernel")
    with pytest.raises(ValueError, match=r"routing must be one of \('dense', 'gsr'\), got 'top'"):
        ContextConfig(routing="top")


def test_the_reports_and_figures_read_the_heads_as_the_integrator_runs_them():
    """One query builder for every reader of the heads (world_model/geodesic/kick.py): the drift
    head's output at kick.drift_queries is the correction the integrator's drift applies, chiral
    gate included (the node reports used to query the drift head without it: a bug, since node
    67 must measure the head the model runs); the kick's force is minus the autograd gradient
    of kick.potential, the potential hamiltonian() reads."""
    from world_model.geodesic import kick

    dyn = small(head=dict(chirality=0.5), integrator=dict(drift_correction=True))
    with torch.no_grad():
        for head in dyn.integrator.heads():
            head.w_o.weight.normal_(generator=torch.Generator().manual_seed(4))
    model = WorldModel(6, 2, dyn)
    state = model.encode(torch.randn(5, 6, generator=torch.Generator().manual_seed(6)))
    ctx = model.context(state)  # with the value gradient: the chiral gate acts
    integ = dyn.integrator
    with torch.no_grad():
        _, _, correction = integ.drift(state.z, state.p, 0.5, ctx)
        queries = kick.drift_queries(integ.drift_head, state.z, state.p, ctx)
        torch.testing.assert_close(integ.drift_head(queries, ctx.correction)[0], correction)
        ungated = CovariantQueries(queries.positions, queries.features, velocity=queries.velocity)
        assert (integ.drift_head(ungated, ctx.correction)[0] - correction).abs().max() > 1e-4
    z = state.z.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(kick.potential(integ, z, ctx).sum(), z)
    with torch.no_grad():
        force, _ = integ.kick_force(state.z, ctx)
    torch.testing.assert_close(force, -grad, rtol=1e-4, atol=1e-5)
