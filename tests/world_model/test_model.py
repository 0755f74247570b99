"""world_model.model and world_model.training: discrete regression against closed forms and
torch's own cross-entropy, the policy's log-density against torch.distributions, the ensemble
against per-member linear maps, TD targets by hand (terminated stops bootstrapping, truncated
does not), gradient routing of the losses, EMA targets, latent-state batching."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from world_model.gru import GRUConfig, GRUDynamics
from world_model.layers import EnsembleLinear, simnorm
from world_model.model import EpisodeInputs, LatentState, WorldModel, WorldModelConfig
from world_model.registry import (
    BUILTIN_DYNAMICS,
    build_dynamics,
    dynamics_names,
    get_dynamics,
    register_dynamics,
)
from world_model.training import (
    LossConfig,
    RunningScale,
    SequenceBatch,
    discount_for_episode_length,
    policy_loss,
    td_target,
    world_model_loss,
)
from world_model.twohot import soft_cross_entropy, symexp, symlog, two_hot, two_hot_inv

OBS, ACT = 3, 2


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """One torch thread, as the agent runs (TrainConfig.single_thread): with other processes on
    the 2 cores, 2 threads made these small networks ~15x slower. Not restored: raising the count
    again would call torch.set_num_threads(2), which this project never does (PyTorch #142815)."""
    torch.set_num_threads(1)


def small_model(dtype=torch.float32, **model_kw) -> WorldModel:
    torch.manual_seed(0)
    dyn = GRUDynamics(OBS, ACT, GRUConfig(latent_dim=16, encoder_dim=16, input_dim=16))
    cfg = WorldModelConfig(hidden_dim=16, hidden_layers=2, num_bins=21, **model_kw)
    return WorldModel(OBS, ACT, dyn, cfg).to(dtype)


def random_batch(horizon=3, batch=8, dtype=torch.float32, seed=0) -> SequenceBatch:
    g = torch.Generator().manual_seed(seed)
    return SequenceBatch(
        obs=torch.randn(horizon + 1, batch, OBS, generator=g, dtype=dtype),
        action=torch.rand(horizon, batch, ACT, generator=g, dtype=dtype) * 2 - 1,
        reward=-torch.rand(horizon, batch, 1, generator=g, dtype=dtype) * 5,
        terminated=torch.zeros(horizon, batch, 1, dtype=dtype),
        truncated=torch.zeros(horizon, batch, 1, dtype=dtype),
    )


# ----------------------------------------------------------------------- discrete regression


def test_symlog_symexp_are_inverse():
    x = torch.tensor([-1e4, -3.0, -1e-3, 0.0, 1e-3, 2.5, 1e4], dtype=torch.float64)
    torch.testing.assert_close(symexp(symlog(x)), x)
    torch.testing.assert_close(symlog(x), torch.sign(x) * torch.log(1 + x.abs()))


def test_two_hot_expectation_is_exact_and_inverse_recovers_the_value():
    bins = torch.linspace(-10, 10, 101, dtype=torch.float64)
    x = torch.tensor([-800.0, -16.27, -1.0, -0.3, 0.0, 0.01, 7.0, 5000.0], dtype=torch.float64)
    code = two_hot(x, bins)  # [8, 101]
    assert torch.all(code >= 0) and torch.all((code > 0).sum(-1) <= 2)
    torch.testing.assert_close(code.sum(-1), torch.ones(8, dtype=torch.float64))
    torch.testing.assert_close((code * bins).sum(-1), symlog(x))
    # logits = log(two-hot) decode back to x (the softmax of log p is p)
    torch.testing.assert_close(two_hot_inv(code.clamp_min(1e-300).log(), bins).squeeze(-1), x)
    # beyond the grid: clamped to its end
    far = two_hot(torch.tensor([1e9], dtype=torch.float64), bins)
    assert far[0, -1] == 1.0


def test_soft_cross_entropy_matches_torch_cross_entropy_with_probabilities():
    bins = torch.linspace(-10, 10, 21, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 21, generator=g, dtype=torch.float64)
    target = torch.randn(5, 1, generator=g, dtype=torch.float64) * 30
    ours = soft_cross_entropy(logits, target, bins)
    ref = F.cross_entropy(logits, two_hot(target.squeeze(-1), bins), reduction="none")
    torch.testing.assert_close(ours, ref)


def test_discount_heuristic():
    assert discount_for_episode_length(200) == pytest.approx(0.975)
    assert discount_for_episode_length(10) == 0.95
    assert discount_for_episode_length(10_000) == 0.995


# ----------------------------------------------------------------------- building blocks


def test_simnorm_is_a_groupwise_softmax_with_its_gradient():
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True) * 30
    ours = simnorm(x, 8)
    ref = F.softmax(x.view(4, 2, 8), dim=-1).view(4, 16)
    torch.testing.assert_close(ours, ref)
    w = torch.randn(4, 16, dtype=torch.float64)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), x)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), x)
    torch.testing.assert_close(g_ours, g_ref)


