"""A saved agent scored four ways on the same episodes: its own evaluation, its SB3 `predict` on
`gym.make(id)` and on `envs.make_env(id)`, and stable-baselines3's `evaluate_policy` on a plain
gymnasium env.

    python -m benchmarks.sb3_evaluate runs/Pendulum-v1__gru__11__<time> [--episodes 10]

Episode k is reset with seed eval_seed + k and planned with a generator seeded the same way in
every column, so the columns agree episode for episode when `predict` speaks the env's own units
(the agent's own evaluation steps the scaled view, envs.scaling.scale_spaces); SB3 sums rewards
in float32. Prints one row per episode, the means with standard errors and the largest
difference from the agent's own return.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv

from agent.core.episodes import run_episodes
from agent.inspection.inspection import load_run
from agent.persistence.runs import make_run_env
from envs import make_env


def by_predict(agent, env: gym.Env, seed: int) -> float:
    agent.generator.manual_seed(seed)
    obs, _ = env.reset(seed=seed)
    total, start, done = 0.0, True, False
    while not done:
        action, _ = agent.predict(obs, episode_start=np.array([start]), deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, start, done = total + float(reward), False, terminated or truncated
    return total


def by_evaluate_policy(agent, env_id: str, limit: int | None, seed: int) -> float:
    vec = DummyVecEnv([lambda: gym.make(env_id, max_episode_steps=limit)])
    vec.seed(seed)
    agent.generator.manual_seed(seed)
    (ret,), _ = evaluate_policy(
        agent, vec, n_eval_episodes=1, deterministic=True, return_episode_rewards=True, warn=False
    )
    return float(ret)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run folder of agent.train")
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()
    agent, _ = load_run(args.run, "cpu")
    tc = agent.config.train
    env_id, limit = tc.env_id, tc.max_episode_steps
    rows = []
    for k in range(args.episodes):
        seed = tc.eval_seed + k
        (own,) = run_episodes(agent.policy(seed), make_run_env(agent.config, None), 1, seed)
        plain = by_predict(agent, gym.make(env_id, max_episode_steps=limit), seed)
        ours = by_predict(agent, make_env(env_id, max_episode_steps=limit), seed)
        rows.append((seed, own, plain, ours, by_evaluate_policy(agent, env_id, limit, seed)))
    cols = ("own evaluation", "predict on gym.make", "predict on make_env", "evaluate_policy")
    print(f"{args.run}: {env_id}, step {agent.num_timesteps}\n")
    print("| seed | " + " | ".join(cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    for seed, *values in rows:
        print(f"| {seed} | " + " | ".join(f"{v:.2f}" for v in values) + " |")
    table = np.asarray([r[1:] for r in rows])
    se = table.std(0, ddof=1) / np.sqrt(len(rows)) if len(rows) > 1 else np.zeros(4)
    means = " | ".join(f"**{m:.1f}** ± {s:.1f}" for m, s in zip(table.mean(0), se, strict=True))
    print(f"| mean ± s.e. | {means} |")
    worst = np.abs(table - table[:, :1]).max()
    print(f"\nlargest |difference| from the own evaluation: {worst:.2e}")


if __name__ == "__main__":
    main()
