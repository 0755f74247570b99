"""The command lines: `python -m agent.train` (a short run read back with TensorBoard's own event
reader, resume continuing the same curves, Ctrl-C), `python -m agent.evaluate` (returns and a
video), and bad input: exit code 2, one line on stderr, no traceback, no run folder left."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import imageio.v2 as imageio
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agent import evaluate as evaluate_cli
from agent import train as train_cli
from agent.core.agent import Agent
from agent.core.config import ConfigError, RunConfig, TrainConfig, field_docs
from agent.persistence.checkpoint import load_checkpoint
from agent.persistence.runs import CHECKPOINT_NAME
from tests.agent.conftest import call_main, tiny
from tests.conftest import ROOT, child_env


def write_config(path: Path, **sections) -> Path:
    path.write_text(json.dumps(tiny(**sections)))
    return path


def run_cli(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = child_env()
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def scalars(events: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


@pytest.mark.slow
def test_short_run_resume_and_evaluate(tmp_path):
    config = write_config(tmp_path / "tiny.json", train={"eval_every": 100})
    logdir = tmp_path / "runs"
    done = run_cli(
        "agent.train",
        "--steps",
        "150",
        "--seed",
        "3",
        "--logdir",
        str(logdir),
        "--config",
        str(config),
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (run,) = logdir.iterdir()
    assert run.name.startswith("Pendulum-v1__gru__3__")
    saved = json.loads((run / "config.json").read_text())
    assert saved["train"]["steps"] == 150 and saved["planner"]["num_samples"] == 32
    meta = json.loads((run / "meta.json").read_text())
    assert meta["versions"]["torch"] == torch.__version__
    assert len(meta["git"]["commit"]) == 40 and isinstance(meta["git"]["dirty"], bool)

    events = EventAccumulator(str(run), size_guidance={"scalars": 0, "tensors": 0}).Reload()
    tags = events.Tags()
    for tag in (
        "charts/episodic_return",
        "charts/episodic_length",
        "losses/world_model",
        "losses/consistency",
        "losses/value",
        "losses/pi",
        "planner/elite_value",
        "perf/steps_per_second",
        "perf/plan_hz",
        "perf/update_ms",
        "eval/mean_return",
    ):
        assert tag in tags["scalars"], tag
    assert "config/text_summary" in tags["tensors"]
    returns = scalars(events, "charts/episodic_return")
    assert [s for s, _ in returns] == [50, 100, 150]
    assert all(-16.3 * 50 <= r <= 0 for _, r in returns)
    assert [s for s, _ in scalars(events, "eval/mean_return")] == [100, 150]

    resumed = run_cli("agent.train", "--resume", str(run), "--steps", "250")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and "step 150" in resumed.stderr
    events = EventAccumulator(str(run), size_guidance={"scalars": 0}).Reload()
    assert [s for s, _ in scalars(events, "charts/episodic_return")] == [50, 100, 150, 200, 250]
    assert [s for s, _ in scalars(events, "eval/mean_return")] == [100, 150, 200, 250]
    assert load_checkpoint(run / CHECKPOINT_NAME)["agent"]["counters"]["num_timesteps"] == 250
    assert "resumed" in json.loads((run / "meta.json").read_text())

    ev = run_cli("agent.evaluate", str(run), "--episodes", "2")
    assert ev.returncode == 0, ev.stderr
    line = ev.stdout.splitlines()[0]
    assert line.startswith("Pendulum-v1: return ") and "over 2 deterministic episodes" in line
    mean = float(line.split("return ")[1].split(" ")[0])
    assert -16.3 * 50 <= mean <= 0

    video = run_cli("agent.evaluate", str(run), "--episodes", "1", "--video")
    if importlib.util.find_spec("pygame") is None:  # Pendulum renders through pygame
        assert video.returncode == 2
        (err,) = video.stderr.strip().splitlines()
        assert "cannot render here" in err and "pygame" in err
    else:
        assert video.returncode == 0, video.stderr
        assert "(51 frames)" in video.stdout  # the reset frame and one per step of 50
        path = next((run / "videos").iterdir())
        if path.suffix == ".gif":  # Pillow merges identical consecutive frames when it writes
            frames = imageio.mimread(path)
            assert 40 <= len(frames) <= 51 and frames[0].ndim == 3


@pytest.mark.slow
def test_ctrl_c_writes_a_checkpoint_and_the_run_resumes(tmp_path):
    config = write_config(tmp_path / "tiny.json", train={"checkpoint_every": 50})
    logdir = tmp_path / "runs"
    env = child_env()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.train",
            "--steps",
            "100000",
            "--logdir",
            str(logdir),
            "--config",
            str(config),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 180
        while time.time() < deadline:  # the first periodic checkpoint: training is under way
            if logdir.exists() and any((r / CHECKPOINT_NAME).exists() for r in logdir.iterdir()):
                break
            time.sleep(0.5)
        else:
            pytest.fail("no checkpoint within 180 s")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "resume with" in stderr
    (run,) = logdir.iterdir()
    state = load_checkpoint(run / CHECKPOINT_NAME)
    steps = state["agent"]["counters"]["num_timesteps"]
    assert steps >= 50 and state["agent"]["buffer"]["size"] == steps
    assert state["loop"]["needs_reset"] is True
    trainer = Agent.resume(run)
    assert trainer.run(steps + 60) == "done"
    assert trainer.agent.num_timesteps == steps + 60
    trainer.close()


def test_bad_input_in_a_real_process_is_one_line_and_exit_2(tmp_path):
    out = run_cli("agent.train", "--env", "NoSuchEnv-v0", "--logdir", str(tmp_path / "runs"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown environment id 'NoSuchEnv-v0'" in lines[0]
    assert not (tmp_path / "runs").exists()


def _bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    bad_key = tmp_path / "bad_key.json"
    bad_key.write_text(json.dumps({"planner": {"samples": 10}}))
    bad_value = tmp_path / "bad_value.toml"
    bad_value.write_text("[agent]\nlr = -1.0\n")
    corrupt = tmp_path / "corrupt_run"
    corrupt.mkdir()
    (corrupt / CHECKPOINT_NAME).write_bytes(b"PK\x03\x04 truncated zip")
    cases = [
        (["--env", "NoSuchEnv-v0"], "unknown environment id"),
        (["--env", "CartPole-v1"], "discrete"),
        (["--steps", "-5"], "train.steps must be a positive integer"),
        (["--steps", "abc"], "invalid int value"),
        (["--world-model", "nope"], "unknown world model 'nope'; available: "),
        (["--config", str(bad_key)], "unknown key 'samples' in [planner]"),
        (["--config", str(bad_value)], "agent.lr must be > 0"),
        (["--config", str(tmp_path / "missing.json")], "does not exist"),
        (["--resume", str(corrupt)], "corrupt or unreadable"),
        (["--resume", str(tmp_path / "nowhere")], "no checkpoint"),
        (["--resume", str(corrupt), "--env", "Pendulum-v1"], "cannot be given with it"),
        (["--resume", str(corrupt), "--num-envs", "2"], "--num-envs cannot be given with it"),
        (["--device", "tpu"], "train.device"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "CUDA is not available"))
    return cases


def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, capsys):
    logdir = tmp_path / "runs"
    for argv, expected in _bad_cases(tmp_path):
        argv = [*argv, "--logdir", str(logdir)] if "--resume" not in argv else argv
        code, lines, _ = call_main(train_cli.main, argv, capsys)
        assert code == 2, (argv, lines)
        assert len(lines) == 1 and expected in lines[0], (argv, lines)
    assert not logdir.exists()  # no run folder for a run that never started


def test_evaluate_explore_adds_the_planners_noise_on_the_same_episodes(tmp_path, capsys):
    """Deterministic evaluation repeats itself; --explore plans the same episodes with the
    exploration noise, so its returns differ, and repeat themselves too (seeded)."""
    agent = Agent("Pendulum-v1", RunConfig.from_dict(tiny(train={"max_episode_steps": 30})))
    agent.learn(60)
    agent.save(tmp_path / "agent.pt")

    def returns(*flags: str) -> tuple[str, float]:
        code, err, out = call_main(
            evaluate_cli.main, [str(tmp_path / "agent.pt"), "--episodes", "3", *flags], capsys
        )
        assert code == 0, err
        line = out.splitlines()[0]
        return line.split(" over ")[1], float(line.split("return ")[1].split(" ")[0])

    plain, explored = returns(), returns("--explore")
    assert plain == returns() and explored == returns("--explore")
    assert plain[0].startswith("3 deterministic") and explored[0].startswith("3 exploring")
    assert plain[1] != explored[1]


def test_evaluate_bad_input(tmp_path, capsys):
    corrupt = tmp_path / "run"
    corrupt.mkdir()
    (corrupt / CHECKPOINT_NAME).write_text("nonsense")
    assert evaluate_cli.main([str(corrupt)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corrupt" in err[0]
    assert evaluate_cli.main([str(corrupt), "--episodes", "0"]) == 2


def test_help_documents_every_flag():
    # argparse wraps at hyphens too ("update-to-" / "data"): joined lines lose that space
    text = " ".join(train_cli.build_parser().format_help().split()).replace("- ", "-")
    docs = field_docs(TrainConfig)
    for flag, path in train_cli.ALIASES.items():
        assert f"--{flag.replace('_', '-')}" in text
        section, field = path.split(".", 1)
        if section == "train":
            assert " ".join(docs[field].split()).replace("- ", "-") in text
    for flag in ("--resume", "--config"):
        assert flag in text


@pytest.mark.parametrize("world_model", ["gru", "geodesic"])
def test_every_config_field_is_a_flag_listed_by_help(world_model, capsys):
    """`--world-model X --help` lists a generated flag for every field of every section of X's
    config, with its docstring; each one sets its field (read back from the parsed config)."""
    from agent.cli import parse_value
    from agent.core.config import SECTIONS

    parser = train_cli.build_parser(world_model)
    text = " ".join(parser.format_help().split())
    config = RunConfig.from_dict({"train": {"world_model": world_model}})
    sections = {**SECTIONS, "dynamics": type(config.dynamics)}
    checked = 0

    def walk(prefix: str, cls: type) -> None:
        nonlocal checked
        docs, hints = field_docs(cls), typing.get_type_hints(cls)
        for name in (f.name for f in dataclasses.fields(cls)):
            if dataclasses.is_dataclass(hints[name]):  # a nested table: its own fields
                walk(f"{prefix}.{name}", hints[name])
                continue
            assert f"--{prefix}.{name} " in text, (prefix, name)
            assert " ".join(docs[name].split())[:40] in text, (prefix, name)
            checked += 1

    for section, cls in sections.items():
        walk(section, cls)
    assert checked >= (80 if world_model == "geodesic" else 50)
    # a flag sets its field, after the --config file and before the short aliases
    args = parser.parse_args(
        ["--world-model", world_model, "--planner.horizon", "4", "--agent.discount", "none",
         "--train.single_thread", "false", "--train.steps", "7", "--steps", "9"]
    )  # fmt: skip
    config = train_cli.config_from_args(args)
    assert config.planner.horizon == 4 and config.agent.discount is None
    assert config.train.single_thread is False and config.train.steps == 9
    assert parse_value("1e-3", float) == 1e-3
    assert parse_value("1.0, 0.01", tuple[float, float]) == (1.0, 0.01)
    with pytest.raises(ValueError, match="is not"):
        parse_value("1,2,3", tuple[float, float])
    code, lines, _ = call_main(train_cli.main, ["--planner.horizon", "four"], capsys)
    assert code == 2 and len(lines) == 1 and "--planner.horizon: 'four' is not int" in lines[0]


def test_dynamics_section_is_checked_against_the_world_model_flag(tmp_path):
    """`--world-model geodesic --config f.toml` with geodesic keys in [dynamics] is accepted;
    a key the chosen world model does not have is one clear line, exit 2."""
    from agent.train import build_parser, config_from_args

    good = tmp_path / "geo.toml"
    good.write_text('[dynamics.integrator]\nforce = "field"\n')
    args = build_parser().parse_args(
        ["--world-model", "geodesic", "--config", str(good), "--attention", "krr"]
    )
    config = config_from_args(args)
    assert config.dynamics.integrator.force == "field" and config.dynamics.head.kernel == "krr"
    bad = run_cli("agent.train", "--config", str(good), "--steps", "10")  # GRU has no force
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "unknown key 'integrator' in [dynamics]" in bad.stderr


def test_one_config_file_serves_every_world_model_through_its_own_sub_table():
    """configs/dmc.toml holds keys for every world model in [dynamics] and the GRU's own in
    [dynamics.gru]: `agent.train --config configs/dmc.toml` reads it for either world model (the
    GRU gets its latent of 256, the geodesic model its own latent and the shared encoder); a
    world model's sub-table never reaches another (the geodesic has no `hidden` key)."""
    from agent.train import build_parser, config_from_args

    dmc = Path(__file__).resolve().parents[2] / "configs" / "dmc.toml"
    configs = {
        name: config_from_args(
            build_parser().parse_args(["--world-model", name, "--config", str(dmc)])
        )
        for name in ("gru", "geodesic")
    }
    gru, geodesic = configs["gru"].dynamics, configs["geodesic"].dynamics
    assert (gru.latent_dim, gru.encoder_dim, gru.encoder_layers) == (256, 256, 2)
    assert (geodesic.encoder_dim, geodesic.encoder_layers) == (256, 2)
    assert geodesic.latent_dim == type(geodesic)().latent_dim != 256
    section = {"encoder_dim": 8, "gru": {"latent_dim": 32}, "geodesic": {"latent_dim": 6}}
    gru = RunConfig.from_dict({"dynamics": section}).dynamics
    assert (gru.encoder_dim, gru.latent_dim) == (8, 32)
    with pytest.raises(ConfigError, match="unknown key 'hidden' in \\[dynamics\\]"):
        RunConfig.from_dict(
            {"train": {"world_model": "geodesic"}, "dynamics": {"geodesic": {"hidden": 3}}}
        )


