"""Replay buffer of transitions that samples sub-trajectories for multi-step world-model losses.

Transitions are stored in insertion order in a ring of `capacity` slots. With `streams` K > 1
(K environment copies stepped in lock-step, agent/core/collection.py) every env step writes K slots,
copy k's transition in slot t K + k, so a copy's consecutive steps lie K slots apart and the
capacity is rounded down to a multiple of K; K = 1 is the plain ring. A sub-trajectory of H
steps starting at slot i is valid when its H slots (i, i + K, ...) are consecutive in time (no
wrap past the oldest slot) and no episode ends (terminated or truncated) before its last step;
the last step may end an episode, and its `next_obs` is then the true final observation, so TD
targets bootstrap through truncations and stop at terminations.

The buffer's random generator is its own (numpy PCG64), saved in `state_dict` with the data.
"""

from __future__ import annotations

import numpy as np
import torch

from world_model.memory.episodic import MemoryInputs
from world_model.training import SequenceBatch

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    _FIELDS = ("obs", "next_obs", "action", "reward", "terminated", "truncated")

    def __init__(
        self, obs_dim: int, action_dim: int, capacity: int, seed: int = 0, streams: int = 1
    ):
        if streams < 1:
            raise ValueError(f"ReplayBuffer streams must be >= 1, got {streams}")
        if capacity < streams:
            raise ValueError(
                f"ReplayBuffer capacity must be >= streams ({streams}), got {capacity}"
            )
        self.obs_dim, self.action_dim, self.streams = obs_dim, action_dim, streams
        self.capacity = capacity - capacity % streams
        self._allocated = 0  # storage grows by doubling up to capacity
        widths = {
            "obs": obs_dim,
            "next_obs": obs_dim,
            "action": action_dim,
            "reward": 1,
            "terminated": 1,
            "truncated": 1,
        }
        for name in self._FIELDS:
            setattr(self, name, torch.zeros(0, widths[name]))
        self._done = np.zeros(0, dtype=bool)  # terminated or truncated
        self.ptr = 0  # next slot to write
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def _reserve(self, n: int) -> None:
        """Make sure slots [0, n) exist (n <= capacity)."""
        if n <= self._allocated:
            return
        new = min(self.capacity, max(n, 2 * self._allocated, 1024))
        for name in self._FIELDS:
            old = getattr(self, name)
            grown = torch.zeros(new, old.shape[1])
            grown[: old.shape[0]] = old
            setattr(self, name, grown)
        done = np.zeros(new, dtype=bool)
        done[: self._done.shape[0]] = self._done
        self._done = done
        self._allocated = new

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward: float, next_obs, terminated: bool, truncated: bool) -> None:
        """One transition (streams = 1)."""
        if self.streams != 1:
            raise ValueError(
                f"ReplayBuffer.add stores one stream's transition; this buffer has "
                f"{self.streams} streams (add_batch)"
            )
        self.add_batch(
            np.asarray(obs)[None], np.asarray(action)[None], np.asarray([reward]),
            np.asarray(next_obs)[None], np.asarray([terminated]), np.asarray([truncated]),
        )  # fmt: skip

    def add_batch(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        """One env step of every stream: obs, next_obs [K, O], action [K, A], reward,
        terminated, truncated [K]."""
        i, k = self.ptr, self.streams
        self._reserve(i + k)
        rows = slice(i, i + k)
        self.obs[rows] = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        self.next_obs[rows] = torch.as_tensor(np.asarray(next_obs), dtype=torch.float32)
        self.action[rows] = torch.as_tensor(np.asarray(action), dtype=torch.float32)
        as_column = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64)).float()[:, None]  # noqa: E731
        self.reward[rows] = as_column(reward)
        self.terminated[rows] = as_column(terminated)
        self.truncated[rows] = as_column(truncated)
        self._done[rows] = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        self.ptr = (i + k) % self.capacity
        self.size = min(self.size + k, self.capacity)

    def mark_truncated(self, streams: np.ndarray | None = None) -> None:
        """Close the episodes in progress at the last stored step (a run stopped in the middle
        of an episode: its next_obs is real, so it bootstraps like any truncation); `streams`
        [K] bool: only those streams' (default: all)."""
        if self.size == 0:
            return
        last = (self.ptr - self.streams + np.arange(self.streams)) % self.capacity  # [K]
        if streams is not None:
            last = last[np.asarray(streams, dtype=bool)]
        for i in last[~self._done[last]]:
            self.truncated[i] = 1.0
            self._done[i] = True

    def sample(
        self,
        batch_size: int,
        horizon: int,
        history: int = 0,
        memory: int = 0,
        part: slice | None = None,
    ) -> SequenceBatch:
        """B random valid sub-trajectories of `horizon` steps (see the module docstring), with
        the `history` observations before each start in the same episode (masked where the
        episode, or the stored data, begins later) and, for an episodic memory, the `memory`
        transitions before each start in the same episode (causal: none at or after it).
        `part`: only those of the B sequences (a data-parallel rank's share; the generator
        draws the whole batch's starts either way)."""
        k = self.streams
        n_starts = self.size - k * (horizon - 1)
        if n_starts < 1:
            raise ValueError(
                f"ReplayBuffer holds {self.size} transitions; sampling needs at least {horizon}"
            )
        oldest = self.ptr if self.size == self.capacity else 0
        offsets = k * np.arange(horizon)  # a stream's consecutive steps lie k slots apart
        chosen: list[np.ndarray] = []
        have, tries = 0, 0
        while have < batch_size:
            starts = self.rng.integers(0, n_starts, size=2 * batch_size)  # logical positions
            idx = (oldest + starts[:, None] + offsets) % self.capacity  # [2B, H]
            ok = ~self._done[idx[:, :-1]].any(axis=1)
            chosen.append(idx[ok])
            have += int(ok.sum())
            tries += 1
            if tries > 100 and have == 0:
                raise ValueError(
                    f"ReplayBuffer: no sub-trajectory of {horizon} steps fits inside an episode"
                )
        picked = np.concatenate(chosen)[:batch_size]  # [B, H] physical slots
        if part is not None:
            picked = picked[part]
        idx = torch.from_numpy(picked.T.copy())  # [H, B]
        obs = torch.cat([self.obs[idx[:1]], self.next_obs[idx]], dim=0)  # [H+1, B, O]
        hist_obs = hist_mask = None
        if history > 0:
            slots, valid = self._before_starts(picked[:, 0], history)  # [B, W]
            hist_idx = torch.from_numpy(slots.T.copy())  # [W, B]
            hist_mask = torch.from_numpy(valid.T.copy())  # [W, B]
            hist_obs = self.obs[hist_idx] * hist_mask.unsqueeze(-1)  # [W, B, O], 0 where masked
        memory_inputs = None
        if memory > 0:  # transition s = (obs[s], action[s], next_obs[s]) for s before the start
            slots, valid = self._before_starts(picked[:, 0], memory)  # [B, C]
            distinct, inverse = np.unique(slots[valid], return_inverse=True)
            index = np.zeros_like(slots)
            index[valid] = inverse
            rows = torch.from_numpy(distinct)
            memory_inputs = MemoryInputs(
                obs=self.obs[rows],  # [U, O]: every distinct transition once
                action=self.action[rows],
                next_obs=self.next_obs[rows],
                index=torch.from_numpy(index.T.copy()),  # [C, B] into the U rows
                mask=torch.from_numpy(valid.T.copy()),  # [C, B]
                next_row=torch.from_numpy(self._next_rows(distinct)),
            )
        return SequenceBatch(
            obs=obs,
            action=self.action[idx],  # [H, B, A]
            reward=self.reward[idx],  # [H, B, 1]
            terminated=self.terminated[idx],
            truncated=self.truncated[idx],
            history_obs=hist_obs,
            history_mask=hist_mask,
            memory=memory_inputs,
        )

    def _next_rows(self, slots: np.ndarray) -> np.ndarray:
        """For sorted memory slots [U] (each lies before a start in its episode), the row of
        `slots` holding each one's next step in its stream where that step's obs is the slot's
        next_obs (collection writes a copy's next obs as its next step's obs:
        tests/agent/test_collection.py; compared here, so transitions added otherwise stay
        right); -1 where it is not among them (MemoryInputs.next_row)."""
        if len(slots) == 0:
            return np.zeros(0, dtype=np.int64)
        after = (slots + self.streams) % self.capacity
        at = np.minimum(np.searchsorted(slots, after), len(slots) - 1)
        ahead = slots[at]  # the held slot nearest above each one's next step
        same = (self.obs[torch.from_numpy(ahead)] == self.next_obs[torch.from_numpy(slots)]).all(-1)
        return np.where((ahead == after) & same.numpy(), at, -1)

    def _before_starts(self, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The n slots before each start slot [B], oldest first, and whether each is in the
        start's episode and stored: (slots [B, n], valid [B, n]; slot 0 where not valid)."""
        oldest = self.ptr if self.size == self.capacity else 0
        start_logical = (starts - oldest) % self.capacity  # [B]
        back = self.streams * np.arange(n, 0, -1)  # n .. 1 steps back, in the start's stream
        logical = start_logical[:, None] - back  # [B, n]
        valid = logical >= 0
        slots = np.where(valid, (oldest + logical) % self.capacity, 0)  # [B, n]
        # a step is in the start's episode if no episode ends at it or after it, before the
        # start: walk from the nearest step backwards
        for k in range(n - 1, -1, -1):
            ended = self._done[slots[:, k]] & valid[:, k]
            later = valid[:, k + 1 :].all(axis=1) if k + 1 < n else np.ones_like(ended)
            valid[:, k] &= ~ended & later
        return slots, valid

    # -- checkpointing: tensors and plain Python values only (loads with weights_only=True)
    def state_dict(self) -> dict:
        n = self.size
        return {
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "capacity": self.capacity,
            "streams": self.streams,
            "ptr": self.ptr,
            "size": n,
            **{name: getattr(self, name)[:n].clone() for name in self._FIELDS},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        state = {"streams": 1, **state}  # checkpoints before vectorised collection: one stream
        for key in ("obs_dim", "action_dim", "capacity", "streams"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"ReplayBuffer: checkpoint has {key}={state[key]}, this buffer "
                    f"{getattr(self, key)}"
                )
        n = state["size"]
        self.ptr, self.size = state["ptr"], n
        self._reserve(n)
        self._done[:] = False
        for name in self._FIELDS:
            getattr(self, name)[:n] = state[name][:n]
        self._done[:n] = ((self.terminated[:n] + self.truncated[:n]) > 0).squeeze(-1).numpy()
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
