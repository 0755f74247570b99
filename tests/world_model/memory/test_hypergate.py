"""HyperGate (seed 000 §7): the gates' definitions, Theorem 7.1 in a checkable form against
autograd Jacobians, where it is vacuous, and a saturated gate whose gradient vanishes
(world_model/memory/hypergate.py)."""

from __future__ import annotations

import geoopt
import pytest
import torch
from torch.func import jacrev, vmap

from world_model.memory.hypergate import (
    HyperGate,
    HyperGateConfig,
    dimension_gate,
    gate_jacobian_bounds,
    head_gate,
    token_gate,
)


def instance(d, scale_w, scale_u, bias, seed):
    g = torch.Generator().manual_seed(seed)
    w = scale_w * torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
    b = bias + torch.randn(d, generator=g, dtype=torch.float64)
    u = scale_u * torch.randn(64, d, generator=g, dtype=torch.float64)
    return u, w, b


def sigma_min(u, w, b):
    jac = vmap(jacrev(lambda x: dimension_gate(x, w, b)))(u)  # [n, d, d] by autograd
    return torch.linalg.svdvals(jac)[:, -1], jac


def test_jacobian_is_the_closed_form():
    u, w, b = instance(6, 1.0, 1.0, 0.0, 0)
    _, jac = sigma_min(u, w, b)
    s = torch.sigmoid(u @ w.T + b)
    closed = torch.diag_embed(s) + (s * (1 - s) * u).unsqueeze(-1) * w
    torch.testing.assert_close(jac, closed)


@pytest.mark.parametrize("d", [4, 32])
@pytest.mark.parametrize(
    "scale_w, scale_u, bias", [(0.1, 0.5, 2.0), (1.0, 1.0, 0.0), (3.0, 2.0, -1.0)]
)
def test_theorem_7_1_bounds_hold(d, scale_w, scale_u, bias):
    u, w, b = instance(d, scale_w, scale_u, bias, d)
    smin, _ = sigma_min(u, w, b)
    sharp, seed_form = gate_jacobian_bounds(u, w, b)
    assert (smin >= sharp - 1e-12).all() and (sharp >= seed_form - 1e-12).all()


def test_bound_is_vacuous_at_initialisation_scales_and_informative_for_small_inputs():
    u, w, b = instance(32, 1.0, 1.0, 0.0, 1)  # unit-variance inputs, a Xavier-like W_g
    _, seed_form = gate_jacobian_bounds(u, w, b)
    assert (seed_form <= 0).all()  # vacuous for every input
    u, w, b = instance(32, 0.1, 0.1, 2.0, 2)  # small W_g and inputs, an open gate
    smin, _ = sigma_min(u, w, b)
    _, seed_form = gate_jacobian_bounds(u, w, b)
    assert (seed_form > 0.5).all() and (smin >= seed_form).all()


def test_a_saturated_gate_makes_the_gradient_vanish():
    """'gradients do not vanish due to gating alone' (Thm 7.1's conclusion) fails: with
    sigma(z_k) ~ e^-20 on one coordinate, sigma_min(dh/du) ~ 2e-9 (the bound says <= that)."""
    u, w, b = instance(8, 0.1, 0.5, 0.0, 3)
    b[0] = -20.0
    smin, _ = sigma_min(u, w, b)
    sharp, _ = gate_jacobian_bounds(u, w, b)
    assert (smin < 1e-8).all() and (sharp < 1e-8).all()


def test_head_and_token_gates_match_their_definitions():
    ball = geoopt.PoincareBall()
    pos = 0.3 * torch.randn(2, 5, 3, 4, dtype=torch.float64)  # [B, N, H, d]
    pos = pos / (1 + pos.norm(dim=-1, keepdim=True))
    slope, offset = torch.tensor([0.5, -1.0, 2.0]).double(), torch.tensor([0.1, 0.2, 0.3]).double()
    kappa = head_gate(pos, slope, offset)
    m = torch.log(1 - (pos**2).sum(-1)).mean(1)  # [B, H]
    torch.testing.assert_close(kappa, torch.sigmoid(slope * m + offset))
    beta = token_gate(pos, torch.tensor(0.7).double(), torch.tensor(-0.2).double())
    rho = ball.dist0(pos).mean(-1)  # [B, N]
    torch.testing.assert_close(beta, torch.sigmoid(0.7 * rho - 0.2))


def test_module_combines_heads_memory_and_the_dimension_gate():
    gate = HyperGate(HyperGateConfig(dim=6, heads=3)).double()
    main = torch.randn(2, 4, 3, 2, dtype=torch.float64)
    pos = 0.2 * torch.randn(2, 4, 3, 5, dtype=torch.float64)
    mem = torch.randn(2, 4, 6, dtype=torch.float64)
    h, gates = gate(main, pos, mem)
    u = (gates["kappa"][:, None, :, None] * main).reshape(2, 4, 6) + gates["beta"][..., None] * mem
    torch.testing.assert_close(h, dimension_gate(u, gate.gate.weight, gate.gate.bias))
    h0, _ = gate(main, pos, None)
    assert not torch.allclose(h0, h)


def test_config_errors_are_one_line():
    for kwargs, match in ((dict(dim=0), "dim"), (dict(dim=6, heads=4), "multiple")):
        with pytest.raises(ValueError, match=match) as info:
            HyperGateConfig(**kwargs)
        assert "\n" not in str(info.value)