def test_ensemble_linear_is_independent_linear_maps():
    layer = EnsembleLinear(3, 5, 4).double()
    x = torch.randn(7, 5, dtype=torch.float64)
    out = layer(x)  # shared input
    xs = torch.randn(3, 7, 5, dtype=torch.float64)
    outs = layer(xs)  # one input per member
    for e in range(3):
        w, b = layer.weight[e], layer.bias[e, 0]
        torch.testing.assert_close(out[e], x @ w + b)
        torch.testing.assert_close(outs[e], xs[e] @ w + b)


# ----------------------------------------------------------------------- heads


def test_policy_log_density_matches_torch_distributions():
    model = small_model(torch.float64)
    state = model.encode(torch.randn(64, OBS, dtype=torch.float64))
    action, info = model.pi(state, generator=torch.Generator().manual_seed(0))
    assert action.abs().max() < 1
    mean_pre = torch.atanh(info["mean"])
    dist = TransformedDistribution(Normal(mean_pre, info["log_std"].exp()), [TanhTransform()])
    ref = dist.log_prob(action).sum(-1)
    # ours adds 1e-6 inside log(1 - a^2), TD-MPC2's guard; it only matters near |a| = 1
    torch.testing.assert_close(info["log_prob"], ref, rtol=1e-4, atol=1e-3)
    det, _ = model.pi(state, deterministic=True)
    torch.testing.assert_close(det, info["mean"])


def test_q_return_types_are_consistent():
    model = small_model()
    for p in model._q.parameters():  # non-zero outputs
        torch.nn.init.normal_(p, std=0.3)
    state = model.encode(torch.randn(10, OBS))
    a = torch.rand(10, ACT) * 2 - 1
    all_q = model.Q(state, a, "all")
    assert all_q.shape == (2, 10, 1)
    torch.testing.assert_close(model.Q(state, a, "min"), all_q.min(0).values)
    torch.testing.assert_close(model.Q(state, a, "avg"), all_q.mean(0))
    torch.testing.assert_close(
        model.Q(state, a, "all"), two_hot_inv(model.Q(state, a, "logits"), model.bins)
    )
    with pytest.raises(ValueError, match="return_type"):
        model.Q(state, a, "max")


def test_zero_initialised_heads_predict_zero():
    model = small_model()
    state = model.encode(torch.randn(4, OBS))
    a = torch.zeros(4, ACT)
    assert torch.allclose(model.reward(state, a), torch.zeros(4, 1), atol=1e-6)
    assert torch.allclose(model.Q(state, a, "avg", target=True), torch.zeros(4, 1), atol=1e-6)


# ----------------------------------------------------------------------- losses


def test_td_target_stops_at_terminated_and_bootstraps_through_truncated():
    model = small_model(torch.float64)
    for p in model._target_q.parameters():
        torch.nn.init.normal_(p, std=0.3)
    torch.manual_seed(1)
    state = model.encode(torch.randn(6, OBS, dtype=torch.float64))
    reward = torch.full((6, 1), -2.0, dtype=torch.float64)
    terminated = torch.tensor([[1.0], [0.0], [1.0], [0.0], [0.0], [1.0]], dtype=torch.float64)
    torch.manual_seed(7)
    y = td_target(model, state, reward, terminated, discount=0.9)
    torch.manual_seed(7)  # the same policy sample, by hand
    a, _ = model.pi(state)
    q = model.Q(state, a, "min", target=True)
    torch.testing.assert_close(y, torch.where(terminated > 0, reward, reward + 0.9 * q))
    assert (q.abs() > 1e-3).all()  # the bootstrap term is really there


def test_world_model_loss_routes_gradients_and_spares_the_targets():
    model = small_model()
    batch = random_batch()
    loss, metrics, states = world_model_loss(model, batch, 0.9, LossConfig(horizon=3))
    assert set(metrics) >= {"consistency", "reward", "value", "decode", "world_model"}
    assert states.batch_shape(2) == (4, 8)
    loss.backward()
    groups = model.model_parameter_groups()
    for name in ("encoder", "dynamics", "heads"):
        assert all(p.grad is not None for p in groups[name]), name
    assert all(p.grad is None for p in model._target_q.parameters())
    assert all(p.grad is None for p in model._target_dynamics.parameters())
    assert all(p.grad is None for p in model.policy_parameters())
    with pytest.raises(ValueError, match="horizon"):
        world_model_loss(model, batch, 0.9, LossConfig(horizon=2))


