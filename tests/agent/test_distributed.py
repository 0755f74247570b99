"""Data-parallel training (agent/core/distributed.py, world_model/sharding.py) on 2 gloo processes:
a few updates on 2 ranks give the parameters of one process updating on the union of their
batches (the GRU agent, and the geodesic one with its stochastic thermostat, HIDA memory and a
GSR-routed pool that DMG grows); `torchrun` trains, rank 0 alone writes, and the checkpoint of
2 ranks resumes on 1 process with both ranks' env copies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agent.core.agent import Agent
from agent.core.config import ConfigError, RunConfig
from agent.core.distributed import DistContext, rank_device, run_local_ranks
from tests.conftest import child_env
from world_model import sharding

from .conftest import tiny

WORLD = 2
UPDATES = 3

GEODESIC = {
    "train": {"world_model": "geodesic"},
    "dynamics": {
        "latent_dim": 4,
        "context": {
            "routing": "gsr", "prototypes": 4, "pool_capacity": 8, "route_k": 2,
            "spawn_sigmas": 0.05, "spawn_window": 16, "memory": "dense",
            "memory_capacity": 8, "window": 2, "feature_dim": 8,
        },
    },
}  # fmt: skip
CASES = {"gru": {}, "geodesic": GEODESIC}


def _config(name: str, num_envs: int) -> RunConfig:
    data = tiny(train={"num_envs": num_envs, **CASES[name].get("train", {})})
    if name == "geodesic":
        data["dynamics"] = GEODESIC["dynamics"]
    return RunConfig.from_dict(data)


def _fill(agent: Agent, steps: int = 120) -> None:
    """The same transitions of 2 streams in every process (25-step episodes)."""
    rng = np.random.default_rng(7)
    for t in range(steps):
        obs = rng.normal(size=(2, agent.obs_dim)).astype(np.float32)
        nxt = rng.normal(size=(2, agent.obs_dim)).astype(np.float32)
        act = rng.uniform(-1, 1, size=(2, agent.action_dim)).astype(np.float32)
        end = np.full(2, (t + 1) % 25 == 0)
        agent.observe_batch(obs, act, rng.normal(size=2), nxt, np.zeros(2, bool), end)


def _trained_state(agent: Agent) -> dict[str, torch.Tensor]:
    _fill(agent)
    for _ in range(UPDATES):
        agent.update()
    return {**agent.model.state_dict(), "scale": agent.scale.value.clone()}


def _worker(rank: int, name: str) -> dict[str, torch.Tensor]:
    return _trained_state(Agent(None, _config(name, 1), dist=DistContext(rank, WORLD)))


@pytest.mark.parametrize("name", list(CASES))
def test_updates_on_two_ranks_equal_one_process_on_the_union_batch(name):
    ranks = run_local_ranks(_worker, WORLD, (name,))
    one = _trained_state(Agent(None, _config(name, 2)))  # 2 streams, the whole batch
    fresh = Agent(None, _config(name, 2)).model.state_dict()
    moved = 0
    for key, value in one.items():
        for rank in ranks:  # the ranks agree bit for bit: the same averaged gradient
            torch.testing.assert_close(rank[key], ranks[0][key], rtol=0, atol=0, msg=key)
        torch.testing.assert_close(ranks[0][key], value, rtol=1e-4, atol=1e-5, msg=key)
        if key in fresh and fresh[key].shape == value.shape and value.is_floating_point():
            moved += int(not torch.equal(fresh[key], value))
    assert moved > 10  # the updates changed the model: the comparison is not of initial values
    if name == "geodesic":  # DMG grew the pool from the gathered batch, alike on both ranks
        key = next(k for k in one if k.endswith("pool.active"))
        assert one[key].sum() > 4 and torch.equal(ranks[0][key], one[key])


def test_union_noise_is_the_single_process_draw():
    torch.manual_seed(3)
    whole = torch.randn(5, 6, 2)
    parts = []
    for rank in range(WORLD):
        torch.manual_seed(3)
        with sharding.batch_shard(rank, WORLD):
            parts.append(sharding.randn((5, 3, 2), whole, batch_dim=1))
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=0, atol=0)
    torch.manual_seed(3)
    assert torch.equal(sharding.randn((5, 6, 2), whole), whole)  # outside a shard: plain


def test_bad_world_sizes_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="multiple of the world size 3"):
        Agent(None, RunConfig.from_dict(tiny()), dist=DistContext(0, 3))  # batch 16
    agent = Agent(None, RunConfig.from_dict(tiny(train={"num_envs": 2, "steps": 100})))
    agent.learn(100, log_dir=tmp_path)
    with pytest.raises(ConfigError, match="2 env copies.*not 3"):
        Agent.resume(tmp_path, dist=DistContext(0, 3))


@pytest.mark.parametrize(
    ("device", "gpus", "want"),
    [("auto", 0, "cpu"), ("auto", 1, "cpu"), ("auto", 2, "cuda:1"), ("cuda", 4, "cuda:1")]
    + [("cpu", 2, "cpu"), ("cuda:0", 1, "cuda:0"), ("cuda", 1, None)],
)
def test_each_torchrun_rank_takes_a_gpu_of_its_own_or_none_does(monkeypatch, device, gpus, want):
    """Rank 1 of 2 on this machine: NCCL takes one GPU per rank, so 'auto' falls back to the CPU
    (gloo) where the GPUs are fewer than the ranks, and 'cuda' says so in one line."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    if want is None:
        with pytest.raises(ConfigError, match="2 ranks on this machine but 1 CUDA device"):
            rank_device(device)
    else:
        assert rank_device(device) == want


