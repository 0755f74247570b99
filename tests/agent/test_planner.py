"""agent.core.planner: the MPPI/CEM refit against direct computation, the planner on a model whose
optimum is known in closed form, warm start, policy-prior samples and determinism."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from agent.core.episode import EpisodeSoFar, episode_inputs
from agent.core.planner import (
    Planner,
    PlannerConfig,
    cem_update,
    estimate_value,
    mppi_update,
    plan_batch,
)
from world_model.model import LatentState


@dataclass
class PointState(LatentState):
    x: Tensor  # [B, A]


class QuadraticToy:
    """x' = x + a, r(x, a) = -|x + a - goal|^2, zero terminal value, a policy prior that always
    proposes `prior_action`. From x0 the best first action is goal - x0 (then 0): return 0."""

    def __init__(self, goal: Tensor, prior_action: float = 0.0):
        self.goal = goal
        self.prior_action = prior_action
        self.context_calls = 0

    def encode(self, obs: Tensor) -> PointState:
        return PointState(obs)

    def context(self, state, episode=None):
        self.context_calls += 1
        return "ctx"

    def root(self, state, context):
        return state

    def next(self, state, action, context=None, *, stochastic=False):
        assert context == "ctx" and not stochastic
        return PointState(state.x + action)

    def reward(self, state, action):
        return -(state.x + action - self.goal).square().sum(-1, keepdim=True)

    def pi(self, state, *, generator=None, deterministic=False, noise=None):
        return torch.full_like(state.x, self.prior_action), {}

    def Q(self, state, action, return_type="avg"):
        return torch.zeros(state.x.shape[0], 1)


def test_mppi_update_is_the_softmax_weighted_refit():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(16, generator=g, dtype=torch.float64)
    actions = torch.randn(3, 16, 2, generator=g, dtype=torch.float64)
    temperature = 0.7
    mean, std, w = mppi_update(values, actions, temperature)
    w_ref = torch.exp(values / temperature)
    w_ref = w_ref / w_ref.sum()
    mean_ref = torch.einsum("k,hka->ha", w_ref, actions)
    var_ref = torch.einsum("k,hka->ha", w_ref, (actions - mean_ref[:, None]) ** 2)
    torch.testing.assert_close(w, w_ref)
    torch.testing.assert_close(mean, mean_ref)
    torch.testing.assert_close(std, var_ref.sqrt())
    # temperature -> 0 picks the best elite, -> inf averages them equally
    mean_cold, _, _ = mppi_update(values, actions, 1e-6)
    torch.testing.assert_close(mean_cold, actions[:, values.argmax()])
    mean_hot, _, _ = mppi_update(values, actions, 1e9)
    torch.testing.assert_close(mean_hot, actions.mean(1))
    mean_cem, std_cem, _ = cem_update(values, actions)
    torch.testing.assert_close(mean_cem, actions.mean(1))
    torch.testing.assert_close(std_cem, actions.std(1, unbiased=False))


def test_estimate_value_matches_the_discounted_sum():
    toy = QuadraticToy(goal=torch.tensor([0.5]))
    x0 = PointState(torch.tensor([[0.1], [0.2]]))
    actions = torch.tensor([[[0.3], [-0.2]], [[0.1], [0.4]]])  # [H=2, N=2, A=1]
    v = estimate_value(toy, x0, actions, "ctx", discount=0.9)
    # by hand: x1 = x0 + a0, r0 = -(x1 - g)^2, r1 = -(x1 + a1 - g)^2
    expected = []
    for n in range(2):
        x1 = 0.1 * (n == 0) + 0.2 * (n == 1) + float(actions[0, n, 0])
        r0 = -((x1 - 0.5) ** 2)
        r1 = -((x1 + float(actions[1, n, 0]) - 0.5) ** 2)
        expected.append(r0 + 0.9 * r1)
    torch.testing.assert_close(v, torch.tensor(expected))


class FeedbackToy(QuadraticToy):
    """QuadraticToy whose policy prior depends on the state: pi(x) = 0.2 - 0.5 x."""

    def pi(self, state, *, generator=None, deterministic=False, noise=None):
        return 0.2 - 0.5 * state.x, {}


def test_policy_rows_draw_their_actions_along_their_own_rollout():
    """estimate_value(policy_rows=k): the first k sequences take a_t = pi(x_t) at their own
    states, written into `actions`; the other rows and the values are as for given actions."""
    toy = FeedbackToy(goal=torch.tensor([0.5]))
    x0 = PointState(torch.tensor([[0.1], [0.3], [-0.2], [0.0]]))
    actions = torch.full((3, 4, 1), 0.7)  # [H=3, N=4, A=1]; rows 0-1 get overwritten
    values = estimate_value(toy, x0, actions, "ctx", discount=0.9, policy_rows=2)
    for row, x in ((0, 0.1), (1, 0.3)):  # by hand: a = 0.2 - 0.5 x, x' = x + a
        for t in range(3):
            a = 0.2 - 0.5 * x
            assert float(actions[t, row, 0]) == pytest.approx(a)
            x = x + a
    assert (actions[:, 2:] == 0.7).all()
    torch.testing.assert_close(values, estimate_value(toy, x0, actions, "ctx", discount=0.9))


@pytest.mark.parametrize("method", ["mppi", "cem"])
def test_planner_finds_the_optimum_of_a_quadratic_cost(method):
    goal = torch.tensor([0.45, -0.3])
    x0 = torch.tensor([0.1, 0.2])
    toy = QuadraticToy(goal)
    cfg = PlannerConfig(
        method=method,
        horizon=3,
        iterations=8,
        num_samples=512,
        num_elites=32,
        num_pi_trajs=0,
        temperature=0.05,
    )
    planner = Planner(cfg, action_dim=2, discount=0.95)
    action = planner.plan(toy, x0, explore=False, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(action, goal - x0, atol=0.05, rtol=0)
    assert toy.context_calls == 1  # built once per plan() call
    # the refit mean of the later steps is ~0 (staying at the goal is optimal)
    assert planner._prev_mean[1:].abs().max() < 0.1


def test_planner_clamps_to_the_action_box():
    toy = QuadraticToy(goal=torch.tensor([3.0]))  # optimum a = 3 lies outside [-1, 1]
    planner = Planner(PlannerConfig(num_pi_trajs=0), action_dim=1, discount=0.9)
    action = planner.plan(
        toy, torch.zeros(1), explore=True, generator=torch.Generator().manual_seed(1)
    )
    assert -1.0 <= float(action) <= 1.0 and float(action) > 0.9


def test_policy_prior_samples_enter_the_plan():
    """With one refinement iteration and a sampling std far too wide to hit the optimum by
    chance, the prior's proposals (exactly the optimal action) become the elites."""
    goal, x0 = torch.tensor([0.3]), torch.tensor([0.0])
    cfg = PlannerConfig(
        horizon=1,
        iterations=1,
        num_samples=64,
        num_elites=4,
        num_pi_trajs=8,
        temperature=1e-3,
        min_std=2.0,
        max_std=2.0,
    )
    with_prior = Planner(cfg, action_dim=1, discount=0.9).plan(
        QuadraticToy(goal, prior_action=0.3),
        x0,
        explore=False,
        generator=torch.Generator().manual_seed(0),
    )
    assert abs(float(with_prior) - 0.3) < 1e-6