def test_loss_terms_weigh_steps_by_rho():
    """rho = 1 and one step of data reproduces the plain per-term means."""
    model = small_model(torch.float64)
    batch = random_batch(horizon=1, dtype=torch.float64)
    cfg = LossConfig(
        horizon=1, rho=1.0, consistency_coef=1, reward_coef=1, value_coef=1, decode_coef=1
    )
    torch.manual_seed(0)
    total, m, _ = world_model_loss(model, batch, 0.9, cfg)
    s0 = model.encode(batch.obs[0])
    s1 = model.next(s0, batch.action[0])
    target = model.encode(batch.obs[1], target=True)
    torch.testing.assert_close(m["consistency"], (s1.h - target.h).square().mean())
    r_logits = model.reward(s0, batch.action[0], return_logits=True)
    torch.testing.assert_close(
        m["reward"], soft_cross_entropy(r_logits, batch.reward[0], model.bins).mean()
    )
    dec = torch.cat([model.decode(s0), model.decode(s1)])
    torch.testing.assert_close(
        m["decode"], (dec - batch.obs.flatten(0, 1)).square().mean(-1).mean()
    )
    torch.testing.assert_close(total, m["consistency"] + m["reward"] + m["value"] + m["decode"])


def test_policy_loss_trains_only_the_policy():
    model = small_model()
    _, _, states = world_model_loss(model, random_batch(), 0.9, LossConfig())
    loss, metrics = policy_loss(model, states.detach(), RunningScale(), LossConfig())
    loss.backward()
    assert all(p.grad is not None for p in model.policy_parameters())
    assert all(p.grad is None for p in model._q.parameters())
    assert all(p.requires_grad for p in model._q.parameters())  # restored after frozen_q
    assert set(metrics) >= {"pi", "pi_entropy", "pi_scale"}


def test_running_scale_tracks_the_percentile_spread():
    scale = RunningScale(tau=0.5)
    x = torch.linspace(0, 100, 1001)
    scale.update(x)
    assert scale.value.item() == pytest.approx(90.0, rel=1e-4)
    scale.update(x * 0)  # spread 0: EMA halves it; dividing never blows up (floor 1)
    assert scale.value.item() == pytest.approx(45.0, rel=1e-4)
    torch.testing.assert_close(scale(torch.tensor([90.0])), torch.tensor([2.0]))


def test_update_targets_is_an_ema():
    model = small_model()
    before = [p.detach().clone() for p in model._target_q.parameters()]
    for p in model._q.parameters():
        p.data.add_(1.0)
    online = [p.detach().clone() for p in model._q.parameters()]
    model.update_targets(q_tau=0.25, encoder_tau=1.0)
    for b, o, t in zip(before, online, model._target_q.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * o)
    for o, t in zip(model.dynamics.parameters(), model._target_dynamics.parameters(), strict=True):
        torch.testing.assert_close(t, o)


# ----------------------------------------------------------------------- latent state


@dataclass
class ZPState(LatentState):
    z: Tensor
    p: Tensor


def test_features_are_computed_once_per_state_and_grad_mode():
    """WorldModel.features reads the dynamics once per state object and grad mode: reward and Q
    of one state share them, a copy of the state computes afresh, and features cached without
    grad are never handed to a computation that differentiates (the gradient still flows)."""
    model = small_model()
    with torch.no_grad():  # away from the zero-initialised heads, so gradients are not 0
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    calls = []
    original = model.dynamics.features

    def counting(state):
        calls.append(1)
        return original(state)

    model.dynamics.features = counting
    state = model.encode(torch.randn(5, OBS))
    a = torch.rand(5, ACT) * 2 - 1
    with torch.no_grad():
        model.reward(state, a)
        model.Q(state, a)
    assert len(calls) == 1
    q = model.Q(state, a, "avg")  # grad mode: computed again, with its graph
    model.reward(state, a)
    assert len(calls) == 2 and q.requires_grad
    (grad,) = torch.autograd.grad(q.sum(), state.h)
    assert grad.abs().sum() > 0
    model.Q(type(state)(state.h.clone()), a)  # another state object
    assert len(calls) == 3


def test_latent_state_batching_operations():
    s = ZPState(torch.arange(6.0).view(3, 2), -torch.arange(6.0).view(3, 2))
    assert s.batch_shape() == (3,)
    assert torch.equal(s[1].z, torch.tensor([2.0, 3.0]))
    assert torch.equal(s[torch.tensor([2, 0])].p, -torch.tensor([[4.0, 5.0], [0.0, 1.0]]))
    one = s[:1]
    assert one.expand(4).z.shape == (4, 2) and torch.equal(one.expand(4).z[3], s.z[0])
    rep = s.repeat(2)
    assert torch.equal(rep.z[:2], s.z[:1].expand(2, 2))
    stacked = ZPState.stack([s, s.map(lambda t: t + 10)])
    assert stacked.batch_shape(2) == (2, 3)
    flat = stacked.flatten()
    assert flat.z.shape == (6, 2)
    assert torch.equal(flat.unflatten((2, 3)).p, stacked.p)
    assert torch.equal(ZPState.cat([s, s]).z[3:], s.z)
    g = ZPState(torch.ones(2, 2, requires_grad=True) * 2, torch.zeros(2, 2))
    assert not g.detach().z.requires_grad


