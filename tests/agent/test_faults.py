"""Damaged and foreign inputs, and failing writes (issue: reliability).

A run folder whose checkpoint is truncated, bit-flipped (in a tensor's bytes, in the pickle, in
the zip directory), of an unknown format version, another program's file, or a valid checkpoint
whose episodic memory or prototype pool is missing: each of `agent.train --resume`,
`agent.evaluate` and `agent.diagnose` says so in one line, exits 2 and leaves the folder byte for
byte as it was. A write that fails (a full disk, a read-only folder; injected, since these
machines run as root and permissions stop nothing) stops training with one line and exit 1, and
never leaves a half-written checkpoint or a temporary file behind.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.core.loop import Trainer
from agent.diagnose import main as diagnose_main
from agent.evaluate import main as evaluate_main
from agent.persistence import checkpoint as ckpt
from agent.persistence.checkpoint import (
    CheckpointError,
    RunWriteError,
    content_digest,
    load_checkpoint,
    remove_stale_temporaries,
    save_checkpoint,
)
from agent.persistence.runs import CHECKPOINT_NAME
from agent.train import main as train_main
from tests.agent.conftest import call_main, tiny

# a geodesic agent with the episodic memory and the GSR-routed prototype pool: a checkpoint
# holds both (the model's buffers), so "a missing memory or pool file" is a checkpoint without them
GEODESIC = tiny(train={"world_model": "geodesic", "seed_steps": 30, "max_episode_steps": 25,
                       "checkpoint_every": 25, "eval_episodes": 1})  # fmt: skip
GEODESIC["dynamics"] = {
    "latent_dim": 4,
    "encoder_dim": 16,
    "context": {"prototypes": 8, "memory": "dense", "memory_capacity": 16, "routing": "gsr",
                "pool_capacity": 24, "route_k": 4},
}  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A geodesic run folder checkpointed at env step 50 (two episodes, updates done)."""
    run = tmp_path_factory.mktemp("good") / "run"
    config = RunConfig.from_dict(GEODESIC)
    trainer = Trainer(Agent(None, config), run)
    (run / "config.json").write_text(json.dumps(config.to_dict()))
    assert trainer.run(50, stop_at_episode_end_after=50) == "stopped"
    trainer.close()
    return run


def folder_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def zip_entry_offset(path: Path, pick) -> int:
    """The offset of the middle byte of the zip entry `pick(infolist)` (a tensor's storage,
    the pickle) in the file."""
    with zipfile.ZipFile(path) as zf:
        info = pick(zf.infolist())
    with open(path, "rb") as fh:  # local header: 30 bytes, then the name and the extra field
        fh.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(fh.read(2), "little") for _ in range(2))
    return info.header_offset + 30 + name_len + extra_len + info.file_size // 2


def largest_tensor(infos):
    return max((i for i in infos if "/data/" in i.filename), key=lambda i: i.file_size)


def strip_model_keys(path: Path, word: str) -> None:
    """Re-save a valid checkpoint (digest and all) whose model state lacks every key with
    `word`: the file is intact, its content is not this agent's."""
    state = load_checkpoint(path)
    model = state["agent"]["model"]
    removed = [k for k in model if word in k]
    assert removed, f"no model key with {word!r}"
    state["agent"]["model"] = OrderedDict((k, v) for k, v in model.items() if word not in k)
    save_checkpoint({k: v for k, v in state.items() if k != "format"}, path)


def sb3_zip(path: Path) -> None:
    from stable_baselines3 import SAC

    SAC("MlpPolicy", "Pendulum-v1", learning_starts=0, buffer_size=10).save(path)


