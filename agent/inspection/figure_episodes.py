"""The replay buffer's last episodes, the states the diagnose figures draw
(agent/inspection/figures_data.py; world_model/geodesic/head_pass.py passes the geodesic heads
over them).

- `buffer_episodes`: the last few complete episodes, per env copy (buffer.streams);
- `episode_inputs`: an episode's observations and each step's history window, masked before
  the episode's start, as ReplayBuffer.sample hands them to the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from agent.core.buffer import ReplayBuffer

__all__ = ["EPISODES", "MAX_EPISODE_STEPS", "buffer_episodes", "episode_inputs"]

EPISODES = 3  # episodes drawn on the disk
MAX_EPISODE_STEPS = 250  # the first steps of each (a DMC episode is 500 decisions)


# --------------------------------------------------------------------------- episodes


def buffer_episodes(
    buffer: ReplayBuffer, count: int = EPISODES, max_steps: int = MAX_EPISODE_STEPS
) -> list[np.ndarray]:
    """The buffer slots [T] of its last `count` complete episodes (ending terminated or
    truncated), oldest first, each cut to its first `max_steps` steps; when no episode is
    complete yet, the open one. Copies of a vector env (buffer.streams K) are separate streams:
    copy k's steps are the slots = k (mod K)."""
    if buffer.size == 0:
        return []
    oldest = buffer.ptr if buffer.size == buffer.capacity else 0
    slots = (oldest + np.arange(buffer.size)) % buffer.capacity  # [size], time order
    done = ((buffer.terminated + buffer.truncated) > 0).squeeze(-1).numpy()  # [allocated]
    complete: list[tuple[int, np.ndarray]] = []  # (time of the episode's end, its slots)
    still_open: list[np.ndarray] = []
    wrapped = buffer.size == buffer.capacity  # the oldest episode may have lost its start
    for stream in range(buffer.streams):
        mine = np.flatnonzero(slots % buffer.streams == stream)  # logical positions, in order
        ends = np.flatnonzero(done[slots[mine]])
        begin = 0
        for n, end in enumerate(ends):
            if not (wrapped and n == 0):
                complete.append((int(mine[end]), slots[mine[begin : end + 1]]))
            begin = end + 1
        if begin < mine.size:
            still_open.append(slots[mine[begin:]])
    chosen = [s for _, s in sorted(complete, key=lambda c: c[0])[-count:]]
    if not chosen:
        chosen = still_open[:count]
    return [s[:max_steps] for s in chosen]


def episode_inputs(
    buffer: ReplayBuffer, slots: np.ndarray, window: int
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """An episode's observations and each step's history window, as ReplayBuffer.sample hands
    them to the model: (obs [T, O], history_obs [W, T, O] zero where masked, history_mask
    [W, T] True where the step exists in the episode); no history for W = 0."""
    obs = buffer.obs[torch.from_numpy(slots)]  # [T, O]
    if window == 0:
        return obs, None, None
    t = np.arange(slots.size)
    back = t[None, :] - np.arange(window, 0, -1)[:, None]  # [W, T] step index, oldest first
    valid = back >= 0
    hist = buffer.obs[torch.from_numpy(slots[np.where(valid, back, 0)])]  # [W, T, O]
    mask = torch.from_numpy(valid)
    return obs, hist * mask.unsqueeze(-1), mask