@pytest.mark.parametrize(("operator", "routing"), [("dense", "dense"), ("dense", "gsr")])
def test_a_short_run_per_memory_operator_logs_the_memory(tmp_path, operator, routing, capsys):
    """`--world-model geodesic --memory OP --memory-capacity C [--routing gsr --pool-size P
    --route-k K]`: the run trains with the memory (its config saved, its gate learned) and logs
    the memory's scalars; with the routed pool, its prototype count, spawns, prunes and routing
    statistics too (active = initial + spawns - prunes: the pool never filled)."""
    config = tmp_path / "tiny.json"
    data = tiny(train={"seed_steps": 30, "max_episode_steps": 25})
    context = {"prototypes": 8, "spawn_window": 32, "spawn_sigmas": 0.5}
    data["dynamics"] = {"latent_dim": 4, "encoder_dim": 16, "context": context}
    config.write_text(json.dumps(data))
    argv = ["--world-model", "geodesic", "--memory", operator, "--memory-capacity", "16"]
    argv += ["--routing", routing, "--pool-size", "40", "--route-k", "4"]
    argv += ["--steps", "45", "--logdir", str(tmp_path / "runs"), "--config", str(config)]
    code, lines, _ = call_main(train_cli.main, argv, capsys)
    assert code == 0, lines
    (run,) = (tmp_path / "runs").iterdir()
    saved = json.loads((run / "config.json").read_text())["dynamics"]["context"]
    assert saved["memory"] == operator and saved["memory_capacity"] == 16
    events = EventAccumulator(str(run), size_guidance={"scalars": 0}).Reload()
    tags = events.Tags()["scalars"]
    for tag in ("memory_gate", "memory_entries", "memory_transitions", "memory_bytes"):
        assert f"diagnostics/{tag}" in tags, tag
    (entries,) = [v for _, v in scalars(events, "diagnostics/memory_entries")][-1:]
    assert 0 < entries <= 16
    (gate,) = [v for _, v in scalars(events, "diagnostics/memory_gate")][-1:]
    assert gate != 0.0  # 15 updates moved it off its start
    (screened,) = [v for _, v in scalars(events, "diagnostics/node70_memory_screened_mass")][-1:]
    assert 0 < screened <= 1  # node 70 sees the memory's entries
    routed = ("prototypes_active", "prototype_spawns", "prototype_prunes", "routing_entropy")
    routed += ("routing_topk_mass", "gsr_bound")
    assert all((f"diagnostics/{tag}" in tags) == (routing == "gsr") for tag in routed)
    if routing == "gsr":
        last = {tag: scalars(events, f"diagnostics/{tag}")[-1][1] for tag in routed}
        assert saved["routing"] == "gsr" and saved["pool_capacity"] == 40
        assert last["prototype_spawns"] >= 1
        assert last["prototypes_active"] == 8 + last["prototype_spawns"] - last["prototype_prunes"]
        assert 0 < last["routing_topk_mass"] <= 1 and last["gsr_bound"] >= 0
