"""Tiny configurations for the agent tests: every component real, sizes cut to seconds."""

from __future__ import annotations

import copy
import math

import pytest
import torch

# RunConfig overrides by section: 50-step Pendulum episodes, 16-wide networks, 32 MPPI samples.
TINY = {
    "train": {
        "max_episode_steps": 50,
        "seed_steps": 60,
        "eval_every": 0,
        "eval_episodes": 1,
        "checkpoint_every": 100,
        "log_every": 50,
        "diagnostics_every": 40,
        "figures": False,  # the end-of-run figures cost seconds; tests/agent/test_figures.py
        "progress": False,
        "device": "cpu",
    },
    "agent": {"batch_size": 16, "pretrain_updates": 0},
    "loss": {"horizon": 2},
    "planner": {
        "horizon": 2,
        "iterations": 2,
        "num_samples": 32,
        "num_elites": 4,
        "num_pi_trajs": 4,
    },
    "model": {"hidden_dim": 16, "hidden_layers": 1, "num_bins": 11},
    "dynamics": {"latent_dim": 16, "encoder_dim": 16, "input_dim": 16},
}


def call_main(main, argv: list[str], capsys) -> tuple[int, list[str], str]:
    """Call a CLI's main(argv) in-process: (exit code, stderr lines, stdout); argparse's
    SystemExit is read as the exit code."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.err.strip().splitlines(), captured.out


def tiny(**sections) -> dict:
    """TINY with some sections' keys overridden: tiny(train={"steps": 300})."""
    out = copy.deepcopy(TINY)
    for name, values in sections.items():
        out.setdefault(name, {}).update(values)
    return out


@pytest.fixture
def tiny_config():
    from agent.core.config import RunConfig

    return RunConfig.from_dict(tiny())


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """One torch thread, as the agent runs (TrainConfig.single_thread): with other processes on
    the 2 cores, 2 threads made these small networks ~15x slower. Not restored: raising the count
    again would call torch.set_num_threads(2), which this project never does (PyTorch #142815)."""
    torch.set_num_threads(1)


def assert_same_state(a: dict, b: dict, path: str = "") -> None:
    """Bitwise equality of nested state dicts (tensors, numbers, strings, containers)."""
    assert type(a) is type(b), path
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path
