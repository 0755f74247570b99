"""A warm GRU world model for memory_disk.py: a recurrent baseline whose hidden state has run
over the episode so far, the fair comparison for an episodic memory (a GRU started cold from one
observation cannot know this episode's landscape).

- Filter: a GRU reads the `window` transitions of the episode before the start, each as
  (o_t, a_t, o_{t+1} - o_t) normalised, plus a flag that is 0 on left padding (a start early in
  its episode has fewer); its last hidden state h summarises what the episode has shown.
- Predictor: s_0 = tanh(W [o_0, h]); s_{t+1} = GRUCell([a_t, o_t], s_t) and
  o_{t+1} = o_t + std * W_d s_{t+1}, autoregressive on its own predicted observations.
- Trained on the normalised squared error of the predicted observations over the horizon (as
  the geodesic models' decoded term), Adam with cosine decay; memory_disk.py picks the better of
  two learning rates on validation episodes.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

__all__ = ["WarmGRU", "train_warm_gru", "warm_gru_open_loop"]


class WarmGRU(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, width: int, std: torch.Tensor):
        super().__init__()
        self.register_buffer("std", std.clone())
        self.filter = nn.GRU(2 * obs_dim + action_dim + 1, width, batch_first=True)
        self.start = nn.Linear(obs_dim + width, width)
        self.cell = nn.GRUCell(action_dim + obs_dim, width)
        self.head = nn.Linear(width, obs_dim)

    def summary(self, obs, acts, rows, starts, window: int) -> torch.Tensor:
        """h [B, width] from the `window` transitions of episode rows[b] before starts[b]."""
        k = starts[:, None] - window + torch.arange(window)  # [B, W] times, oldest first
        valid = (k >= 0).unsqueeze(-1).float()
        k = k.clamp_min(0)
        r = rows[:, None].expand(-1, window)
        o, o_next = obs[r, k] / self.std, obs[r, k + 1] / self.std
        x = torch.cat([o, acts[r, k], o_next - o, torch.ones_like(valid)], -1) * valid
        _, h = self.filter(x)
        return h[0]

    def rollout(self, o0: torch.Tensor, h: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Predicted observations [B, T, O] after o0 [B, O] under actions [B, T, A]."""
        s = torch.tanh(self.start(torch.cat([o0 / self.std, h], -1)))
        o, out = o0, []
        for t in range(actions.shape[1]):
            s = self.cell(torch.cat([actions[:, t], o / self.std], -1), s)
            o = o + self.std * self.head(s)
            out.append(o)
        return torch.stack(out, 1)


def train_warm_gru(model, obs, acts, updates, batch, horizon, window, seed, lr) -> float:
    """Returns the median seconds per update."""
    import time

    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n, length = acts.shape[:2]
    times = []
    for step in range(updates):
        rows = torch.randint(0, n, (batch,))
        starts = torch.randint(0, length - horizon + 1, (batch,))
        idx = starts[:, None] + torch.arange(horizon + 1)
        o, a = obs[rows[:, None], idx], acts[rows[:, None], idx[:, :-1]]
        begin = time.perf_counter()
        h = model.summary(obs, acts, rows, starts, window)
        pred = model.rollout(o[:, 0], h, a)
        loss = ((pred - o[:, 1:]) / model.std).square().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        times.append(time.perf_counter() - begin)
        for g in opt.param_groups:
            g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * (step + 1) / updates))
    return float(np.median(times))


@torch.no_grad()
def warm_gru_open_loop(model, obs, acts, true, warm: int, window: int) -> torch.Tensor:
    """Predicted observations [n, T + 1, O] from the true state at `warm` (index 0), the filter
    having read the episode's first `warm` noisy transitions."""
    n = obs.shape[0]
    h = model.summary(obs, acts, torch.arange(n), torch.full((n,), warm), window)
    pred = model.rollout(true[:, 0], h, acts[:, warm : warm + true.shape[1] - 1])
    return torch.cat([true[:, :1], pred], 1)
