"""benchmarks/value_fit.py's pure parts: the Monte Carlo return and the history windows it builds
for a whole episode at once, against a direct sum and against the planner's own window."""

import numpy as np
import torch

from agent.core.episode import EpisodeSoFar, episode_inputs
from benchmarks.value_fit import discounted_returns, history_windows


def test_discounted_returns_match_the_direct_sum():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=37)
    gamma = 0.9
    direct = [sum(gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(len(rewards))]
    np.testing.assert_allclose(discounted_returns(rewards, gamma), direct, rtol=1e-12)
    np.testing.assert_allclose(discounted_returns(np.ones(3), 0.5), [1.75, 1.5, 1.0])


def test_history_windows_are_the_acting_agents_window_at_every_root():
    obs = torch.randn(9, 3)  # one episode's observations o_0..o_8
    width, roots = 4, 7
    history, mask = history_windows(obs, roots, width)  # [W, roots, O], [W, roots]
    episode = EpisodeSoFar()
    for t in range(roots):  # the window the agent's context reads at root t, acting
        inputs = episode_inputs([episode], obs[t : t + 1], width, 0)  # [W, 1, O]
        torch.testing.assert_close(history[:, t], inputs.history_obs[:, 0])
        torch.testing.assert_close(mask[:, t], inputs.history_mask[:, 0])
