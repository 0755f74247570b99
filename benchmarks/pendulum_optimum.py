"""Pendulum-v1's optimum by dynamic programming on the exact dynamics: the best achievable return
from each start of envs.pendulum_starts.start_grid and averaged over the task's random starts
(θ ~ U[−π, π], θ̇ ~ U[−1, 1]), printed beside a run's evaluation on the same starts.

    python -m benchmarks.pendulum_optimum                     # the optimum only
    python -m benchmarks.pendulum_optimum --run runs/<run>    # and the agent on the same starts

The solver (`finite_horizon_dp`) is backward induction over the 200 steps on a regular grid of
(θ, θ̇) with bilinear interpolation of the next state's value (θ periodic), minimising over a
fixed set of torques; tested against the Riccati solution of a linear-quadratic problem
(tests/benchmarks/test_pendulum_optimum.py). Its error is the grid's: the table prints the
optimum at two resolutions so the reader sees how far it has converged.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from envs.pendulum_starts import start_grid

# Pendulum-v1's constants (gymnasium/envs/classic_control/pendulum.py)
G, M, L, DT, MAX_SPEED, MAX_TORQUE, STEPS = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0, 200


@dataclass(frozen=True)
class Axis:
    """A regular grid axis of `size` points from `low`, spacing `step`; periodic axes wrap."""

    low: float
    step: float
    size: int
    periodic: bool = False

    @property
    def points(self) -> np.ndarray:
        return self.low + self.step * np.arange(self.size)


def _corners(axis: Axis, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower index [..], upper index [..] and the weight of the upper one [..] of each x."""
    u = (x - axis.low) / axis.step
    if axis.periodic:
        i = np.floor(u)
        w = u - i
        i = i.astype(np.int64) % axis.size
        return i, (i + 1) % axis.size, w
    u = np.clip(u, 0.0, axis.size - 1.0)
    i = np.minimum(np.floor(u).astype(np.int64), axis.size - 2)
    return i, i + 1, u - i


def interpolate(values: np.ndarray, axes: tuple[Axis, Axis], x: np.ndarray, y: np.ndarray):
    """Bilinear interpolation of values [nx, ny] on the grid at points (x, y) [..] (clamped at
    the edges of non-periodic axes)."""
    i0, i1, wx = _corners(axes[0], x)
    j0, j1, wy = _corners(axes[1], y)
    return (
        (1 - wx) * (1 - wy) * values[i0, j0]
        + wx * (1 - wy) * values[i1, j0]
        + (1 - wx) * wy * values[i0, j1]
        + wx * wy * values[i1, j1]
    )


def finite_horizon_dp(
    step: Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, np.ndarray]],
    cost: Callable[[np.ndarray, np.ndarray, float], np.ndarray],
    axes: tuple[Axis, Axis],
    actions: np.ndarray,
    horizon: int,
) -> np.ndarray:
    """V_0 [nx, ny]: the least total cost of `horizon` steps from every grid point, by
    V_t(s) = min_u cost(s, u) + V_{t+1}(step(s, u)), V_horizon = 0."""
    x, y = np.meshgrid(axes[0].points, axes[1].points, indexing="ij")  # [nx, ny] each
    value = np.zeros_like(x)
    for _ in range(horizon):
        best = np.full_like(x, np.inf)
        for u in actions:
            nx, ny = step(x, y, float(u))
            best = np.minimum(best, cost(x, y, float(u)) + interpolate(value, axes, nx, ny))
        value = best
    return value


def pendulum_step(theta: np.ndarray, theta_dot: np.ndarray, u: float):
    """gymnasium's Pendulum-v1 step (semi-implicit Euler, speed clipped)."""
    speed = theta_dot + (3 * G / (2 * L) * np.sin(theta) + 3.0 / (M * L**2) * u) * DT
    speed = np.clip(speed, -MAX_SPEED, MAX_SPEED)
    return theta + speed * DT, speed


