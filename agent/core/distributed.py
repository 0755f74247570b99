"""Data-parallel training on torch.distributed: `torchrun --nproc-per-node W -m agent.train ...`.

W ranks train one agent. What each rank holds and does:

- **Collection.** Rank r steps its own `train.num_envs` = K environment copies, global copies
  r K .. r K + K - 1, seeded as a single process seeds copies of those numbers
  (agent/core/collection.py `copy_seed`), each with its own planner (warm start, episodic memory)
  and generator. After every env step the ranks all-gather their copies' transitions, so the
  run is one collection of W K copies (`ShardedCollection`).
- **Replay: shared.** Every rank stores all W K copies' transitions in the same replay buffer
  (W K streams, the same generator), so every rank holds the whole run's data, a checkpoint
  written by rank 0 is the whole run, and a sample is the same on every rank. Each update every
  rank draws the same B sequence indices and trains on its B / W of them: the ranks together
  train on one batch of B, the single-process batch size. (Sharding the data instead would save
  memory, O(obs) per transition and rank, which no task here needs, and would need a gather at
  every checkpoint.)
- **Gradients: an explicit all-reduce, not DistributedDataParallel.** An update is two backward
  passes through different optimisers (the world model's RiemannianAdam, the policy's Adam) over
  losses that call the model's encoder, dynamics, heads and policy directly rather than one
  `forward`, which DDP's reducer expects; and geoopt's manifold parameters take their Euclidean
  gradients, which are linear in the batch, so averaging them is averaging the Riemannian
  gradients at the same point. After each backward `all_reduce_gradients` sums the flattened
  gradients across ranks and divides by W: the gradient of the union batch's mean loss.
- **The rest of an update**, where it reads across the batch: noise drawn for the union batch
  and sliced, the running Q scale's percentiles and DMG's genesis inputs gathered
  (world_model/sharding.py). Every rank then takes the same optimiser steps and the same DMG
  growth, so parameters and shapes stay equal across ranks without a broadcast (one is made at
  the start, as DDP makes one).
- **Update-to-data ratio**: unchanged. The loop counts W K env steps per collective step and
  owes `agent.updates_per_step` updates per env step, each on a batch of B split across the
  ranks: updates per environment step and samples per update are the single-process run's.
- **Writing**: rank 0 writes checkpoints, TensorBoard and the evaluation (the others skip it).
  A checkpoint holds every copy's env and generator state in the single-process layout of W K
  copies, so a run resumes on any world size W' with K' = W K / W' copies per rank (one process:
  `python -m agent.train --resume RUN` takes K' = W K).

Single-process runs never enter this module: `Agent.dist` is None and every path is the one it
was before.
"""

from __future__ import annotations

import datetime
import os
import socket
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from agent.core.collection import Collection
from agent.core.config import ConfigError

__all__ = [
    "DistContext",
    "ShardedCollection",
    "close_process_group",
    "init_from_env",
    "rank_device",
    "run_local_ranks",
    "world_size_from_env",
]


def world_size_from_env() -> int:
    """The world size torchrun announces (WORLD_SIZE), 1 without torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass(frozen=True)
class DistContext:
    """This process's place in a data-parallel run (torch.distributed initialised)."""

    rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ collectives
    def gather_rows(self, x: np.ndarray) -> np.ndarray:
        """Every rank's [K, ...] array stacked in rank order: [W K, ...] (same dtype)."""
        x = np.ascontiguousarray(x)
        kind = x.dtype
        t = torch.from_numpy(x.astype(np.uint8) if kind == np.bool_ else x)
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t)
        out = torch.cat(parts).numpy()
        return out.astype(np.bool_) if kind == np.bool_ else out

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's picklable `obj`, in rank order, on every rank."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def any(self, flag: bool) -> bool:
        """True on every rank when `flag` is True on any."""
        t = torch.tensor([int(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank (the start of a run, as DDP does)."""
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src=0)

    def all_reduce_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Average the gradients of `params` over the ranks: one all-reduce of the flattened
        gradients (a parameter without a gradient on some rank counts zero there; one without on
        every rank keeps none, so the optimiser skips it as a single process would)."""
        params = list(params)
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.uint8)
        dist.all_reduce(has, op=dist.ReduceOp.MAX)
        with_grad = [p for p, h in zip(params, has.tolist(), strict=True) if h]
        if not with_grad:
            return
        for p in with_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in with_grad])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for p in with_grad:
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n