def test_warm_start_shifts_the_previous_plan_and_reset_clears_it():
    toy = QuadraticToy(goal=torch.tensor([0.2]))
    cfg = PlannerConfig(horizon=3, iterations=1, num_samples=64, num_elites=8, num_pi_trajs=0)
    planner = Planner(cfg, action_dim=1, discount=0.9)
    g = torch.Generator().manual_seed(0)
    planner._prev_mean = torch.tensor([[9.0], [0.7], [-0.4]])
    # with std pinned at ~0 the samples are the warm-start mean itself: [0.7, -0.4, 0]
    cfg.min_std = cfg.max_std = 1e-6
    planner.plan(toy, torch.zeros(1), explore=False, generator=g)
    torch.testing.assert_close(
        planner._prev_mean, torch.tensor([[0.7], [-0.4], [0.0]]), atol=1e-4, rtol=0
    )
    planner.reset()
    assert planner._prev_mean is None
    state = planner.state_dict()
    other = Planner(cfg, action_dim=1, discount=0.9)
    other.load_state_dict(state)
    assert other._prev_mean is None


def test_planning_is_deterministic_under_a_seed():
    toy = QuadraticToy(goal=torch.tensor([0.2, 0.1]))
    cfg = PlannerConfig(num_samples=64, num_elites=8, num_pi_trajs=4, iterations=3)

    def run(seed):
        planner = Planner(cfg, action_dim=2, discount=0.9)
        g = torch.Generator().manual_seed(seed)
        return torch.stack(
            [planner.plan(toy, torch.zeros(2), explore=True, generator=g) for _ in range(3)]
        )

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "random"}, "method"),
        ({"num_samples": 0}, "num_samples"),
        ({"num_elites": 600}, "num_elites"),
        ({"num_pi_trajs": 600}, "num_pi_trajs"),
        ({"temperature": 0.0}, "temperature"),
        ({"min_std": 3.0}, "min_std"),
        ({"horizon": 1.5}, "horizon"),
    ],
)
def test_invalid_planner_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PlannerConfig(**kwargs)