def test_carried_values_are_declared_fields_that_new_states_start_without():
    """feature_cache is a declared carried field: not a tensor of the state (tensors, stack,
    cat ignore it), and every state built from the tensors (map: detach, to, indexing, expand)
    starts without it."""
    s = ZPState(torch.ones(3, 2), torch.zeros(3, 2))
    assert len(s.tensors()) == 2 and s.feature_cache is None
    s.feature_cache = (True, torch.ones(3, 4))
    for copy in (s.detach(), s.to("cpu"), s[:2], s.expand(3), ZPState.stack([s, s]), s.repeat(2)):
        assert copy.feature_cache is None
    assert ZPState(s.z, s.p) == s  # equality reads the tensors' identity only, not the cache


# ----------------------------------------------------------------------- registry


def test_registry_lists_and_builds_the_gru():
    assert "gru" in dynamics_names()
    spec = get_dynamics("gru")
    assert spec.config_cls is GRUConfig and spec.dynamics_cls is GRUDynamics
    dyn = build_dynamics("gru", 3, 1, GRUConfig(latent_dim=8, simnorm_dim=4))
    assert dyn.feature_dim == 8
    with pytest.raises(ValueError, match="unknown world model 'nope'; available: .*gru"):
        get_dynamics("nope")
    with pytest.raises(TypeError, match="GRUConfig"):
        build_dynamics("gru", 3, 1, WorldModelConfig())


def test_builtin_dynamics_are_an_explicit_table_that_plugins_cannot_take():
    """The built-ins are listed without importing their modules, resolved from the table on
    first use, and a plug-in cannot register under a built-in's name."""
    assert {"gru", "geodesic"} <= set(dynamics_names())
    entry = BUILTIN_DYNAMICS["geodesic"]
    spec = get_dynamics("geodesic")
    assert spec.dynamics_cls.__name__ == entry.dynamics == "GeodesicDynamics"
    assert spec.config_cls.__name__ == entry.config and spec.description == entry.description
    with pytest.raises(ValueError, match="already registered by the built-in"):

        @register_dynamics("gru", GRUConfig)
        class Other(GRUDynamics):
            pass


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hidden_dim": 0}, "hidden_dim"),
        ({"activation": "relu6"}, "activation"),
        ({"num_bins": 1}, "num_bins"),
        ({"vmin": 3.0, "vmax": 1.0}, "vmin"),
        ({"q_dropout": 1.0}, "q_dropout"),
    ],
)
def test_invalid_world_model_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WorldModelConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"horizon": 0}, "horizon"), ({"rho": 0.0}, "rho"), ({"value_coef": -1.0}, "value_coef")],
)
def test_invalid_loss_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossConfig(**kwargs)


def test_context_inputs_reach_only_the_dynamics_that_ask_for_them():
    """WorldModel.context encodes the history observations and hands (history, history_mask)
    to a dynamics with history_length > 0, and value_fn to one with uses_value_gradient; a
    plain dynamics gets the state alone."""
    from world_model.gru import GRUConfig, GRUDynamics

    class Recording(GRUDynamics):
        history_length = 3
        uses_value_gradient = True

        def context(self, state, **inputs):
            self.inputs = inputs
            return "ctx"

    dyn = Recording(4, 2, GRUConfig(latent_dim=16, encoder_dim=16, input_dim=16))
    model = WorldModel(4, 2, dyn)
    state = model.encode(torch.randn(5, 4))
    hist = torch.randn(3, 5, 4)
    mask = torch.ones(3, 5, dtype=torch.bool)
    assert model.context(state, EpisodeInputs(hist, mask)) == "ctx"
    got = dyn.inputs
    assert got["history"].h.shape == (5, 3, 16)  # batch-major, oldest first
    torch.testing.assert_close(got["history"].h[:, 1], dyn.encode(hist[1]).h)
    assert got["history_mask"].shape == (5, 3)
    v = got["value_fn"](state)
    assert v.shape == (5, 1)
    plain = WorldModel(
        4, 2, GRUDynamics(4, 2, GRUConfig(latent_dim=16, encoder_dim=16, input_dim=16))
    )
    assert (
        plain.context(plain.encode(torch.randn(2, 4)), EpisodeInputs(hist[:, :2], mask[:, :2]))
        is None
    )
