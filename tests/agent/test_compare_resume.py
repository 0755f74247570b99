"""`agent.compare --resume`: a comparison killed with SIGKILL mid-run continues from its run
records and checkpoints, and ends with the results, buffer and weights of an uninterrupted
comparison of the same settings; SAC continues from its last evaluation point."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from agent import compare
from agent.persistence.checkpoint import load_checkpoint
from agent.persistence.runs import CHECKPOINT_NAME
from tests.agent.conftest import call_main, tiny
from tests.conftest import ROOT, child_env


def _settings(config: Path) -> list[str]:
    return ["--seeds", "1", "--steps", "300", "--at", "100", "200", "--episodes", "1",
            "--config", str(config)]  # fmt: skip


def _kill_when(args: list[str], out: Path, has_point: bool, after: int) -> Path:
    """Run `agent.compare ARGS --out OUT` and SIGKILL it once the GRU run's record has (or, with
    has_point False, has not yet) a point and its checkpoint is past `after` steps; returns the
    run's record."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.compare", "--world-models", "gru", *args, "--out", str(out)],
        cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            records = list(out.glob("runs/*__gru__*/compare_run.json"))
            checkpoint = records[0].parent / CHECKPOINT_NAME if records else None
            if checkpoint and checkpoint.is_file():
                state = load_checkpoint(checkpoint)
                points = json.loads(records[0].read_text())["points"]
                if (
                    bool(points) == has_point
                    and state["agent"]["counters"]["num_timesteps"] > after
                ):
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the run never reached the state to kill it in within 300 s")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return records[0]


@pytest.mark.slow
def test_a_killed_comparison_resumes_to_the_uninterrupted_result(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny(train={"checkpoint_every": 50})))
    out = tmp_path / "killed"
    record = _kill_when(_settings(config), out, has_point=True, after=100)
    killed_at = json.loads(record.read_text())
    assert killed_at["status"] == "running" and killed_at["points"][0]["step"] == 100

    code, err, _ = call_main(compare.main, ["--resume", str(out)], capsys)
    assert code == 0, err
    assert any("continuing from its last checkpoint" in line for line in err)
    fresh = tmp_path / "fresh"
    code, err, _ = call_main(
        compare.main, ["--world-models", "gru", *_settings(config), "--out", str(fresh)], capsys
    )
    assert code == 0, err

    resumed, uninterrupted = (json.loads((d / "results.json").read_text()) for d in (out, fresh))
    assert resumed["status"] == "done" and len(resumed["meta"]["resumed"]) == 1
    by_method = lambda results: {r["method"]: r for r in results["runs"]}  # noqa: E731
    a, b = by_method(resumed), by_method(uninterrupted)
    assert set(a) == {"gru", "sac"}
    for method in ("gru", "sac"):
        assert a[method]["status"] == "done"
        assert [p["step"] for p in a[method]["points"]] == [100, 200, 300]
    # the agent: the same returns at every point, the same buffer and weights at the end
    assert [p["returns"] for p in a["gru"]["points"]] == [p["returns"] for p in b["gru"]["points"]]
    assert a["gru"]["points"][-1]["train_s"] > a["gru"]["points"][0]["train_s"] > 0
    mine, theirs = (
        load_checkpoint(Path(r["gru"]["run_dir"]) / CHECKPOINT_NAME)["agent"] for r in (a, b)
    )
    for key in ("obs", "action", "reward", "next_obs"):
        assert np.array_equal(mine["buffer"][key], theirs["buffer"][key]), key
    for name, tensor in theirs["model"].items():
        assert np.array_equal(mine["model"][name], tensor), name

    # nothing left to do: a second resume trains nothing and keeps every number
    code, err, _ = call_main(compare.main, ["--resume", str(out)], capsys)
    assert code == 0 and not any("steps in" in line for line in err)
    again = json.loads((out / "results.json").read_text())
    assert again["runs"] == resumed["runs"]


