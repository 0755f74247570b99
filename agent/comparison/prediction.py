"""World-model quality on the task itself: open-loop prediction error against horizon on held-out
episodes (the evaluation episodes, which training never sees).

From starts every `stride` steps of each episode, the model encodes the observation (with the
history window its context reads, as the planner builds it), rolls its latent state forward
open loop under the episode's recorded actions, and decodes every step. The error at horizon h is
the RMS over starts and observation coordinates of (decoded - true) / std, std the per-coordinate
standard deviation of the held-out observations: 1 is no better than predicting each coordinate's
mean, 0 is exact. A model with episodic memory rolls out without it here (the read needs the
episode's transitions before the start; not built).
"""

from __future__ import annotations

import numpy as np
import torch

from world_model.model import EpisodeInputs

__all__ = ["HORIZON", "EpisodeRecorder", "open_loop_error"]

HORIZON = 50
"""the longest horizon reported (issue: 1 ... 50 steps)"""


class EpisodeRecorder:
    """`on_step` for agent.core.episodes.run_episodes: keeps each episode's observations [T + 1, O]
    and actions [T, A] (in the agent's scaled view)."""

    def __init__(self):
        self._obs: dict[int, list[np.ndarray]] = {}
        self._actions: dict[int, list[np.ndarray]] = {}

    def __call__(self, k: int, obs, action, reward: float, next_obs) -> None:
        if k not in self._obs:
            self._obs[k], self._actions[k] = [np.asarray(obs, np.float32)], []
        self._obs[k].append(np.asarray(next_obs, np.float32))
        self._actions[k].append(np.asarray(action, np.float32))

    def episodes(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.stack(self._obs[k]), np.stack(self._actions[k])) for k in sorted(self._obs)]


@torch.no_grad()
def open_loop_error(
    model, episodes: list[tuple[np.ndarray, np.ndarray]], horizon: int = HORIZON, stride: int = 25
) -> list[float] | None:
    """Normalised RMS error [horizon] at 1..horizon steps (module docstring); None when no
    episode is longer than `horizon`. `model` is a world_model.model.WorldModel."""
    starts = [(e, t) for e, (_, acts) in enumerate(episodes)
              for t in range(0, len(acts) - horizon + 1, stride)]  # fmt: skip
    if not starts:
        return None
    device = next(model.parameters()).device
    all_obs = np.concatenate([obs for obs, _ in episodes])  # [N, O]
    std = torch.as_tensor(all_obs.std(axis=0) + 1e-6, device=device)  # [O]
    pick = lambda f: torch.as_tensor(np.stack([f(e, t) for e, t in starts]), device=device)  # noqa: E731
    obs0 = pick(lambda e, t: episodes[e][0][t])  # [B, O]
    acts = pick(lambda e, t: episodes[e][1][t : t + horizon])  # [B, H, A]
    true = pick(lambda e, t: episodes[e][0][t + 1 : t + horizon + 1])  # [B, H, O]
    w = getattr(model, "history_length", 0)
    history = mask = None
    if w > 0:  # the w observations before each start, padded in front and masked
        history = obs0.new_zeros(w, len(starts), obs0.shape[-1])
        mask = torch.zeros(w, len(starts), dtype=torch.bool, device=device)
        for b, (e, t) in enumerate(starts):
            past = episodes[e][0][max(0, t - w) : t]
            if len(past):
                history[w - len(past) :, b] = torch.as_tensor(past, device=device)
                mask[w - len(past) :, b] = True
    was_training = model.training
    model.eval()
    try:
        state = model.encode(obs0)
        ctx = model.context(state, EpisodeInputs(history, mask))
        errors = []
        for h in range(horizon):
            state = model.next(state, acts[:, h], ctx, stochastic=False)
            err = (model.decode(state) - true[:, h]) / std  # [B, O]
            errors.append(float(err.square().mean().sqrt()))
    finally:
        model.train(was_training)
    return errors
