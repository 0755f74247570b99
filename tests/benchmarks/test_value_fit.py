"""benchmarks/value_fit.py's pure parts: the Monte Carlo return and the history windows it builds
for a whole episode at once, against a direct sum and against the planner's own window."""

import numpy as np
import torch

from agent.planner import Planner, PlannerConfig
from benchmarks.value_fit import discounted_returns, history_windows


def test_discounted_returns_match_the_direct_sum():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=37)
    gamma = 0.9
    direct = [sum(gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(len(rewards))]
    np.testing.assert_allclose(discounted_returns(rewards, gamma), direct, rtol=1e-12)
    np.testing.assert_allclose(discounted_returns(np.ones(3), 0.5), [1.75, 1.5, 1.0])


def test_history_windows_are_the_planners_window_at_every_root():
    obs = torch.randn(9, 3)  # one episode's observations o_0..o_8
    width, roots = 4, 7
    history, mask = history_windows(obs, roots, width)  # [W, roots, O], [W, roots]
    planner = Planner(PlannerConfig(), action_dim=1, discount=0.99)
    for t in range(roots):
        planner._history = [obs[i] for i in range(t)]  # what plan() has seen before root t
        expected, expected_mask = planner._history_inputs(width, obs[t : t + 1])  # [W, 1, O]
        torch.testing.assert_close(history[:, t], expected[:, 0])
        torch.testing.assert_close(mask[:, t], expected_mask[:, 0])