class HistoryToy(QuadraticToy):
    """A toy whose context reads the last 2 observations of the episode (history_length = 2)."""

    history_length = 2

    def __init__(self, goal: Tensor):
        super().__init__(goal)
        self.histories: list[tuple[Tensor, Tensor]] = []

    def context(self, state, episode=None):
        self.histories.append((episode.history_obs.clone(), episode.history_mask.clone()))
        return "ctx"


def act(planner, model, episode, obs, gen, capacity=0):
    """One step of acting as the agent does it: the episode's inputs at obs, a plan, and the
    action joining the episode (agent.core.agent.Agent.act_batch for one environment)."""
    obs = obs.reshape(1, -1)
    inputs = episode_inputs([episode], obs, model.history_length, capacity)
    action = planner.plan(model, obs, inputs, explore=False, generator=gen)
    episode.acted(obs[0], action)
    return action


def test_the_episode_so_far_hands_the_recent_observations_to_the_context():
    model = HistoryToy(torch.zeros(1))
    planner = Planner(PlannerConfig(num_samples=16, num_elites=4, iterations=1), 1, 0.9)
    episode, gen = EpisodeSoFar(), torch.Generator().manual_seed(0)
    for x in (1.0, 2.0, 3.0):
        act(planner, model, episode, torch.tensor([x]), gen)
    (h0, m0), (h1, m1), (h2, m2) = model.histories
    assert h0.shape == (2, 1, 1) and not m0.any()  # a new episode has no past
    assert m1[:, 0].tolist() == [False, True] and h1[1, 0, 0] == 1.0  # padded in front
    assert m2.all() and h2[:, 0, 0].tolist() == [1.0, 2.0]  # oldest first
    restored = EpisodeSoFar()
    restored.load_state_dict(episode.state_dict())  # the history survives a checkpoint
    act(planner, model, restored, torch.tensor([4.0]), gen)
    assert model.histories[-1][0][:, 0, 0].tolist() == [2.0, 3.0]
    episode.reset()  # a new episode forgets it
    act(planner, model, episode, torch.tensor([5.0]), gen)
    assert not model.histories[-1][1].any()
    assert set(planner.state_dict()) == {"prev_mean"}  # the planner keeps its warm start only


class NoisyPriorToy(QuadraticToy):
    """The quadratic toy with a stochastic policy prior a = tanh(x + 0.5 eps): its draws come
    from the planner's generator, or from the noise a batched planner hands it."""

    def pi(self, state, *, generator=None, deterministic=False, noise=None):
        if noise is None:
            noise = torch.randn(state.x.shape, generator=generator, dtype=state.x.dtype)
        return torch.tanh(state.x + 0.5 * noise), {}


