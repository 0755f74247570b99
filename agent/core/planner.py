"""MPPI (and CEM) planning over a world model's latent rollouts, on batched tensors.

One `plan()` call (TD-MPC2's planner, Hansen et al. 2024, written out):

1. encode the observation, build the dynamics' context once and what every iteration's first
   step would compute at the rows (`WorldModel.root`: the geodesic model's first kick);
2. start from the previous plan shifted by one step (warm start) and `max_std`;
3. repeat `iterations` times: sample `num_samples - num_pi_trajs` action sequences around the
   mean, add `num_pi_trajs` policy-prior sequences (drawn from the prior along the first
   iteration's rollout, then kept), score every sequence by its return estimate
   sum_t gamma^t r_t + gamma^H Q(s_H, pi(s_H)) (the terminal value), keep the `num_elites`
   best and refit mean and std (`mppi_update`: weights softmax((V - max V) / temperature);
   `cem_update`: equal weights);
4. act with the first action of one elite, drawn by its weight; during training add
   exploration noise of the final std.

`plan_batch` plans for E environments at once (one rollout batch of E x num_samples rows,
each environment with its own planner state and its own `torch.Generator`): every random
number an environment's plan uses is drawn from its generator in the order one `plan()` call
draws it, so a batch plans what E separate calls would (up to the rounding of batched
arithmetic). Planning is deterministic under a seed. The model's dynamics run with
stochastic=False (mean step).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from agent.core.guard import NonFiniteError, check_actions
from world_model.model import EpisodeInputs, LatentState, WorldModel
from world_model.options import check_choices

__all__ = [
    "PlannerConfig",
    "mppi_update",
    "cem_update",
    "estimate_value",
    "Planner",
    "plan_batch",
]


@dataclass
class PlannerConfig:
    """Sampling-based planner. Defaults: TD-MPC2's horizon, elite fraction and std bounds, with
    256 samples and 4 iterations instead of 512 and 6, so that the GRU agent plans at >= 30 Hz on
    one CPU core (docs/measurements.md, "Numbers behind config defaults")."""

    method: Literal["mppi", "cem"] = "mppi"
    """mppi (softmax-weighted elites) or cem (equally weighted elites)"""
    horizon: int = 3
    """planning horizon in env steps (the terminal value covers the rest)"""
    iterations: int = 4
    """refinement iterations per env step"""
    num_samples: int = 256
    """action sequences scored per iteration (policy-prior ones included)"""
    num_elites: int = 32
    """best sequences the mean and std are refit to"""
    num_pi_trajs: int = 12
    """sequences drawn from the policy prior (0 disables the prior in planning)"""
    temperature: float = 2.0
    """MPPI weights softmax((V - max V) / temperature); TD-MPC2's 'temperature' 0.5 is its
    inverse, 1/0.5 = 2"""
    min_std: float = 0.05
    """floor of the sampling standard deviation"""
    max_std: float = 2.0
    """initial (and largest) sampling standard deviation"""

    def __post_init__(self):
        check_choices(self, "PlannerConfig")
        for name in ("horizon", "iterations", "num_samples", "num_elites"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"PlannerConfig.{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.num_pi_trajs, int) and self.num_pi_trajs >= 0):
            raise ValueError(f"PlannerConfig.num_pi_trajs must be >= 0, got {self.num_pi_trajs!r}")
        if self.num_elites > self.num_samples:
            raise ValueError(
                f"PlannerConfig.num_elites ({self.num_elites}) must not exceed num_samples "
                f"({self.num_samples})"
            )
        if self.num_pi_trajs > self.num_samples:
            raise ValueError(
                f"PlannerConfig.num_pi_trajs ({self.num_pi_trajs}) must not exceed num_samples "
                f"({self.num_samples})"
            )
        if not self.temperature > 0:
            raise ValueError(f"PlannerConfig.temperature must be > 0, got {self.temperature}")
        if not 0 < self.min_std <= self.max_std:
            raise ValueError(
                f"PlannerConfig needs 0 < min_std <= max_std, got {self.min_std}, {self.max_std}"
            )


def mppi_update(
    values: Tensor, actions: Tensor, temperature: float
) -> tuple[Tensor, Tensor, Tensor]:
    """The temperature-weighted refit of the sampling distribution to the elites.

    values [..., K], actions [H, ..., K, A] (leading dims: environments planned together) ->
        weights w_k = exp((V_k - max V) / temperature) / sum_j exp((V_j - max V) / temperature)
        mean [H, ..., A] = sum_k w_k a_k,  std = sqrt(sum_k w_k (a_k - mean)^2),  w [..., K]
    """
    weights = torch.softmax((values - values.amax(-1, keepdim=True)) / temperature, dim=-1)
    w = weights.unsqueeze(-1)  # [..., K, 1]
    mean = (w * actions).sum(-2)  # [H, ..., A]
    std = (w * (actions - mean.unsqueeze(-2)).square()).sum(-2).sqrt()
    return mean, std, weights


def cem_update(values: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """CEM refit: equal weights over the elites. values [..., K], actions [H, ..., K, A]."""
    weights = torch.full_like(values, 1.0 / values.shape[-1])  # [..., K]
    mean = actions.mean(-2)  # [H, ..., A]
    std = actions.std(-2, unbiased=False)
    return mean, std, weights


def estimate_value(
    model: WorldModel,
    state: LatentState,
    actions: Tensor,
    context,
    discount: float,
    generator: torch.Generator | None = None,
    policy_rows: int | Tensor = 0,
    prior_noise: Tensor | None = None,
    terminal_noise: Tensor | None = None,
) -> Tensor:
    """Return estimate of action sequences: state [N], actions [H, N, A] ->
    V [N] = sum_t gamma^t r(s_t, a_t) + gamma^H Q_avg(s_H, a_H ~ pi(s_H)).

    The policy prior's sequences (`policy_rows`: the first k rows, or an index [P] of rows) draw
    their actions a_t ~ pi(s_t) at their own states during this rollout and write them into
    `actions` (one rollout instead of a separate policy rollout before it: a step costs nearly
    as much at batch 12 as at 256 when the time is per-op overhead). The prior's noise is
    `prior_noise` [H, P, A] and the terminal action's `terminal_noise` [N, A] when given (drawn
    by the caller), else drawn from `generator`."""
    rows = torch.arange(policy_rows) if isinstance(policy_rows, int) else policy_rows
    value = actions.new_zeros(actions.shape[1], 1)  # [N, 1]
    scale = 1.0
    for t in range(actions.shape[0]):
        if rows.numel():
            prior_states = state.map(lambda x: x[rows])
            noise = None if prior_noise is None else prior_noise[t]
            actions[t, rows], _ = model.pi(prior_states, generator=generator, noise=noise)
        value = value + scale * model.reward(state, actions[t])  # [N, 1]
        state = model.next(state, actions[t], context, stochastic=False)
        scale *= discount
    terminal_action, _ = model.pi(state, generator=generator, noise=terminal_noise)  # [N, A]
    value = value + scale * model.Q(state, terminal_action, return_type="avg")
    return value.squeeze(-1)  # [N]


class Planner:
    """Sampling-based planner with a warm start carried between calls of one episode.

    `reset()` at every episode start; `plan()` returns the action [A] to take now; several
    planners (one per environment) plan together with `plan_batch`. What the model's context
    reads of the episode is not the planner's: agent.core.episode.EpisodeSoFar keeps it.
    """

    def __init__(self, config: PlannerConfig, action_dim: int, discount: float):
        self.config = config
        self.action_dim = action_dim
        self.discount = discount
        self._prev_mean: Tensor | None = None  # [H, A], the last plan
        self.last_info: dict[str, float] = {}

    def reset(self) -> None:
        self._prev_mean = None

    def state_dict(self) -> dict:
        return {"prev_mean": None if self._prev_mean is None else self._prev_mean.cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        prev = state.get("prev_mean")
        self._prev_mean = None if prev is None else prev.clone()

    def plan(
        self,
        model: WorldModel,
        obs: Tensor,
        episode: EpisodeInputs | None = None,
        *,
        explore: bool,
        generator: torch.Generator,
    ) -> Tensor:
        """obs [O] or [1, O] -> action [A] in [-1, 1]; `episode`: what the model's context
        reads of the episode before obs (batch 1; agent.core.episode.episode_inputs)."""
        return plan_batch(
            [self], model, obs.reshape(1, -1), episode, explore=explore, generators=[generator]
        )[0]


def _rows_inputs(episode: EpisodeInputs | None, n: int) -> EpisodeInputs | None:
    """E environments' episode inputs for their E x n rollout rows (environment-major)."""
    if episode is None:
        return None
    history, mask, memory = episode.history_obs, episode.history_mask, episode.memory
    return EpisodeInputs(
        None if history is None else history.repeat_interleave(n, 1),
        None if mask is None else mask.repeat_interleave(n, 1),
        None
        if memory is None
        else dataclasses.replace(
            memory,
            index=memory.index.repeat_interleave(n, 1),
            mask=memory.mask.repeat_interleave(n, 1),
        ),
    )


