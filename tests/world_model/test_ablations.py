"""The seed's components switched off one at a time (README.md, "Ablations"): each switch changes
what the head or the geodesic model computes, in the way its docstring says, and would fail
here if it were ignored. Wilson lines "none": identity transport; screening off: the weights are
the plain softmax of the logits and the string tension is gone; temperature "constant": tau =
sqrt(d_k) everywhere; chirality off (context.value_gradient): no projector, kappa untouched by
an optimiser step that moves it in the full model; learned thermostat: trainable residual
parameters that the exact OU step lacks, and a different stochastic step; the closed-form kick
gradient follows the switches.
"""

from __future__ import annotations

import math

import pytest
import torch

from geometry import poincare
from geometry.doublet import masked_softmax
from tests.world_model.test_covariant import (
    make_bank,
    make_head,
    make_queries,
)
from tests.world_model.test_geodesic import small
from world_model.attention.covariant import HeadOptions
from world_model.geodesic import GeodesicState

# --------------------------------------------------------------------------- one head


def test_wilson_none_transports_nothing():
    """Every line is the identity, for the head's own connection and any other, so the scores
    are <psi_Q(z), psi_K(z')> in the local frames; the same head with magnus4 lines scores
    otherwise."""
    bank, q = make_bank(), make_queries()
    off, full = make_head(wilson="none"), make_head(wilson="magnus4")  # same parameters
    z = q.positions
    eye = torch.eye(off.rep_dim, dtype=z.dtype).expand(*z.shape[:-1], off.rep_dim, off.rep_dim)
    assert torch.equal(off.lines_to_origin(z), eye)
    assert torch.equal(off.lines_to_origin(z, full.connection()), eye)
    assert not torch.allclose(full.lines_to_origin(z), eye, atol=1e-3)
    _, rec = off(q, bank)
    psi_q = off.query_field(q)  # [B, Q, d_k]
    psi_k = off.w_k(bank.key_features)  # [B, N, d_k]
    torch.testing.assert_close(rec.scores, psi_q @ psi_k.transpose(-1, -2), rtol=0, atol=1e-12)
    _, rec_full = full(q, bank)
    assert not torch.allclose(rec_full.scores, rec.scores, atol=1e-3)


def test_screening_off_gives_the_unscreened_softmax_and_no_string_tension():
    bank, q = make_bank(), make_queries()  # both levels, texture entries charged
    off = make_head(screening=False, string_tension=(0.8, 0.2))
    on = make_head(screening=True, string_tension=(0.8, 0.2))
    assert "screening_coupling" not in dict(off.named_parameters())
    with pytest.raises(ValueError, match="no area-law screening"):
        off.string_tension()
    _, rec_off = off(q, bank)
    _, rec_on = on(q, bank)
    torch.testing.assert_close(rec_off.logits, rec_on.logits, rtol=0, atol=0)  # same head else
    unscreened = masked_softmax(rec_off.logits, bank.mask.unsqueeze(-2))
    torch.testing.assert_close(rec_off.weights, unscreened, rtol=0, atol=1e-15)
    assert not torch.allclose(rec_on.weights, unscreened, atol=1e-3)  # screening acts in full


def test_constant_temperature_is_sqrt_dk_everywhere():
    bank, q = make_bank(), make_queries()
    const, metric = make_head(temperature="constant"), make_head(temperature="metric")
    _, rec_c = const(q, bank)
    _, rec_m = metric(q, bank)
    d_k = const.config.options.d_k
    assert torch.equal(rec_c.tau, torch.full_like(rec_c.tau, math.sqrt(d_k)))
    torch.testing.assert_close(rec_c.logits, rec_c.scores / math.sqrt(d_k), rtol=0, atol=1e-15)
    lam = poincare.conformal_factor(q.positions).squeeze(-1)
    torch.testing.assert_close(rec_m.tau, math.sqrt(d_k) / lam)


def test_screening_is_a_validated_switch():
    with pytest.raises(ValueError, match="screening must be a bool"):
        HeadOptions(screening="off")
    with pytest.raises(ValueError, match="wilson must be one of"):
        HeadOptions(wilson="off")
    assert HeadOptions().screening is True and HeadOptions().wilson == "magnus4"


# --------------------------------------------------------------------------- the geodesic model


def _open_outputs(dyn) -> None:
    """The heads' output layers start at zero (the exact flow): open them, the same way in
    every model, so the heads' read-outs reach the step."""
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for head in dyn.integrator.heads():
            head.w_o.weight.copy_(torch.randn(head.w_o.weight.shape, generator=g))