@pytest.mark.slow
def test_a_comparison_killed_before_its_first_point_resumes_from_the_checkpoint(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny(train={"checkpoint_every": 20})))
    settings = ["--no-sac", "--seeds", "1", "--steps", "150", "--at", "150", "--episodes", "1",
                "--config", str(config)]  # fmt: skip
    out = tmp_path / "killed"
    _kill_when(settings, out, has_point=False, after=20)
    assert json.loads((out / "results.json").read_text())["status"] == "running"

    code, err, _ = call_main(compare.main, ["--resume", str(out)], capsys)
    assert code == 0, err
    assert any("gru seed 1: continuing from its last checkpoint" in line for line in err)
    fresh = tmp_path / "fresh"
    code, err, _ = call_main(
        compare.main, ["--world-models", "gru", *settings, "--out", str(fresh)], capsys
    )
    assert code == 0, err
    (a,), (b,) = (json.loads((d / "results.json").read_text())["runs"] for d in (out, fresh))
    assert a["status"] == "done" and [p["step"] for p in a["points"]] == [150]
    assert a["points"][0]["returns"] == b["points"][0]["returns"]


def test_resume_refuses_other_flags_and_foreign_folders(tmp_path, capsys):
    code, err, _ = call_main(compare.main, ["--resume", str(tmp_path)], capsys)
    assert code == 2 and err == [
        f"python -m agent.compare: error: --resume {str(tmp_path)!r}: no comparison there "
        "(no results.json)"
    ]
    (tmp_path / "results.json").write_text('{"format": "something else"}')
    code, err, _ = call_main(compare.main, ["--resume", str(tmp_path)], capsys)
    assert code == 2 and "is not a comparison's" in err[0]
    code, err, _ = call_main(compare.main, ["--resume", str(tmp_path), "--seeds", "2"], capsys)
    assert code == 2 and err[0].endswith("leave out --seeds") and len(err) == 1


def test_sac_continues_from_the_model_and_replay_buffer_of_its_last_point(tmp_path):
    from stable_baselines3 import SAC

    from agent.comparison.config import CompareConfig
    from agent.comparison.runner import SAC_MODEL, SAC_REPLAY, train_sac

    config = CompareConfig(
        world_models=(), steps=300, points=(150, 300), episodes=1,
        overrides={"train": {"max_episode_steps": 50, "progress": False}},
    )  # fmt: skip
    points = []
    assert train_sac(config, 1, tmp_path, lambda p: points.append(p) or False) == "stopped"
    assert [p.step for p in points] == [150]
    assert SAC.load(tmp_path / SAC_MODEL).num_timesteps == 150

    status = train_sac(config, 1, tmp_path, points.append, resume_from=points[0])
    assert status == "done" and [p.step for p in points] == [150, 300]
    assert points[1].train_s > points[0].train_s
    model = SAC.load(tmp_path / SAC_MODEL)
    model.load_replay_buffer(tmp_path / SAC_REPLAY)
    assert model.num_timesteps == 300 and model.replay_buffer.size() == 300


def test_a_point_whose_evaluation_was_killed_is_evaluated_when_the_run_resumes(tmp_path, capsys):
    """The checkpoint at an episode end is written before that step's evaluation point: a kill
    during the evaluation leaves a checkpoint at the point's step and no point in the record
    (made here by taking the last point out of a finished run's records). The resume evaluates
    it before training on, with the uninterrupted run's returns."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny(train={"checkpoint_every": 50})))
    settings = ["--no-sac", "--seeds", "1", "--steps", "200", "--at", "100", "200",
                "--episodes", "2", "--config", str(config)]  # fmt: skip
    out = tmp_path / "killed"
    code, err, _ = call_main(
        compare.main, ["--world-models", "gru", *settings, "--out", str(out)], capsys
    )
    assert code == 0, err
    finished = json.loads((out / "results.json").read_text())
    (record_path,) = out.glob("runs/*__gru__*/compare_run.json")
    record = json.loads(record_path.read_text())
    assert (
        load_checkpoint(record_path.parent / CHECKPOINT_NAME)["agent"]["counters"]["num_timesteps"]
        == 200
    )
    record["points"], record["status"] = record["points"][:1], "interrupted"
    record_path.write_text(json.dumps(record))
    results = json.loads(json.dumps(finished))
    results["status"] = "interrupted"
    results["runs"][0].update(points=record["points"], status="interrupted")
    (out / "results.json").write_text(json.dumps(results))

    code, err, _ = call_main(compare.main, ["--resume", str(out)], capsys)
    assert code == 0, err
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["status"] == "done" and [p["step"] for p in run["points"]] == [100, 200]
    assert run["points"][1]["returns"] == finished["runs"][0]["points"][1]["returns"]