@pytest.mark.parametrize("method", ["mppi", "cem"])
def test_plan_batch_plans_what_separate_plans_would(method):
    """plan_batch over E environments (each with its planner's warm start and its own
    generator) returns the actions, next warm starts and generator states of E plan() calls:
    every environment's draws come from its generator in one plan()'s order (samples, the
    prior's noise per step, terminal noise, elite choice, exploration)."""
    cfg = PlannerConfig(
        method=method, horizon=3, iterations=3, num_samples=48, num_elites=6, num_pi_trajs=5
    )
    toy = NoisyPriorToy(goal=torch.tensor([0.3, -0.2]))
    obs = torch.tensor([[0.1, 0.2], [-0.4, 0.0], [0.6, -0.5]])
    warm = [None, torch.tensor([[0.2, 0.1], [0.0, -0.3], [0.5, 0.5]]), None]

    def planners():
        out = [Planner(cfg, action_dim=2, discount=0.9) for _ in warm]
        for planner, mean in zip(out, warm, strict=True):
            planner._prev_mean = mean
        return out

    alone, together = planners(), planners()
    gens_alone = [torch.Generator().manual_seed(s) for s in (3, 4, 5)]
    gens_together = [torch.Generator().manual_seed(s) for s in (3, 4, 5)]
    want = torch.stack(
        [
            p.plan(toy, o, explore=True, generator=g)
            for p, o, g in zip(alone, obs, gens_alone, strict=True)
        ]
    )
    got = plan_batch(together, toy, obs, explore=True, generators=gens_together)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    for a, b, ga, gb in zip(alone, together, gens_alone, gens_together, strict=True):
        torch.testing.assert_close(b._prev_mean, a._prev_mean, rtol=0, atol=1e-6)
        assert torch.equal(ga.get_state(), gb.get_state())  # the same draws, the same count


@pytest.mark.parametrize("memory", ["none", "dense"])
def test_a_geodesic_plan_kicks_its_root_once_and_plans_as_before(memory, monkeypatch):
    """One plan of the geodesic model computes the rows' first kick once (the context writes
    into no state; model.root computes the position terms at the rows), so the first step of
    each iteration reuses them: per iteration only the H closing kicks are computed. Its
    actions are bit for bit those of the same plan with the first kick recomputed in every
    iteration (model.root the identity, the computation before): the same operations on the
    same rows, at the same batch (benchmarks.behaviour_check compares whole runs with an older
    commit)."""
    from world_model.geodesic import GeodesicConfig, GeodesicDynamics
    from world_model.geodesic.config import ContextConfig, GeodesicHeadOptions
    from world_model.model import WorldModel

    cfg = GeodesicConfig(
        latent_dim=4,
        encoder_dim=16,
        head=GeodesicHeadOptions(d_k=8, chirality=0.5),
        context=ContextConfig(
            prototypes=12, feature_dim=8, window=2, memory=memory, routing="dense"
        ),
    )
    torch.manual_seed(5)
    model = WorldModel(6, 2, GeodesicDynamics(6, 2, cfg))
    with torch.no_grad():
        for head in model.dynamics.integrator.heads():
            head.w_o.weight.normal_(generator=torch.Generator().manual_seed(3))
    plan_cfg = PlannerConfig(horizon=3, iterations=2, num_samples=32, num_elites=4, num_pi_trajs=4)
    observations = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))

    def episode(root_terms: bool) -> tuple[Tensor, list[list[int]]]:
        integ = model.dynamics.integrator
        original = type(integ).position_terms
        batches: list[int] = []

        def counting(self, z, context):
            batches.append(z.shape[0])
            return original(self, z, context)

        monkeypatch.setattr(type(integ), "position_terms", counting)
        if not root_terms:
            monkeypatch.setattr(model, "root", lambda state, context: state)
        planner, gen = Planner(plan_cfg, 2, 0.9), torch.Generator().manual_seed(7)
        episode = EpisodeSoFar()
        actions, calls = [], []
        for obs in observations:  # an episode: the window and the memory fill up
            batches.clear()
            inputs = episode_inputs(
                [episode], obs[None], model.history_length, model.memory_capacity
            )
            actions.append(planner.plan(model, obs, inputs, explore=True, generator=gen))
            episode.acted(obs, actions[-1])
            calls.append(list(batches))
        monkeypatch.undo()
        return torch.stack(actions), calls

    actions, calls = episode(root_terms=True)
    before, calls_before = episode(root_terms=False)
    h, i, n = plan_cfg.horizon, plan_cfg.iterations, plan_cfg.num_samples
    for t, plan_calls in enumerate(calls):
        # the memory's entries: its t transitions' kicks (memory 'dense', from the 2nd plan)
        memory_calls = [t] if memory == "dense" and t > 0 else []
        assert sorted(plan_calls) == sorted([*memory_calls, *[n] * (h * i + 1)])
        assert sorted(calls_before[t]) == sorted([*memory_calls, *[n] * ((h + 1) * i)])
    assert torch.equal(actions, before)