def _rollout(dyn, value_fn=None, stochastic=False, steps=2) -> tuple[GeodesicState, object]:
    obs = torch.randn(6, 6, generator=torch.Generator().manual_seed(2))
    hist = dyn.encode(torch.randn(6 * 3, 6, generator=torch.Generator().manual_seed(3)))
    history = GeodesicState(hist.z.view(6, 3, -1), hist.p.view(6, 3, -1))
    state = dyn.encode(obs)
    ctx = dyn.context(state, history=history, value_fn=value_fn)
    torch.manual_seed(0)  # the thermostat's noise
    s = state
    for t in range(steps):
        s = dyn.next(s, torch.full((6, 2), 0.3 * t - 0.2), ctx, stochastic=stochastic)
    return s, ctx


def test_geodesic_model_without_wilson_lines_or_screening_steps_otherwise():
    full = small(context=dict(window=3))
    parameters = {n: p.detach().clone() for n, p in full.named_parameters()}
    _open_outputs(full)
    with torch.no_grad():
        s_full, _ = _rollout(full)
    for switch in (dict(wilson="none"), dict(screening=False)):
        ablated = small(context=dict(window=3), head=switch)
        for name, p in ablated.named_parameters():  # the same seed: the same parameters
            assert torch.equal(p, parameters[name]), name  # (screening off: one fewer each)
        _open_outputs(ablated)
        with torch.no_grad():
            s_abl, ctx = _rollout(ablated)
        assert not torch.allclose(s_full.p, s_abl.p, atol=1e-4), switch
        if "wilson" in switch:
            for lines in (ablated.integrator.lines(s_abl.z), ctx.force.lines):
                assert torch.equal(lines, torch.eye(lines.shape[-1]).expand_as(lines))
        else:
            assert all(h.screening_coupling is None for h in ablated.integrator.heads())
            assert len(parameters) - len(dict(ablated.named_parameters())) == 2  # kick, drift


def test_chirality_off_keeps_the_gate_the_identity_through_training():
    """A loss on a rollout moves kappa in the full model after one optimiser step; with
    chirality off (context.value_gradient False) the context has no projector even when a value
    estimate is offered, kappa gets no gradient and stays, and the step equals the full
    model's with its chiral gate taken away."""
    value_net = torch.nn.Linear(4, 1)

    def value_fn(state):
        return value_net(state.z)

    models = {}
    for on in (True, False):
        dyn = small(context=dict(window=3, value_gradient=on), head=dict(chirality=0.5))
        _open_outputs(dyn)
        kappa = dyn.integrator.kick_head.chirality_strength
        before = kappa.detach().clone()
        optimiser = torch.optim.Adam(dyn.parameters(), lr=1e-2)
        s, ctx = _rollout(dyn, value_fn)
        (dyn.features(s).square().sum()).backward()
        optimiser.step()
        models[on] = (dyn, ctx, kappa.grad, before, kappa.detach().clone())
    dyn_on, ctx_on, grad_on, before_on, after_on = models[True]
    dyn_off, ctx_off, grad_off, before_off, after_off = models[False]
    assert ctx_on.value_grad is not None and grad_on.abs() > 0 and after_on != before_on
    assert ctx_off.value_grad is None and ctx_off.chiral_for(dyn_off.integrator.kick_head) is None
    assert grad_off is None and torch.equal(after_off, before_off)
    # after the step, the ablated model's step is the full model's without the gate: give the
    # full model the ablated one's parameters and no value gradient
    dyn_on.load_state_dict(dyn_off.state_dict())
    with torch.no_grad():
        s_off, _ = _rollout(dyn_off, value_fn)
        s_plain, _ = _rollout(dyn_on, None)
        s_gated, _ = _rollout(dyn_on, value_fn)
    assert torch.equal(s_off.z, s_plain.z) and torch.equal(s_off.p, s_plain.p)
    assert not torch.allclose(s_gated.p, s_off.p, atol=1e-6)  # kappa = 0.5: the gate would act


def test_learned_thermostat_has_trainable_residual_parameters_that_exact_ou_lacks():
    exact = small(context=dict(window=3))
    learned = small(context=dict(window=3), integrator=dict(learned_thermostat=True))
    names_exact = set(dict(exact.named_parameters()))
    extra = set(dict(learned.named_parameters())) - names_exact
    assert extra and all(n.startswith("integrator.thermostat_head.") for n in extra)
    assert exact.integrator.thermostat_head is None
    learned.load_state_dict(exact.state_dict(), strict=False)  # the shared parameters equal
    s_exact, _ = _rollout(exact, stochastic=True, steps=1)
    s_learned, _ = _rollout(learned, stochastic=True, steps=1)
    assert not torch.allclose(s_exact.p, s_learned.p, atol=1e-6)  # the residual acts
    s_learned.p.square().sum().backward()
    head = learned.integrator.thermostat_head
    for layer in (head.w_q, head.w_k, head.w_o):  # its fields and read-out train
        assert layer.weight.requires_grad and layer.weight.grad.abs().sum() > 0
    with torch.no_grad():  # planning rollouts (the mean) do not read it
        s_exact, _ = _rollout(exact)
        s_learned, _ = _rollout(learned)
    assert torch.equal(s_exact.p, s_learned.p)
