"""The episode so far: the one owner, while acting, of what a world model's context reads of each
environment copy's current episode (docs/architecture.md, data flow).

A dynamics whose context reads the recent trajectory (Dynamics.history_length W) or an episodic
memory (Dynamics.memory_capacity C) needs, at every plan, the W observations before the current
one and the C transitions (obs, action, next obs) before it in the same episode. In training
the replay buffer assembles the same from stored data (agent.core.buffer.ReplayBuffer.sample, as
SequenceBatch.episode); while acting, `EpisodeSoFar` keeps them, one per environment copy:

    inputs = episode_inputs(episodes, obs, window, capacity)  # before planning from obs [E, O]
    actions = plan_batch(planners, model, obs, inputs, ...)
    for episode, o, a in zip(episodes, obs, actions): episode.acted(o, a)

`episode_inputs` completes each copy's last transition with its current observation (the one
the action led to) and, after reading the window, appends that observation to it; `acted` opens
the next transition. `reset()` at every episode start. The planner keeps only its warm start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from world_model.memory.episodic import MemoryInputs
from world_model.model import EpisodeInputs

__all__ = ["EpisodeSoFar", "episode_inputs"]


class EpisodeSoFar:
    """One environment copy's episode so far (module docstring): its observations before the
    current one (the last `window` of them are kept) and its completed transitions (the last
    `capacity`), with the transition the last action opened (completed by the next
    observation)."""

    def __init__(self) -> None:
        self.history: list[Tensor] = []  # [O] each, oldest first
        self.transitions: list[tuple[Tensor, Tensor, Tensor]] = []  # (obs, action, next obs)
        self.pending: tuple[Tensor, Tensor] | None = None  # the last (obs, action)

    def reset(self) -> None:
        """A new episode: nothing before its first observation."""
        self.history, self.transitions, self.pending = [], [], None

    def acted(self, obs: Tensor, action: Tensor) -> None:
        """Action [A] was taken at obs [O]: the transition the next observation completes."""
        self.pending = (obs.clone(), action.clone())

    def _observe(self, obs: Tensor, capacity: int) -> None:
        """The observation after the last action completes its transition (kept: the last
        `capacity`)."""
        if self.pending is not None:
            self.transitions = [*self.transitions, (*self.pending, obs.clone())][-capacity:]
        self.pending = None

    def _window(self, w: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """The last w observations ([w, 1, O] oldest first, padded in front and masked while
        the episode is younger)."""
        past = self.history[-w:]
        obs = like.new_zeros(w, 1, like.shape[-1])
        mask = torch.zeros(w, 1, dtype=torch.bool, device=like.device)
        if past:
            obs[w - len(past) :, 0] = torch.stack(past).to(like)
            mask[w - len(past) :] = True
        return obs, mask

    def _memory_rows(self) -> tuple[Tensor, ...] | None:
        if not self.transitions:
            return None
        return tuple(torch.stack(x) for x in zip(*self.transitions, strict=True))

    def state_dict(self) -> dict[str, Any]:
        pending = self.pending
        return {
            "history": [h.cpu().clone() for h in self.history],
            "transitions": [[t.cpu().clone() for t in x] for x in self.transitions],
            "pending": None if pending is None else [t.cpu().clone() for t in pending],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [h.clone() for h in state.get("history", [])]
        self.transitions = [tuple(t.clone() for t in x) for x in state.get("transitions", [])]
        pending = state.get("pending")
        self.pending = None if pending is None else tuple(t.clone() for t in pending)


def episode_inputs(
    episodes: Sequence[EpisodeSoFar], obs: Tensor, window: int, capacity: int
) -> EpisodeInputs:
    """What the context reads of E episodes at their current observations obs [E, O]: the
    history window [window, E, O] with its mask (None when window is 0) and the memory's
    transitions (None when capacity is 0 or no episode holds one yet; the newest completed by
    obs, padded in front like the buffer's). The observations join the windows after."""
    memory = _memory(episodes, obs, capacity) if capacity > 0 else None
    history = mask = None
    if window > 0:
        inputs = [e._window(window, obs[i : i + 1]) for i, e in enumerate(episodes)]
        history = torch.cat([h for h, _ in inputs], dim=1)  # [w, E, O]
        mask = torch.cat([m for _, m in inputs], dim=1)  # [w, E]
        for i, episode in enumerate(episodes):
            episode.history = [*episode.history, obs[i].clone()][-window:]
    return EpisodeInputs(history, mask, memory)


def _memory(episodes: Sequence[EpisodeSoFar], obs: Tensor, capacity: int) -> MemoryInputs | None:
    for i, episode in enumerate(episodes):
        episode._observe(obs[i], capacity)
    held = [e._memory_rows() for e in episodes]
    if all(h is None for h in held):
        return None
    rows = [torch.cat(x) for x in zip(*(h for h in held if h is not None), strict=True)]
    index = torch.zeros(capacity, len(episodes), dtype=torch.long)
    mask = torch.zeros(capacity, len(episodes), dtype=torch.bool)
    offset = 0
    for i, h in enumerate(held):  # newest last, padded in front, like the buffer's
        if h is None:
            continue
        k = h[0].shape[0]
        index[capacity - k :, i] = torch.arange(offset, offset + k)
        mask[capacity - k :, i] = True
        offset += k
    return MemoryInputs(
        *(r.to(device=obs.device, dtype=obs.dtype) for r in rows),
        index=index.to(obs.device),
        mask=mask.to(obs.device),
    )
