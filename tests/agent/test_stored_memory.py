"""The episodic memory's entries stored per buffer slot (agent/core/memory_store.py): an entry
read within `memory_refresh` updates of its computation is the one computed then, with that
update's parameters; an older one, or one never computed, is computed with the current ones; a
slot that takes a new transition forgets its entry; the entries travel with the buffer's state;
with refresh 1 nothing is stored."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from agent.core.agent import Agent
from agent.core.buffer import ReplayBuffer
from agent.core.config import ConfigError, RunConfig

from .conftest import tiny

CONTEXT = {
    "prototypes": 4, "feature_dim": 8, "window": 0, "memory": "dense", "memory_capacity": 8,
    "routing": "dense",
}  # fmt: skip


def _agent(refresh: int, capacity: int = 10_000) -> Agent:
    data = tiny(train={"world_model": "geodesic", "buffer_capacity": capacity})
    data["dynamics"] = {"latent_dim": 4, "context": {**CONTEXT, "memory_refresh": refresh}}
    return Agent(None, RunConfig.from_dict(data))


def _fill(agent: Agent, steps: int, seed: int = 7) -> None:
    """Chained random transitions (each next obs is the next step's obs), 20-step episodes."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=agent.obs_dim).astype(np.float32)
    for t in range(steps):
        nxt = rng.normal(size=agent.obs_dim).astype(np.float32)
        act = rng.uniform(-1, 1, size=agent.action_dim).astype(np.float32)
        end = (t + 1) % 20 == 0
        agent.observe(obs, act, float(rng.normal()), nxt, False, end)
        obs = rng.normal(size=agent.obs_dim).astype(np.float32) if end else nxt


def _read(agent: Agent, batch_size: int):
    """A batch's memory with its entries, as an update reads it (Agent.update)."""
    memory = agent.sample_batch(batch_size, 3).memory
    return agent.stored_memory.read(memory, agent.model.dynamics, agent.num_updates)


def _stamps(agent: Agent, slots: torch.Tensor) -> torch.Tensor:
    return agent.buffer.column("memory_stamp")[slots, 0]


def test_refresh_1_stores_nothing_and_reads_the_entries_afresh():
    agent = _agent(refresh=1)
    _fill(agent, 120)
    assert agent.stored_memory is None and not agent.buffer.derived
    memory = agent.sample_batch(16, 3).memory
    assert memory.stored_keys is None and memory.slots is not None


def test_a_stored_entry_is_the_one_its_update_computed_until_it_is_refresh_updates_old():
    agent = _agent(refresh=3)
    _fill(agent, 300)
    dyn = agent.model.dynamics
    # a batch drawn outside an update (diagnostics, inspection) reads afresh and stores nothing
    assert agent.sample_batch(64, 3).memory.stored_keys is None
    assert bool((agent.buffer.column("memory_stamp") == -1).all())
    # the parameters of update 0 in a model of its own (a deep copy would share the compiled
    # steps, which stay bound to the original's integrator)
    snapshot = _agent(refresh=3)
    snapshot.model.load_state_dict(copy.deepcopy(agent.model.state_dict()))
    before = snapshot.model.dynamics
    agent.update()  # reads (and stores) its batch's entries at update 0, then trains
    assert agent.num_updates == 1
    pairs = zip(before.parameters(), dyn.parameters(), strict=True)
    assert sum(not torch.equal(a, b) for a, b in pairs) > 3  # stored and fresh entries differ
    memory = _read(agent, 64)
    old = _stamps(agent, memory.slots) == 0
    new = _stamps(agent, memory.slots) == 1  # computed by this read
    assert old.any() and new.any() and bool((old | new).all())
    for stamped, model in ((old, before), (new, dyn)):
        rows = torch.nonzero(stamped).squeeze(1)
        keys, residuals = model.memory_entries(memory.rows(rows))
        torch.testing.assert_close(memory.stored_keys[rows], keys, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(memory.stored_residuals[rows], residuals, rtol=1e-5, atol=1e-5)
    rows = torch.nonzero(old).squeeze(1)  # and the old ones are not what today's model gives
    assert not torch.allclose(
        memory.stored_residuals[rows], dyn.memory_entries(memory.rows(rows))[1]
    )
    # three updates after update 0, its entries are stale: computed again when read
    agent.num_updates = 3
    again = _read(agent, 64)
    stamps = _stamps(agent, again.slots)
    assert bool((stamps >= 1).all()) and bool((stamps == 3).any())
    bank = dyn.memory_bank(again)  # the read-out indexes the stored entries per sample
    fresh = dyn.memory_bank(dataclasses.replace(again, stored_keys=None, stored_residuals=None))
    assert bank.keys.shape == fresh.keys.shape and torch.equal(bank.mask, fresh.mask)


def test_a_slot_forgets_its_entry_when_it_takes_a_new_transition():
    agent = _agent(refresh=5, capacity=100)
    _fill(agent, 100)
    memory = _read(agent, 32)
    assert bool((_stamps(agent, memory.slots) == 0).all())
    ptr = agent.buffer.ptr
    _fill(agent, 10, seed=8)  # overwrites slots ptr .. ptr + 9 of the ring of 100
    written = torch.arange(ptr, ptr + 10) % 100
    assert bool((_stamps(agent, written) == -1).all())
    assert not agent.buffer.column("memory_key")[written].any()
    kept = memory.slots[~torch.isin(memory.slots, written)]
    assert kept.numel() and bool((_stamps(agent, kept) == 0).all())


def test_the_stored_entries_travel_with_the_buffers_state():
    agent = _agent(refresh=4)
    _fill(agent, 150)
    _read(agent, 32)
    state = agent.buffer.state_dict()
    other = _agent(refresh=4)
    other.buffer.load_state_dict(state)
    for name in ("memory_key", "memory_residual", "memory_stamp"):
        n = agent.buffer.size
        assert torch.equal(other.buffer.column(name)[:n], agent.buffer.column(name)[:n])
    assert (other.buffer.column("memory_stamp")[:150] == 0).any()
    # a buffer saved before entries were stored: every slot starts with none
    del state["derived"]
    other.buffer.load_state_dict(state)
    assert bool((other.buffer.column("memory_stamp") == -1).all())


def test_derived_data_and_the_refresh_are_checked():
    buffer = ReplayBuffer(2, 1, 10)
    buffer.derive("x", 3, 0.5)
    with pytest.raises(ValueError, match="derived data 'x' exists already"):
        buffer.derive("x", 3, 0.5)
    buffer.add([0.0, 1.0], [0.0], 0.0, [1.0, 1.0], False, False)
    assert buffer.column("x").shape[1] == 3 and bool((buffer.column("x") == 0.5).all())
    with pytest.raises(ConfigError, match="memory_refresh"):
        _agent(refresh=0)
