"""world_model.gru: the recurrent step against the GRU equations written out, SimNorm latents,
gradcheck, config and shape errors, and a short fit of a known linear system through the
project's own losses (multi-step prediction error must fall)."""

from __future__ import annotations

import pytest
import torch

from world_model.gru import GRUConfig, GRUDynamics, GRUState
from world_model.model import WorldModel, WorldModelConfig
from world_model.training import LossConfig, SequenceBatch, world_model_loss


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """One torch thread, as the agent runs (TrainConfig.single_thread): with other processes on
    the 2 cores, 2 threads made these small networks ~15x slower. Not restored: raising the count
    again would call torch.set_num_threads(2), which this project never does (PyTorch #142815)."""
    torch.set_num_threads(1)


def gru_equations(cell: torch.nn.GRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """r = s(W_ir x + b_ir + W_hr h + b_hr), u = s(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - u) n + u h (Cho et al. 2014)."""
    w_ir, w_iz, w_in = cell.weight_ih.chunk(3)
    w_hr, w_hz, w_hn = cell.weight_hh.chunk(3)
    b_ir, b_iz, b_in = cell.bias_ih.chunk(3)
    b_hr, b_hz, b_hn = cell.bias_hh.chunk(3)
    r = torch.sigmoid(x @ w_ir.T + b_ir + h @ w_hr.T + b_hr)
    u = torch.sigmoid(x @ w_iz.T + b_iz + h @ w_hz.T + b_hz)
    n = torch.tanh(x @ w_in.T + b_in + r * (h @ w_hn.T + b_hn))
    return (1 - u) * n + u * h


@pytest.mark.parametrize("norm", ["simnorm", "tanh", "none"])
def test_next_is_the_gru_step_on_the_input_network(norm):
    torch.manual_seed(0)
    dyn = GRUDynamics(5, 2, GRUConfig(latent_dim=16, input_dim=12, latent_norm=norm)).double()
    state = dyn.encode(torch.randn(7, 5, dtype=torch.float64))
    a = torch.rand(7, 2, dtype=torch.float64) * 2 - 1
    x = dyn.input_net(torch.cat([state.h, a], -1))
    h_raw = gru_equations(dyn.cell, x, state.h)
    expected = {
        "simnorm": lambda h: torch.softmax(h.view(7, 2, 8), -1).view(7, 16),
        "tanh": torch.tanh,
        "none": lambda h: h,
    }[norm](h_raw)
    out = dyn.next(state, a)
    torch.testing.assert_close(out.h, expected)
    # deterministic: the stochastic flag and the context change nothing
    torch.testing.assert_close(dyn.next(state, a, "ctx", stochastic=True).h, out.h)
    assert dyn.features(out) is out.h and dyn.context(state) is None


def test_simnorm_latents_live_on_a_product_of_simplices():
    dyn = GRUDynamics(3, 1, GRUConfig(latent_dim=32, simnorm_dim=8))
    s = dyn.encode(torch.randn(10, 3) * 100)
    for h in (s.h, dyn.next(s, torch.ones(10, 1)).h):
        groups = h.view(10, 4, 8)
        assert torch.all(groups >= 0)
        torch.testing.assert_close(groups.sum(-1), torch.ones(10, 4))


def test_gradcheck_of_encode_and_next():
    torch.manual_seed(0)
    dyn = GRUDynamics(
        3, 1, GRUConfig(latent_dim=8, encoder_dim=8, input_dim=8, simnorm_dim=4)
    ).double()
    obs = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    act = torch.rand(4, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda o, a: dyn.next(dyn.encode(o), a).h, (obs, act))


def test_parameter_groups_split_encoder_from_dynamics():
    dyn = GRUDynamics(3, 1)
    groups = dyn.parameter_groups()
    ids = {id(p) for g in groups.values() for p in g}
    assert ids == {id(p) for p in dyn.parameters()}
    assert {id(p) for p in groups["encoder"]} == {id(p) for p in dyn.encoder.parameters()}


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="simnorm_dim 5 must divide latent_dim 16"):
        GRUConfig(latent_dim=16, simnorm_dim=5)
    with pytest.raises(ValueError, match="latent_norm"):
        GRUConfig(latent_norm="batchnorm")
    with pytest.raises(ValueError, match="latent_dim"):
        GRUConfig(latent_dim=0)
    with pytest.raises(ValueError, match=r"obs \[B, O\]"):
        GRUDynamics(3, 1).encode(torch.zeros(3))


def test_fits_a_linear_system_through_the_world_model_losses():
    """x' = A x + B u with A a damped rotation: 150 updates of the TD-MPC2 loss (decode and
    consistency terms) must cut the 3-step open-loop decoding error at least 5-fold."""
    torch.manual_seed(0)
    theta = 0.3
    A = 0.95 * torch.tensor(
        [
            [torch.cos(torch.tensor(theta)), -torch.sin(torch.tensor(theta))],
            [torch.sin(torch.tensor(theta)), torch.cos(torch.tensor(theta))],
        ]
    )
    B = torch.tensor([[0.0], [0.5]])

    def batch(n=64, horizon=3):
        x = torch.randn(n, 2)
        u = torch.rand(horizon, n, 1) * 2 - 1
        xs = [x]
        for t in range(horizon):
            xs.append(xs[-1] @ A.T + u[t] @ B.T)
        obs = torch.stack(xs)
        zeros = torch.zeros(horizon, n, 1)
        return SequenceBatch(obs, u, zeros, zeros, zeros)

    dyn = GRUDynamics(2, 1, GRUConfig(latent_dim=32, encoder_dim=32, input_dim=32))
    model = WorldModel(2, 1, dyn, WorldModelConfig(hidden_dim=32, num_bins=11))
    cfg = LossConfig(horizon=3, decode_coef=1.0, reward_coef=0.0, value_coef=0.0)
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)

    def open_loop_error(b):
        with torch.no_grad():
            s = model.encode(b.obs[0])
            for t in range(3):
                s = model.next(s, b.action[t])
            return (model.decode(s) - b.obs[3]).square().mean().item()

    test = batch(256)
    before = open_loop_error(test)
    for _ in range(150):
        loss, _, _ = world_model_loss(model, batch(), 0.9, cfg)
        optim.zero_grad()
        loss.backward()
        optim.step()
        model.update_targets(0.01, 0.05)
    after = open_loop_error(test)
    assert after < before / 5, (before, after)
    assert isinstance(model.encode(test.obs[0]), GRUState)
