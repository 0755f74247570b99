"""How well each trained agent's world model values the states of real episodes: reward, Q and the
planner's own 3-step estimate against the Monte Carlo return, on the same trajectories.

    python -m benchmarks.value_fit gru=runs/Pendulum-v1__gru__2__<time> \
        geodesic=runs/Pendulum-v1__geodesic__2__<time>

Each named run (a folder of `agent.train`) plays `--episodes` deterministic evaluation episodes
(the run's evaluation seeds); then every run's model reads every set of trajectories. For each
state s_t of the first `--steps` steps of an episode (where the return's tail past the episode's
end is small) the table gives the mean absolute error, and the mean signed error (bias), of:

- r:  the reward head r(s_t, a_t) against the env's reward r_t;
- Q:  Q_avg(s_t, a_t) against the discounted return G_t = sum_k gamma^k r_{t+k} (to the end of
  the episode);
- V3: the planner's estimate of the executed actions (agent.core.planner.estimate_value's form with
  the recorded a_{t+3} in place of the policy's), sum_{k<3} gamma^k r(s_{t+k}, a_{t+k}) +
  gamma^3 Q_avg(s_{t+3}, a_{t+3}) along the model's own rollout, against G_t;

split into the swing-up phase (t < `--split`) and the rest. The context of a dynamics with a history
window is built from the episode's previous observations, as when planning. Written for
issue 5's question of where the geodesic agent's last few points at 5k steps go (the answer on
Pendulum seeds 1 and 2, in docs/measurements.md: not into these estimates).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from agent.core.agent import Agent
from agent.core.episodes import run_episodes
from agent.inspection.inspection import load_run
from world_model.model import EpisodeInputs

Trajectory = tuple[np.ndarray, np.ndarray, np.ndarray]  # obs [T+1, O], actions [T, A], rewards [T]


def discounted_returns(rewards: np.ndarray, discount: float) -> np.ndarray:
    """G_t = r_t + gamma G_{t+1}, G_T = 0: [T] -> [T]."""
    returns = np.zeros(len(rewards))
    acc = 0.0
    for t in reversed(range(len(rewards))):
        acc = rewards[t] + discount * acc
        returns[t] = acc
    return returns


def play(agent: Agent, episodes: int) -> list[Trajectory]:
    """The run's deterministic evaluation episodes (agent.core.episodes.run_episodes), recorded."""
    steps: list[list[tuple]] = [[] for _ in range(episodes)]
    seed = agent.config.train.eval_seed
    run_episodes(
        agent.policy(seed),
        agent.env,
        episodes,
        seed,
        on_step=lambda k, *transition: steps[k].append(transition),
    )
    trajectories = []
    for episode in steps:
        obs, actions, rewards, next_obs = zip(*episode, strict=True)
        trajectories.append(
            (
                np.asarray([obs[0], *next_obs], np.float32),
                np.asarray(actions, np.float32),
                np.asarray(rewards, np.float32),
            )
        )
    return trajectories


def history_windows(
    obs: torch.Tensor, starts: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """For roots 0..starts-1 of one episode obs [T+1, O]: the `width` observations before each
    root, oldest first, and their mask (False before the episode began): [W, starts, O] and
    [W, starts] (the layout agent.core.episode.episode_inputs builds for one root)."""
    history = obs.new_zeros(width, starts, obs.shape[-1])
    mask = torch.zeros(width, starts, dtype=torch.bool)
    roots = torch.arange(starts)
    for w in range(width):
        index = roots - width + w
        valid = index >= 0
        history[w, valid] = obs[index[valid]]
        mask[w] = valid
    return history, mask


@torch.no_grad()
def value_errors(agent: Agent, trajectories: list[Trajectory], steps: int, horizon: int = 3):
    """Signed errors {r, Q, V3} [episodes, steps] of `agent`'s model on the trajectories."""
    model, discount = agent.model, agent.discount
    model.eval()
    width = getattr(model, "history_length", 0)
    errors: dict[str, list[np.ndarray]] = {"r": [], "Q": [], "V3": []}
    for observations, actions, rewards in trajectories:
        roots = min(steps, len(actions) - horizon)
        obs = torch.as_tensor(observations)
        act = torch.as_tensor(actions)
        returns = discounted_returns(rewards, discount)[:roots]
        state = model.encode(obs[:roots])  # [roots]
        episode = EpisodeInputs(*history_windows(obs, roots, width)) if width > 0 else None
        context = model.context(state, episode)
        reward = model.reward(state, act[:roots]).squeeze(-1).numpy()
        q = model.Q(state, act[:roots], return_type="avg").squeeze(-1).numpy()
        value, scale = torch.zeros(roots), 1.0
        for k in range(horizon):
            value += scale * model.reward(state, act[k : k + roots]).squeeze(-1)
            state = model.next(state, act[k : k + roots], context, stochastic=False)
            scale *= discount
        terminal = act[horizon : horizon + roots]
        value += scale * model.Q(state, terminal, return_type="avg").squeeze(-1)
        errors["r"].append(reward - rewards[:roots])
        errors["Q"].append(q - returns)
        errors["V3"].append(value.numpy() - returns)
    return {name: np.stack(e) for name, e in errors.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100, help="roots per episode (from t = 0)")
    parser.add_argument("--split", type=int, default=50, help="end of the swing-up phase")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = {}
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep:
            parser.error(f"expected NAME=RUN_DIR, got {spec!r}")
        runs[name] = load_run(path, "cpu")[0]
    for source, agent in runs.items():
        trajectories = play(agent, args.episodes)
        mean_return = np.mean([t[2].sum() for t in trajectories])
        print(f"\nepisodes of {source} (mean return {mean_return:.1f}), errors against the env")
        print("\n| model | steps | abs r | abs Q | Q bias | abs V3 | V3 bias |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for name, reader in runs.items():
            errors = value_errors(reader, trajectories, args.steps)
            for phase, cut in (
                (f"t < {args.split}", slice(0, args.split)),
                (f"{args.split} <= t < {args.steps}", slice(args.split, args.steps)),
            ):
                e = {k: v[:, cut] for k, v in errors.items()}
                row = [f"{np.abs(e['r']).mean():.3f}", f"{np.abs(e['Q']).mean():.2f}"]
                row += [f"{e['Q'].mean():+.2f}", f"{np.abs(e['V3']).mean():.2f}"]
                row += [f"{e['V3'].mean():+.2f}"]
                print(f"| {name} | {phase} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