DAMAGES = {  # name -> (damage(checkpoint path), what the one line must say)
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "corrupt"),
    "empty file": (lambda p: p.write_bytes(b""), "corrupt"),
    "bit flipped in a tensor": (
        lambda p: flip_byte(p, zip_entry_offset(p, largest_tensor)),
        "does not match its digest",
    ),
    "bit flipped in the pickle (a config value)": (
        lambda p: flip_byte(p, p.read_bytes().index(b"Pendulum-v1")),  # torch stores, no zlib
        "does not match its digest",
    ),
    "bit flipped in the zip directory": (lambda p: flip_byte(p, p.stat().st_size - 30), "corrupt"),
    "format version 99": (
        lambda p: torch.save(
            {**torch.load(p, weights_only=True), "format": "geodesic-rl/agent-checkpoint/v99"}, p
        ),  # fmt: skip
        "format version 99",
    ),
    "no digest in a v3 file": (
        lambda p: torch.save(
            {k: v for k, v in torch.load(p, weights_only=True).items() if k != "digest"}, p
        ),
        "has no content digest",
    ),
    "another program's torch file": (
        lambda p: torch.save({"weights": torch.zeros(3)}, p),
        "not a geodesic-rl agent checkpoint",
    ),
    "a stable-baselines3 zip": (lambda p: sb3_zip(p), "corrupt"),
    "random bytes": (lambda p: p.write_bytes(os.urandom(4096)), "corrupt"),
    "a folder": (lambda p: (p.unlink(), p.mkdir()), "no checkpoint"),
    "no episodic memory": (lambda p: strip_model_keys(p, "memory"), "does not match this agent"),
    "no prototype pool": (lambda p: strip_model_keys(p, "pool"), "does not match this agent"),
}
COMMANDS = {  # name -> (main, argv for a run folder)
    "train --resume": (train_main, lambda run: ["--resume", str(run), "--steps", "50"]),
    "evaluate": (evaluate_main, lambda run: [str(run), "--episodes", "1"]),
    "diagnose": (diagnose_main, lambda run: [str(run)]),
}


@pytest.fixture(scope="module")
def damaged_runs(trained_run, tmp_path_factory) -> dict[str, Path]:
    """A copy of the trained run per damage (each damaged once, shared by the commands)."""
    root = tmp_path_factory.mktemp("damaged")
    runs = {}
    for k, (name, (damage, _)) in enumerate(DAMAGES.items()):
        run = root / f"run{k}"
        shutil.copytree(trained_run, run)
        damage(run / CHECKPOINT_NAME)
        runs[name] = run
    return runs


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_or_foreign_checkpoint_is_one_line_exit_2_and_the_folder_untouched(
    damaged_runs, damage, command, capsys
):
    run, (main, argv) = damaged_runs[damage], COMMANDS[command]
    before = folder_digest(run)
    code, err, _ = call_main(main, argv(run), capsys)
    assert code == 2, (damage, command, err)
    assert len(err) == 1 and err[0].startswith("python -m agent."), err
    assert DAMAGES[damage][1] in err[0], err[0]
    assert "Traceback" not in err[0]
    assert folder_digest(run) == before


