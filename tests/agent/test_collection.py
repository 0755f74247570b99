"""Vectorised collection (`train.num_envs`, agent/core/collection.py): K env copies stepped in
lock-step and planned for in one batch. The replay buffer keeps each copy's steps as its own
stream (sub-trajectories and histories never mix copies or cross episode ends: checked against
brute force); the update-to-data ratio is the single env's; the async vector env gives the sync
one's run bit for bit; a run stopped at a checkpoint and resumed equals the uninterrupted one,
also when copies with terminations drift apart; the command line takes --num-envs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import train as train_cli
from agent.core.agent import Agent
from agent.core.buffer import ReplayBuffer
from agent.core.collection import copy_seed
from agent.core.config import ConfigError, RunConfig
from agent.core.loop import Trainer
from agent.persistence.checkpoint import load_checkpoint
from agent.persistence.runs import CHECKPOINT_NAME
from tests.agent.conftest import assert_same_state, call_main, tiny

# ----------------------------------------------------------------------- the buffer's streams


def _filled(
    streams: int, lengths: list[list[int]], capacity: int = 10_000, steps: int | None = None
) -> ReplayBuffer:
    """A buffer whose obs encode (stream, episode, step): obs = [stream, episode, t]; stream s
    runs the episodes of lengths[s] back to back, every stream stepped in lock-step."""
    buffer = ReplayBuffer(3, 1, capacity, seed=0, streams=streams)
    plans = []
    for s in range(streams):
        plans.append([(e, t, t == n - 1) for e, n in enumerate(lengths[s]) for t in range(n)])
    total = steps or min(len(p) for p in plans)
    for step in range(total):
        obs = np.array([[s, plans[s][step][0], plans[s][step][1]] for s in range(streams)], float)
        nxt = obs + np.array([0.0, 0.0, 1.0])
        done = np.array([plans[s][step][2] for s in range(streams)])
        buffer.add_batch(obs, np.zeros((streams, 1)), np.zeros(streams), nxt,
                         np.zeros(streams, bool), done)  # fmt: skip
    return buffer


@pytest.mark.parametrize("capacity", [10_000, 90])  # 90: the ring has wrapped
def test_sub_trajectories_and_histories_stay_in_one_copys_episode(capacity):
    buffer = _filled(3, [[7, 9, 30], [4, 4, 4, 4, 30], [30]], capacity)
    batch = buffer.sample(256, horizon=3, history=4)
    obs = batch.obs.numpy()  # [H+1, B, 3]
    # one stream, one episode, consecutive steps: obs[h] = (s, e, t0 + h)
    assert (obs[:, :, 0] == obs[:1, :, 0]).all() and (obs[:, :, 1] == obs[:1, :, 1]).all()
    assert (np.diff(obs[:, :, 2], axis=0) == 1).all()
    # the history: the same stream and episode, the steps just before, masked before its start
    hist, mask = batch.history_obs.numpy(), batch.history_mask.numpy()  # [W, B, 3], [W, B]
    start = obs[0]
    for w in range(4):
        back = 4 - w
        if capacity > buffer.size:  # nothing overwritten: masked exactly before the episode
            assert (mask[w] == (start[:, 2] - back >= 0)).all()
        held = mask[w]
        assert (hist[w][held] == start[held] - np.array([0, 0, back])).all()
    # every valid start is drawn: brute force over the stored slots
    size = buffer.size
    k = buffer.streams
    valid = set()
    for p in range(size - k * 2):
        rows = [p + k * h for h in range(3)]
        oldest = buffer.ptr if buffer.size == buffer.capacity else 0
        slots = [(oldest + r) % buffer.capacity for r in rows]
        if not buffer._done[slots[:-1]].any():
            valid.add(tuple(buffer.obs[slots[0]].tolist()))
    drawn = {tuple(o) for o in buffer.sample(4000, horizon=3).obs[0].tolist()}
    assert drawn == valid


@pytest.mark.parametrize("capacity", [10_000, 90])
def test_a_memory_entrys_next_row_is_its_next_step_in_its_copys_episode(capacity):
    """With 3 copies (a copy's steps 3 slots apart) and a wrapped ring: next_row points at the
    entry holding the same copy's same episode's next step, whose obs is the entry's next_obs
    (the reader encodes it once); entries whose next step is not held (the start's) get -1."""
    buffer = _filled(3, [[7, 9, 30], [4, 4, 4, 4, 30], [30]], capacity)
    mem = buffer.sample(256, horizon=3, memory=5).memory
    held = mem.next_row >= 0
    assert held.any() and not held.all()
    after = mem.obs[mem.next_row[held]]
    assert torch.equal(after, mem.next_obs[held])  # (s, e, t + 1) of the entry's (s, e, t)
    pairs = {tuple(o) for o in mem.obs.tolist()}
    assert not any(tuple(o) in pairs for o in mem.next_obs[~held].tolist())
    # transitions whose next_obs is not their next step's obs (added by hand, not collected):
    # copy 0's are never read from another row
    buffer.next_obs[0 : buffer.size : 3] += 0.5
    mem = buffer.sample(256, horizon=3, memory=5).memory
    held = mem.next_row >= 0
    assert held.any() and not (held & (mem.obs[:, 0] == 0)).any()
    assert torch.equal(mem.obs[mem.next_row[held]], mem.next_obs[held])


def test_mark_truncated_closes_only_the_chosen_streams():
    buffer = _filled(3, [[100], [100], [100]], steps=60)  # every episode in progress
    buffer.mark_truncated(np.array([True, False, True]))
    last = buffer.truncated[buffer.size - 3 : buffer.size, 0].tolist()
    assert last == [1.0, 0.0, 1.0]


# ----------------------------------------------------------------------- the loop


def _agent(**train) -> Agent:
    return Agent(None, RunConfig.from_dict(tiny(train={"seed_steps": 100, **train})))


def _streams(agent: Agent) -> np.ndarray:
    """The buffer's transitions as [T, K, ...] obs and next_obs."""
    b, k = agent.buffer, agent.buffer.streams
    return b.obs[: b.size].view(-1, k, b.obs_dim).numpy(), b.next_obs[: b.size].view(
        -1, k, b.obs_dim
    ).numpy()


def test_copies_are_their_own_episodes_at_the_single_envs_update_to_data_ratio():
    one, four = _agent(steps=240), _agent(steps=240, num_envs=4)
    for agent in (one, four):
        Trainer(agent).run(240)
    assert one.num_timesteps == four.num_timesteps == 240
    assert one.num_updates == four.num_updates == 141  # steps 100..240, one update each
    assert four.timing["plans"] == 140 // 4  # one batched plan per lock-step after the seed steps
    obs, nxt = _streams(four)  # [60, 4, O]
    done = four.buffer._done[: four.buffer.size].reshape(-1, 4)
    # within a copy, each step starts where the last ended, except at episode starts
    continues = ~done[:-1]
    assert np.array_equal(obs[1:][continues], nxt[:-1][continues])
    assert done[49].all() and done.sum() == 4  # 50-step episodes
    # the copies are distinct episodes: their first observations differ
    assert len({tuple(o) for o in obs[0].round(6).tolist()}) == 4
    assert copy_seed(1, 0) == 1 and len({copy_seed(1, i) for i in range(4)}) == 4


def test_async_copies_give_the_sync_run_bit_for_bit():
    states = []
    for mode in ("sync", "async"):  # each built and run in turn (the global RNG is seeded once)
        agent = _agent(steps=300, num_envs=3, vector_env=mode)
        trainer = Trainer(agent)
        trainer.run(300)
        trainer.close()
        states.append(agent.state_dict())
    assert_same_state(*states)


@pytest.mark.parametrize(
    "env_id,stop_after,checkpoint_every",
    [("Pendulum-v1", 150, 1000), ("InvertedPendulum-v5", 90, 60)],
)
def test_stop_and_resume_with_copies_equals_an_uninterrupted_run(
    tmp_path, env_id, stop_after, checkpoint_every
):
    """Pendulum's copies end their episodes together; InvertedPendulum's terminate apart, so a
    due checkpoint closes the others' episodes and every copy starts anew, in both runs."""
    train = {"env_id": env_id, "steps": 300, "num_envs": 3, "checkpoint_every": checkpoint_every}
    full = Trainer(_agent(**train), tmp_path / "full")
    assert full.run(300) == "done"
    part = Trainer(_agent(**train), tmp_path / "part")
    assert part.run(300, stop_at_episode_end_after=stop_after) == "stopped"
    held = load_checkpoint(tmp_path / "part" / CHECKPOINT_NAME)
    assert held["agent"]["counters"]["num_timesteps"] >= stop_after
    assert len(held["rng"]["env"]) == 3 and len(held["rng"]["collection_generators"]) == 2
    done = full.agent.buffer._done[: full.agent.buffer.size].reshape(-1, 3)
    apart = (done.any(axis=1) & ~done.all(axis=1)).any()
    assert apart == (env_id == "InvertedPendulum-v5")  # copies out of step: the cut was needed
    resumed = Agent.resume(tmp_path / "part")
    assert resumed.run(300) == "done"
    assert_same_state(full.agent.state_dict(), resumed.agent.state_dict())
    assert full.episode == resumed.episode
    for trainer in (full, part, resumed):
        trainer.close()


def test_the_command_line_takes_num_envs(tmp_path, capsys):
    argv = ["--steps", "200", "--num-envs", "4", "--logdir", str(tmp_path),
            "--train.seed_steps", "100", "--train.max_episode_steps", "50",
            "--train.eval_episodes", "2", "--train.progress", "false",
            "--agent.batch_size", "16", "--planner.horizon", "2"]  # fmt: skip
    code, err, _ = call_main(train_cli.main, argv, capsys)
    assert code == 0, err
    (run,) = tmp_path.iterdir()
    state = load_checkpoint(run / CHECKPOINT_NAME)
    assert state["config"]["train"]["num_envs"] == 4
    assert state["agent"]["buffer"]["streams"] == 4 and state["agent"]["buffer"]["size"] == 200
    for bad, says in [("0", "num_envs"), ("x", "--num-envs")]:
        code, err, _ = call_main(train_cli.main, [*argv[:3], bad, *argv[4:]], capsys)
        assert code == 2 and len(err) == 1 and says in err[0], err
    with pytest.raises(ConfigError, match="vector_env"):
        RunConfig.from_dict({"train": {"vector_env": "threads"}})