def _torchrun(args: list[str], tmp: Path, nproc: int = WORLD) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", "-m", "agent.train", *args]
    env = child_env(OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def test_torchrun_trains_and_its_checkpoint_resumes_on_one_process(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny(train={"eval_every": 0})))
    logdir = tmp_path / "runs"
    done = _torchrun(["--config", str(config), "--steps", "300", "--logdir", str(logdir)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = logdir.iterdir()
    assert "done at step 300 after" in done.stderr and "on 2 ranks" in done.stderr
    assert len(list(run.glob("events.out.tfevents.*"))) == 1  # rank 0 alone writes
    assert json.loads((run / "meta.json").read_text())["world_size"] == WORLD
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    buffer = state["agent"]["buffer"]
    assert buffer["streams"] == 2 and buffer["size"] == 300  # both ranks' transitions
    assert state["agent"]["counters"]["num_timesteps"] == 300
    # rank 1's copy: its own env stream, its own planner generator (not rank 0's)
    assert len(state["rng"]["env"]) == 2 and state["rng"]["env"][0] != state["rng"]["env"][1]
    (rank1_generator,) = state["rng"]["collection_generators"]
    assert not torch.equal(rank1_generator, state["agent"]["generator"])
    obs = buffer["obs"].view(-1, 2, buffer["obs"].shape[-1])
    assert not torch.equal(obs[:, 0], obs[:, 1])  # two distinct episodes per step
    # the 2-rank checkpoint loads in one process (its buffer's two streams: two copies)
    assert Agent.load(run / "checkpoint.pt").config.train.num_envs == 2
    ev = subprocess.run(
        [sys.executable, "-m", "agent.evaluate", str(run), "--episodes", "2"],
        cwd=tmp_path, env=child_env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert ev.returncode == 0 and "over 2 deterministic episodes" in ev.stdout, ev.stderr[-3000:]

    resumed = subprocess.run(
        [sys.executable, "-m", "agent.train", "--resume", str(run), "--steps", "400"],
        cwd=tmp_path, env=child_env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = torch.load(run / "checkpoint.pt", weights_only=True)
    assert after["config"]["train"]["num_envs"] == 2  # one process runs both copies
    assert after["agent"]["counters"]["num_timesteps"] == 400
    kept = after["agent"]["buffer"]["obs"][:300]
    assert torch.equal(kept, buffer["obs"])  # the 2-rank data, continued