def test_the_undamaged_run_resumes_evaluates_and_diagnoses(trained_run, tmp_path, capsys):
    """The control for the damaged copies: the same commands on the intact folder work."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    for main, argv in COMMANDS.values():
        code, err, _ = call_main(main, argv(run), capsys)
        assert code == 0, err


def test_the_content_digest_sees_every_byte_and_value_and_survives_a_round_trip(tmp_path):
    state = {
        "model": OrderedDict(w=torch.randn(3, 2), flag=torch.tensor(True)),
        "half": torch.ones(4, dtype=torch.bfloat16),
        "optim": {0: {"step": 3, "exp_avg": torch.zeros(2)}},
        "loop": {"last_eval": (1.5, float("nan")), "episode": 7, "names": ["a", "b"]},
    }
    digest = content_digest(state)
    torch.save(state, tmp_path / "s.pt")
    assert content_digest(torch.load(tmp_path / "s.pt", weights_only=True)) == digest
    changed = [
        {**state, "half": state["half"].clone().index_fill_(0, torch.tensor([2]), 2.0)},
        {**state, "loop": {**state["loop"], "episode": 8}},
        {**state, "loop": {**state["loop"], "last_eval": [1.5, float("nan")]}},  # tuple -> list
        {**state, "model": OrderedDict(w=state["model"]["w"].reshape(2, 3), flag=torch.tensor(1))},
    ]
    for other in changed:
        assert content_digest(other) != digest
    w = state["model"]["w"].clone()
    w.view(-1).view(torch.int32)[4] ^= 1  # one bit of one float
    assert content_digest({**state, "model": OrderedDict(w=w, flag=torch.tensor(True))}) != digest


# ----------------------------------------------------------------------- failing writes


def _full_disk(content, fh):
    """torch.save on a disk that fills up half-way through the file."""
    fh.write(b"PK\x03\x04" + b"\0" * 4096)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _read_only_open(path, *args, **kwargs):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("full disk", "No space left on device"), ("read-only folder", "Read-only file system")],
)
def test_a_failed_checkpoint_write_stops_training_and_keeps_the_last_checkpoint(
    trained_run, tmp_path, monkeypatch, fault, reason
):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    saved = (run / CHECKPOINT_NAME).read_bytes()
    trainer = Agent.resume(run)
    if fault == "full disk":
        monkeypatch.setattr(ckpt.torch, "save", _full_disk)
    else:
        monkeypatch.setattr(ckpt, "open", _read_only_open, raising=False)
    with pytest.raises(RunWriteError) as err:
        trainer.run(200)  # the next checkpoint, at the episode end at env step 75, fails
    message = str(err.value)
    assert "\n" not in message and reason in message, message
    assert "training stopped at env step 75; --resume continues from env step 50" in message
    assert (run / CHECKPOINT_NAME).read_bytes() == saved
    assert not list(run.glob(".tmp-*"))
    trainer.close()


def test_the_command_line_says_a_write_failed_in_one_line_and_exits_1(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "tiny.json").write_text(json.dumps(tiny(train={"steps": 120})))
    monkeypatch.setattr(ckpt.torch, "save", _full_disk)
    argv = ["--config", str(tmp_path / "tiny.json"), "--logdir", str(tmp_path / "runs")]
    code, err, _ = call_main(train_main, argv, capsys)
    assert code == 1
    (line,) = [e for e in err if "error" in e]
    assert line.startswith("python -m agent.train: error: could not write")
    assert "No space left on device" in line and "no checkpoint had been written" in line
    (run,) = (tmp_path / "runs").iterdir()
    assert not (run / CHECKPOINT_NAME).exists() and not list(run.glob(".tmp-*"))


def test_a_killed_writers_temporary_is_removed_by_the_next_save(tmp_path):
    """A kill mid-write leaves `.tmp-PID-checkpoint.pt` (os.replace never ran); the next
    save in that folder removes it, and leaves a live writer's temporary alone."""
    dead = 2**22 + 1  # above Linux's largest pid (kernel.pid_max <= 2**22): never alive
    stale = tmp_path / f".tmp-{dead}-{CHECKPOINT_NAME}"
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / f".tmp-{os.getppid()}-{CHECKPOINT_NAME}"
    live.write_bytes(b"another process writing")
    save_checkpoint({"x": torch.ones(2)}, tmp_path / CHECKPOINT_NAME)
    assert not stale.exists() and live.exists()
    assert torch.equal(load_checkpoint(tmp_path / CHECKPOINT_NAME)["x"], torch.ones(2))
    assert remove_stale_temporaries(tmp_path / CHECKPOINT_NAME) == []


def test_a_checkpoint_error_is_one_line(tmp_path):
    path = tmp_path / CHECKPOINT_NAME
    save_checkpoint({"x": torch.ones(1000)}, path)
    flip_byte(path, zip_entry_offset(path, largest_tensor))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and "does not match its digest" in str(err.value)


def test_compare_says_a_results_write_failed_in_one_line_and_exits_1(tmp_path, monkeypatch, capsys):
    from agent.compare import main as compare_main

    (tmp_path / "tiny.json").write_text(json.dumps(tiny()))
    replace = os.replace

    def full_disk(src, dst):  # every atomically replaced file: checkpoints, records, results
        if Path(dst).name == "results.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", full_disk)
    argv = ["--world-models", "gru", "--no-sac", "--seeds", "1", "--steps", "60", "--at", "60",
            "--episodes", "1", "--config", str(tmp_path / "tiny.json")]  # fmt: skip
    argv += ["--out", str(tmp_path / "cmp")]
    code, err, _ = call_main(compare_main, argv, capsys)
    assert code == 1, err
    (line,) = [e for e in err if "error" in e]
    assert line.startswith("python -m agent.compare: error: could not write")
    assert "results.json" in line and "No space left on device" in line
    assert not list((tmp_path / "cmp").rglob(".tmp-*"))