def init_from_env(device: str) -> DistContext | None:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT) for a run
    on `device` (the run's configured device): NCCL where the ranks train on CUDA (each on its
    LOCAL_RANK's GPU, :func:`rank_device`), gloo on the CPU. None without torchrun or with one
    process. The timeout is long: rank 0 evaluates while the others wait at the next step."""
    world = world_size_from_env()
    if world <= 1:
        return None
    if not dist.is_available():
        raise RuntimeError("this torch build has no torch.distributed")
    rank = int(os.environ["RANK"])
    local = rank_device(device)
    cuda = local.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(hours=2),
        )
    return DistContext(rank=rank, world_size=world)


def close_process_group(together: bool = False) -> None:
    """Leave the process group, if this process joined one. `together` (a normal exit, every
    rank on its way out): wait for every rank first, so that none tears its gloo connections
    down while another still holds them; two CI runs saw a rank abort in that teardown
    ("terminate called without an active exception") without the wait, never reproduced here.
    After an error a rank leaves at once (torchrun stops the others)."""
    if dist.is_available() and dist.is_initialized():
        try:
            if together:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def run_local_ranks(fn: Callable, world: int, args: tuple = ()) -> list[Any]:
    """fn(rank, *args) in `world` processes joined in one gloo group on this machine's loopback
    (what `torchrun --standalone` sets up; for tests and benchmarks), one torch thread each;
    every rank's return value in rank order. `fn` must be a module-level function and its
    result savable with torch.save."""
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_local_rank, args=(world, port, fn, args, out), nprocs=world, join=True)
        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(world)]


def _local_rank(rank: int, world: int, port: int, fn: Callable, args: tuple, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    finished = False
    try:
        torch.save(fn(rank, *args), Path(out) / f"rank{rank}.pt")
        finished = True
    finally:
        close_process_group(together=finished)


def rank_device(device: str) -> str:
    """The device a torchrun rank trains on, for the run's configured `device`. NCCL takes one
    GPU per rank, so CUDA ranks each take their LOCAL_RANK's GPU: "auto" is CUDA only where every
    rank on this machine (LOCAL_WORLD_SIZE) has a GPU of its own, else the CPU for all of them;
    "cuda" with fewer GPUs than ranks is a ConfigError. Outside torchrun: `device` unchanged."""
    if "LOCAL_RANK" not in os.environ or device not in ("cuda", "auto"):
        return device
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= local_world:
        return f"cuda:{local_rank}"
    if device == "auto":
        return "cpu"
    raise ConfigError(
        f"{local_world} ranks on this machine but {gpus} CUDA device(s): NCCL takes one GPU per "
        f"rank (start at most {gpus} per machine, or train on --device cpu)"
    )


class ShardedCollection:
    """The W ranks' K local copies as one collection of W K copies: each method runs this
    rank's copies (an agent.core.collection.Collection whose copies are numbered from r K) and
    all-gathers the result, so the training loop sees every copy's observations, actions and
    transitions on every rank."""

    def __init__(self, local: Collection, ctx: DistContext):
        self.local, self.ctx = local, ctx
        self.num_envs = local.num_envs * ctx.world_size
        k = local.num_envs
        self._mine = slice(ctx.rank * k, (ctx.rank + 1) * k)

    @property
    def env(self):
        return self.local.env

    def reset(self, mask: np.ndarray, obs: np.ndarray | None) -> np.ndarray:
        mine = None if obs is None else obs[self._mine]
        return self.ctx.gather_rows(self.local.reset(mask[self._mine], mine))

    def actions(self, obs: np.ndarray, random: bool) -> np.ndarray:
        return self.ctx.gather_rows(self.local.actions(obs[self._mine], random))

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """One all-gather of [K, O + 3] float64 rows: next_obs, reward, terminated, truncated."""
        next_obs, rewards, terminated, truncated = self.local.step(actions[self._mine])
        rows = np.concatenate(
            [
                np.asarray(next_obs, dtype=np.float64),
                np.stack([rewards, terminated, truncated], axis=1).astype(np.float64),
            ],
            axis=1,
        )
        out = self.ctx.gather_rows(rows)
        o = next_obs.shape[1]
        return (
            out[:, :o].astype(next_obs.dtype),
            out[:, o],
            out[:, o + 1] > 0.5,
            out[:, o + 2] > 0.5,
        )

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The single-process layout of W K copies (agent/core/collection.py): every copy's env
        generator, and the planner generators of copies 1 .. W K - 1 (copy 0's is the agent's)."""
        local = self.local
        mine = {
            "env": local.state_dict()["env"],
            "generators": [g.get_state() for g in local.generators],
        }
        ranks = self.ctx.gather_objects(mine)
        return {
            "env": [s for part in ranks for s in part["env"]],
            "generators": [g for part in ranks for g in part["generators"]][1:],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["env"]) != self.num_envs:
            raise ValueError(
                f"the checkpoint holds {len(state['env'])} env copies, the run has "
                f"{self.num_envs} ({self.ctx.world_size} ranks x {self.local.num_envs})"
            )
        generators = [None, *state["generators"]][self._mine]  # copy 0's: the agent's
        self.local.load_state_dict({"env": state["env"][self._mine], "generators": generators[1:]})
        if generators[0] is not None:  # this rank's first copy plans with the agent's generator
            self.local.generators[0].set_state(generators[0])

    def close(self) -> None:
        self.local.close()