def _randn(generator: torch.Generator, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A standard normal draw of `shape` from `generator`, on `like`'s device and dtype."""
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)


@torch.no_grad()  # not inference_mode: a dynamics may differentiate inside (enable_grad)
def plan_batch(
    planners: Sequence[Planner],
    model: WorldModel,
    obs: Tensor,
    episode: EpisodeInputs | None = None,
    *,
    explore: bool,
    generators: Sequence[torch.Generator],
) -> Tensor:
    """One planning step for E environments at once: obs [E, O] -> actions [E, A] in [-1, 1].
    `episode`: what the model's context reads of each environment's episode before obs (E
    columns; agent.core.episode.episode_inputs). Environment i uses planners[i]'s warm start and
    draws every random number from generators[i] (in the order of a single plan(): per
    iteration the samples, then in the first iteration the prior's noise per step, then the
    terminal actions' noise; then the elite choice and the exploration noise)."""
    cfg = planners[0].config
    horizon, n, n_pi = cfg.horizon, cfg.num_samples, cfg.num_pi_trajs
    a_dim, discount = planners[0].action_dim, planners[0].discount
    n_env = len(planners)
    obs = obs.reshape(n_env, -1)
    device, dtype = obs.device, obs.dtype
    root = model.encode(obs)  # [E]
    # One environment: the context is built from its root (batch 1, broadcast over its samples,
    # as training builds it per batch row); several: for the rows themselves, so that every row
    # reads its own environment's context. What the first step computes at the rows (the
    # geodesic model's kick) is computed once per plan (model.root), not once per iteration.
    single = n_env == 1
    starts = root if single else root.map(lambda x: x.repeat_interleave(n, 0))
    context = model.context(starts, _rows_inputs(episode, 1 if single else n))
    rows = starts.expand(n) if single else starts  # [E * N]
    rows = model.root(rows, context)

    actions = torch.empty(horizon, n_env, n, a_dim, device=device, dtype=dtype)  # [H, E, N, A]
    flat = actions.view(horizon, n_env * n, a_dim)  # the rollout's rows, environment-major
    mean = torch.zeros(horizon, n_env, a_dim, device=device, dtype=dtype)  # [H, E, A]
    for i, planner in enumerate(planners):  # warm start: the previous plan, shifted by one step
        if planner._prev_mean is not None:
            mean[:-1, i] = planner._prev_mean[1:].to(device=device, dtype=dtype)
    std = torch.full_like(mean, cfg.max_std)
    arange = functools.partial(torch.arange, device=device)
    prior_rows = (arange(n_env)[:, None] * n + arange(n_pi)).flatten()  # [E * P]
    for iteration in range(cfg.iterations):
        noise, prior_noise, terminal_noise = [], [], []
        for g in generators:  # one plan()'s draws, environment by environment
            noise.append(_randn(g, (horizon, n - n_pi, a_dim), mean))
            if iteration == 0 and n_pi:  # [H, P, A], one step after the other
                prior_noise.append(
                    torch.stack([_randn(g, (n_pi, a_dim), mean) for _ in range(horizon)])
                )
            terminal_noise.append(_randn(g, (n, a_dim), mean))
        noise = torch.stack(noise, dim=1)  # [H, E, N - P, A]
        actions[:, :, n_pi:] = (mean[:, :, None] + std[:, :, None] * noise).clamp(-1, 1)
        # the policy-prior sequences are drawn along the first iteration's rollout, then kept
        first = iteration == 0 and n_pi > 0
        values = estimate_value(
            model,
            rows,
            flat,
            context,
            discount,
            policy_rows=prior_rows if first else 0,
            prior_noise=torch.cat(prior_noise, dim=1) if first else None,  # [H, E * P, A]
            terminal_noise=torch.cat(terminal_noise),  # [E * N, A]
        )
        values = torch.nan_to_num(values.view(n_env, n), nan=-torch.inf)  # [E, N]
        elite_values, elite_idx = torch.topk(values, cfg.num_elites, dim=-1)  # [E, K]
        index = elite_idx[None, :, :, None].expand(horizon, -1, -1, a_dim)
        elite_actions = actions.gather(2, index)  # [H, E, K, A]
        if cfg.method == "mppi":
            mean, std, weights = mppi_update(elite_values, elite_actions, cfg.temperature)
        else:
            mean, std, weights = cem_update(elite_values, elite_actions)
        std = std.clamp(cfg.min_std, cfg.max_std)

    if not bool(torch.isfinite(weights).all()):  # every sampled trajectory's value was NaN
        raise NonFiniteError(
            "plan: no sampled trajectory has a finite value (the world model's NaN)"
        )
    chosen = torch.empty(n_env, a_dim, device=device, dtype=dtype)
    for i, (planner, g) in enumerate(zip(planners, generators, strict=True)):
        choice = torch.multinomial(weights[i], 1, generator=g)  # [1]
        action = elite_actions[0, i, choice[0]]  # [A]
        if explore:
            action = action + std[0, i] * _randn(g, (a_dim,), action)
        chosen[i] = action.clamp(-1, 1)
        planner._prev_mean = mean[:, i]
        planner.last_info = {
            "elite_value": float(elite_values[i].mean()),
            "std": float(std[0, i].mean()),
        }
    check_actions(chosen, "plan")  # a NaN passes the clamp
    return chosen  # each row clamped to [-1, 1] above