def pendulum_cost(theta: np.ndarray, theta_dot: np.ndarray, u: float) -> np.ndarray:
    angle = (theta + np.pi) % (2 * np.pi) - np.pi
    return angle**2 + 0.1 * theta_dot**2 + 0.001 * u**2


def pendulum_optimum(angles: int, speeds: int, torques: int) -> tuple[np.ndarray, tuple]:
    """V_0 of Pendulum-v1 (as a cost) on an angles x speeds grid with `torques` levels."""
    axes = (
        Axis(-np.pi, 2 * np.pi / angles, angles, periodic=True),
        Axis(-MAX_SPEED, 2 * MAX_SPEED / (speeds - 1), speeds),
    )
    actions = np.linspace(-MAX_TORQUE, MAX_TORQUE, torques)
    return finite_horizon_dp(pendulum_step, pendulum_cost, axes, actions, STEPS), axes


def random_start_returns(value: np.ndarray, axes: tuple, samples: int, seed: int = 0):
    """Optimal returns [samples] from starts drawn as Pendulum-v1 draws them."""
    rng = np.random.default_rng(seed)
    theta, theta_dot = rng.uniform(-np.pi, np.pi, samples), rng.uniform(-1, 1, samples)
    return -interpolate(value, axes, theta, theta_dot)


def _agent_returns(run: str, starts: np.ndarray) -> np.ndarray:
    """The run's agent from each start, all episodes planned in one batch
    (agent/core/episodes.py)."""
    import gymnasium as gym

    from agent.core.episodes import run_episodes
    from agent.inspection.inspection import load_run
    from agent.persistence.runs import make_run_env
    from envs.pendulum_starts import FixedStarts
    from envs.scaling import scale_spaces

    agent, _ = load_run(run)
    seed = agent.config.train.eval_seed

    def make() -> gym.Env:
        env = make_run_env(agent.config, seed=None, scaled=False)
        return scale_spaces(FixedStarts(env, starts, first_seed=seed))

    envs = gym.vector.SyncVectorEnv([make for _ in starts])
    return run_episodes(agent.policy(seed), envs, len(starts), seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=None, help="a Pendulum-v1 run folder to evaluate")
    parser.add_argument("--angles", type=int, default=256)
    parser.add_argument("--speeds", type=int, default=257)
    parser.add_argument("--torques", type=int, default=41)
    args = parser.parse_args(argv)
    starts = start_grid()
    rows = {}
    for scale in (2, 1):  # half resolution, then the full one: the grid's convergence
        angles, speeds = args.angles // scale, (args.speeds - 1) // scale + 1
        t0 = time.perf_counter()
        value, axes = pendulum_optimum(angles, speeds, args.torques)
        grid = -interpolate(value, axes, starts[:, 0], starts[:, 1])
        rand = random_start_returns(value, axes, 100_000)
        rows[f"optimum {angles}x{speeds}"] = (grid, rand, time.perf_counter() - t0)
    columns = list(rows)
    if args.run:
        rows["agent"] = (_agent_returns(args.run, starts), None, 0.0)
        columns.append("agent")
    print("| start (θ, θ̇) | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for k, (theta, theta_dot) in enumerate(starts):
        cells = " | ".join(f"{rows[c][0][k]:.1f}" for c in columns)
        print(f"| ({theta:+.2f}, {theta_dot:+.0f}) | {cells} |")
    sem = lambda r: r.std(ddof=1) / np.sqrt(r.size)  # noqa: E731
    print("| grid mean ± s.e. | " + " | ".join(
        f"{rows[c][0].mean():.1f} ± {sem(rows[c][0]):.1f}" for c in columns) + " |")  # fmt: skip
    for name in columns[:2]:
        grid, rand, seconds = rows[name]
        print(f"\n{name} ({seconds:.0f} s): random starts (10^5 draws) mean {rand.mean():.1f}, "
              f"per-episode std {rand.std():.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
