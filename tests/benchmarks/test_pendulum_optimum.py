"""The dynamic-programming solver of benchmarks/pendulum_optimum.py against the closed form of
a linear-quadratic problem (the Riccati recursion), its Pendulum dynamics against gymnasium's,
and the FixedStarts wrapper that puts Pendulum-v1 at a given start."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from benchmarks.pendulum_optimum import (
    Axis,
    finite_horizon_dp,
    interpolate,
    pendulum_cost,
    pendulum_step,
)
from envs.pendulum_starts import FixedStarts, start_grid


def test_dp_matches_the_riccati_solution_of_a_double_integrator():
    dt, q, r, rho, horizon = 0.1, 1.0, 0.5, 0.2, 10
    a = np.array([[1.0, dt], [0.0, 1.0]])
    b = np.array([[0.0], [dt]])
    p = np.zeros((2, 2))
    for _ in range(horizon):  # P_t = Q + A'PA - A'PB (R + B'PB)^-1 B'PA
        gain = np.linalg.solve(rho + b.T @ p @ b, b.T @ p @ a)
        p = np.diag([q, r]) + a.T @ p @ a - a.T @ p @ b @ gain
    axes = (Axis(-3.0, 6.0 / 120, 121), Axis(-3.0, 6.0 / 120, 121))
    value = finite_horizon_dp(
        step=lambda x, v, u: (x + v * dt, v + u * dt),
        cost=lambda x, v, u: q * x**2 + r * v**2 + rho * u**2,
        axes=axes,
        actions=np.linspace(-6.0, 6.0, 241),
        horizon=horizon,
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, size=(200, 2))  # well inside the grid: no edge effects
    exact = np.einsum("ni,ij,nj->n", x, p, x)
    approx = interpolate(value, axes, x[:, 0], x[:, 1])
    # bilinear interpolation of a function with Hessian H errs by <= h^2/8 (|H_xx| + |H_vv|)
    # (H = 2P here), at most once per backward step; the torque grid's error is second order
    h = axes[0].step
    bound = horizon * h**2 / 8 * 2 * (p[0, 0] + p[1, 1])  # 0.05 with these settings
    assert np.all(approx >= exact - bound)
    assert np.max(np.abs(approx - exact)) <= bound
    far = np.linalg.norm(x, axis=1) > 0.5  # where the value is large against the bound
    np.testing.assert_allclose(approx[far], exact[far], rtol=0.1)


def test_pendulum_step_and_cost_are_gymnasiums():
    env = gym.make("Pendulum-v1").unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(50):
        state = np.array([rng.uniform(-np.pi, np.pi), rng.uniform(-8, 8)])
        u = rng.uniform(-2, 2)
        env.state = state.copy()
        _, reward, *_ = env.step(np.array([u], dtype=np.float32))
        theta, speed = pendulum_step(state[0], state[1], float(np.float32(u)))
        np.testing.assert_allclose(env.state, [theta, speed], rtol=1e-6, atol=1e-6)
        cost = pendulum_cost(state[0], state[1], float(np.float32(u)))
        assert -reward == pytest.approx(cost, rel=1e-6)


def test_fixed_starts_put_pendulum_at_each_grid_start():
    starts = start_grid()
    assert starts.shape == (24, 2) and starts[0, 0] == pytest.approx(-np.pi)
    env = FixedStarts(gym.make("Pendulum-v1"), starts, first_seed=100)
    for k in (0, 5, 23, 24):
        obs, _ = env.reset(seed=100 + k)
        theta, speed = starts[k % 24]
        np.testing.assert_allclose(obs, [np.cos(theta), np.sin(theta), speed], atol=1e-6)
    obs, _ = env.reset()  # no seed: the next start in turn
    np.testing.assert_allclose(obs[2], starts[1, 1], atol=1e-6)
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        FixedStarts(gym.make("Pendulum-v1"), np.zeros(3))


def test_the_script_prints_an_agent_beside_the_optimum_on_the_same_starts(tmp_path, capsys):
    import json

    from agent import train as train_cli
    from benchmarks import pendulum_optimum
    from tests.agent.conftest import call_main, tiny

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny(train={"max_episode_steps": None})))
    argv = ["--steps", "70", "--config", str(config), "--logdir", str(tmp_path / "runs")]
    assert call_main(train_cli.main, argv, capsys)[0] == 0
    (run,) = (tmp_path / "runs").iterdir()
    grid = ["--angles", "16", "--speeds", "17", "--torques", "5"]
    assert pendulum_optimum.main([*grid, "--run", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], [line for line in lines if line.startswith("| (")]
    assert header.endswith("| agent |") and len(rows) == 24
    for row in rows:
        *optima, agent = (float(c) for c in row.strip("|").split("|")[1:])
        assert agent <= max(optima) + 1.0  # nothing beats the optimum (up to the grid's error)
