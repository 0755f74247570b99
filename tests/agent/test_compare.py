"""`python -m agent.compare`: a tiny real comparison (geodesic, GRU and SAC) read back from
results.json, the PNG and the TensorBoard runs; a compared run trains exactly as agent.train trains
it and its evaluation is agent.evaluate's; Ctrl-C keeps what finished; bad input is one line and
exit 2 with nothing written."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agent import compare
from agent import train as train_cli
from agent.comparison.config import CompareConfig, default_points
from agent.comparison.report import format_table
from agent.comparison.results import Comparison, MethodRun, PointResult
from agent.comparison.stats import paired_differences
from agent.core.agent import Agent
from agent.core.config import ConfigError
from agent.core.episodes import run_episodes
from agent.persistence.checkpoint import load_checkpoint
from agent.persistence.runs import CHECKPOINT_NAME, make_run_env, make_run_vector_env
from tests.agent.conftest import call_main, tiny
from tests.conftest import ROOT, child_env

WORST_STEP = -16.3  # Pendulum-v1's lowest reward per step (about -16.27)

# one config for both world models: shared [dynamics] keys, then each one's own sub-table
TINY_DYNAMICS = {
    "latent_dim": 16,
    "encoder_dim": 16,
    "gru": {"input_dim": 16},
    "geodesic": {
        "latent_dim": 4,
        "head": {"d_k": 8},
        "context": {"prototypes": 8, "feature_dim": 8, "window": 2},
    },
}


def write_config(path: Path, **sections) -> Path:
    path.write_text(json.dumps({**tiny(**sections), "dynamics": TINY_DYNAMICS}))
    return path


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.compare", *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def eval_steps(run_dir: str) -> list[int]:
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0}).Reload()
    return [e.step for e in events.Scalars("eval/mean_return")]


# ----------------------------------------------------------------------- the real thing


@pytest.mark.slow
def test_geodesic_gru_and_sac_side_by_side(tmp_path):
    config = write_config(tmp_path / "tiny.json")
    out = tmp_path / "cmp"
    done = run_cli(
        "--seeds", "1", "--steps", "150", "--at", "100", "--episodes", "2",
        "--config", str(config), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in progress] == [f"[{k}/6" for k in range(1, 7)]

    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "done"
    assert results["methods"] == ["geodesic", "gru", "sac"]
    assert results["points"] == [100, 150] and results["eval_seeds"] == [10_000, 10_001]
    runs = {run["method"]: run for run in results["runs"]}
    assert set(runs) == {"geodesic", "gru", "sac"}
    for method, run in runs.items():
        assert run["seed"] == 1 and run["status"] == "done"
        assert [p["step"] for p in run["points"]] == [100, 150]
        for p in run["points"]:
            assert len(p["returns"]) == 2
            assert all(WORST_STEP * 50 <= r <= 0 for r in p["returns"]), (method, p)
            assert p["mean"] == pytest.approx(np.mean(p["returns"]))
            assert p["eval_s"] > 0 and p["train_cpu_s"] > 0
        first, last = run["points"]
        assert 0 <= first["train_s"] < last["train_s"]
        if method == "sac":
            assert first["plan_ms"] is None and first["updates"] is None
            assert first["open_loop_error"] is None
        else:
            assert first["plan_ms"] > 0 and first["update_ms"] > 0
            assert 0 < first["updates"] < last["updates"]
            curve = last["open_loop_error"]  # 50-step episodes: one start each, 50 horizons
            assert len(curve) == 50 and all(math.isfinite(e) and e >= 0 for e in curve)
        # TensorBoard: one run per method, evaluations at the points
        assert Path(run["run_dir"]).parent == out / "runs"
        assert Path(run["run_dir"]).name.startswith(f"Pendulum-v1__{method}__1__")
        assert eval_steps(run["run_dir"]) == [100, 150]
    tags = EventAccumulator(runs["geodesic"]["run_dir"]).Reload().Tags()["scalars"]
    for node in ("node67_gauge_invariance", "node68_metric_temperature", "node70_texture_leakage"):
        assert f"diagnostics/{node}" in tags

    summary = {(row["method"], row["step"]): row for row in results["summary"]}
    assert len(summary) == 6
    for (method, step), row in summary.items():
        point = next(p for p in runs[method]["points"] if p["step"] == step)
        assert row["mean"] == pytest.approx(point["mean"]) and row["std"] == 0.0
        assert row["per_seed"] == {"1": pytest.approx(point["mean"])}
        sac_s = next(p for p in runs["sac"]["points"] if p["step"] == step)["train_s"]
        if method == "sac":
            assert row["ratio_to_sac"] is None
        elif sac_s > 0:
            assert row["ratio_to_sac"] == pytest.approx(point["train_s"] / sac_s)

    # paired with the GRU seed by seed: one seed, so a difference and no interval
    assert results["reference"] == "gru"
    paired = {(row["method"], row["step"]): row for row in results["paired"]}
    assert set(paired) == {(m, s) for m in ("geodesic", "sac") for s in (100, 150)}
    for (method, step), row in paired.items():
        diff = summary[(method, step)]["mean"] - summary[("gru", step)]["mean"]
        assert row["seeds"] == 1 and row["wins"] == int(diff > 0)
        assert row["mean_diff"] == pytest.approx(diff) and row["ci_low"] is None

    table = done.stdout
    assert "Paired by seed against gru" in table
    for method in ("geodesic", "gru", "sac"):
        row = summary[(method, 150)]
        assert f"| {method}" in table and f"| {row['mean']:.1f} |" in table  # one seed: no s.e.
        assert row["sem"] is None
        point = next(p for p in runs[method]["points"] if p["step"] == 150)
        assert row["episode_sem"] == pytest.approx(np.std(point["returns"], ddof=1) / np.sqrt(2))
    assert f"results: {out / 'results.json'}" in table

    for name in ("learning_curves.png", "prediction_error.png"):
        image = imread(out / name)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
        assert image.std() > 0  # something is drawn
    assert " / " in table  # the open-loop errors at 1 / 10 / 50 steps


def test_a_compared_run_trains_as_agent_train_and_evaluates_as_agent_evaluate(tmp_path, capsys):
    """Evaluating at points from a callback leaves the training streams alone: the compared
    GRU run ends with the buffer and weights of a plain agent.train run of the same config, and
    its last evaluation returns what agent.evaluate's run_episodes returns for that run."""
    config = tmp_path / "tiny.json"  # GRU keys only: agent.train reads this file too
    config.write_text(json.dumps(tiny()))
    out = tmp_path / "cmp"
    argv = ["--world-models", "gru", "--no-sac", "--seeds", "1", "--steps", "120", "--at", "70"]
    assert compare.main([*argv, "--episodes", "2", "--config", str(config), "--out", str(out)]) == 0
    logdir = tmp_path / "runs"
    assert train_cli.main(["--config", str(config), "--steps", "120", "--logdir", str(logdir)]) == 0
    capsys.readouterr()

    results = json.loads((out / "results.json").read_text())
    assert results["methods"] == ["gru"] and len(results["runs"]) == 1
    (run,) = results["runs"]
    assert [p["step"] for p in run["points"]] == [70, 120]
    compared = load_checkpoint(Path(run["run_dir"]) / CHECKPOINT_NAME)["agent"]
    (plain_dir,) = logdir.iterdir()
    plain = load_checkpoint(plain_dir / CHECKPOINT_NAME)["agent"]
    for key in ("obs", "action", "reward", "next_obs"):
        assert np.array_equal(compared["buffer"][key], plain["buffer"][key]), key
    for name, tensor in plain["model"].items():
        assert np.array_equal(compared["model"][name], tensor), name

    agent = Agent.load(plain_dir / CHECKPOINT_NAME)
    batched = run_episodes(agent.policy(10_000), make_run_vector_env(agent.config, 2), 2, 10_000)
    assert run["points"][-1]["returns"] == batched.tolist()
    # one after the other, the same episodes plan the same (per-episode generators), up to the
    # rounding of the batched arithmetic (measured: 5e-10 of the return)
    expected = run_episodes(agent.policy(10_000), make_run_env(agent.config, seed=None), 2, 10_000)
    np.testing.assert_allclose(batched, expected, rtol=1e-6)

    # on_step sees every transition of the same episodes, and watching them changes nothing
    steps = [[], []]
    watched = run_episodes(
        agent.policy(10_000),
        make_run_env(agent.config, seed=None),
        2,
        10_000,
        on_step=lambda k, *transition: steps[k].append(transition),
    )
    assert watched.tolist() == expected.tolist()
    for episode, total in zip(steps, expected, strict=True):
        assert np.isclose(sum(reward for _, _, reward, _ in episode), total)
        for (_, _, _, next_obs), (obs, _, _, _) in zip(episode, episode[1:], strict=False):
            assert np.array_equal(next_obs, obs)


@pytest.mark.slow
def test_ctrl_c_keeps_every_finished_evaluation(tmp_path):
    config = write_config(tmp_path / "tiny.json")
    out = tmp_path / "cmp"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "agent.compare", "--world-models", "gru", "--no-sac",
            "--seeds", "2", "--steps", "100000", "--at", "80", "--episodes", "1",
            "--config", str(config), "--out", str(out),
        ],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    results = out / "results.json"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # the first evaluation is written: training goes on
            if results.exists() and json.loads(results.read_text())["runs"][0]["points"]:
                break
            time.sleep(0.3)
        else:
            pytest.fail("no evaluation within 120 s")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    saved = json.loads(results.read_text())
    assert saved["status"] == "interrupted"
    (run,) = saved["runs"]  # seed 2 never started
    assert run["status"] == "interrupted" and [p["step"] for p in run["points"]] == [80]
    assert (Path(run["run_dir"]) / CHECKPOINT_NAME).exists()
    assert "| gru" in stdout and (out / "learning_curves.png").exists()


# ----------------------------------------------------------------------- configuration


def test_evaluation_points():
    assert default_points(5000) == (1000, 2500, 5000)
    assert default_points(300) == (300,)
    assert default_points(10_000) == (1000, 2500, 5000, 10_000)
    assert CompareConfig(steps=300).points == (300,)
    assert CompareConfig(steps=150, points=(100, 40, 100)).points == (40, 100, 150)


def test_runs_go_one_method_at_a_time_references_first():
    seeds = [1, 2]
    config = CompareConfig(seeds=2, steps=10)  # geodesic, gru, sac; reference gru
    assert config.run_order == [(m, s) for m in ("sac", "gru", "geodesic") for s in seeds]
    config = CompareConfig(seeds=2, steps=10, sac=False, reference="geodesic")
    assert config.run_order == [(m, s) for m in ("geodesic", "gru") for s in seeds]
    config = CompareConfig(seeds=2, steps=10, world_models=())  # SAC alone: each seed once
    assert config.reference == "sac" and config.run_order == [("sac", 1), ("sac", 2)]


def test_dynamics_sub_tables_go_to_their_world_model_only():
    config = CompareConfig(
        seeds=2, world_models=("geodesic", "gru"), overrides={"dynamics": TINY_DYNAMICS}
    )
    geodesic = config.run_config("geodesic", seed=2)
    gru = config.run_config("gru", seed=2)
    assert geodesic.train.world_model == "geodesic" and geodesic.train.seed == 2
    assert geodesic.dynamics.latent_dim == 4 and geodesic.dynamics.context.prototypes == 8
    assert gru.dynamics.latent_dim == 16 and gru.dynamics.input_dim == 16
    assert gru.train.eval_every == 0 and gru.train.eval_episodes == config.episodes
    with pytest.raises(ConfigError, match=r"world model 'geodesic': unknown key 'input_dim'"):
        CompareConfig(overrides={"dynamics": {"input_dim": 16}})


# ----------------------------------------------------------------------- bad input


def _bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    missing = tmp_path / "missing.json"
    broken = tmp_path / "broken.toml"
    broken.write_text("[train\nsteps = ")
    shared_gru_key = tmp_path / "gru_key.json"
    shared_gru_key.write_text(json.dumps({"dynamics": {"input_dim": 16}}))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "results.json").write_text("{}")
    return [
        (["--env", "NoSuchEnv-v0"], "unknown environment id 'NoSuchEnv-v0'"),
        (["--env", "CartPole-v1"], "discrete"),
        (["--world-models", "nope"], "unknown world model 'nope'; available: "),
        (["--world-models", "sac"], "SAC is not a world model"),
        (["--world-models", "gru", "gru"], "names a world model twice"),
        (["--seeds", "0"], "--seeds must be a positive integer, got 0"),
        (["--seeds", "three"], "invalid int value: 'three'"),
        (["--episodes", "0"], "--episodes must be a positive integer"),
        (["--at", "0", "100"], "every --at value must be a positive integer, got 0"),
        (["--at", "6000", "--steps", "5000"], "--at 6000 lies beyond --steps 5000"),
        (["--at"], "expected at least one argument"),
        (["--config", str(missing)], "does not exist"),
        (["--config", str(broken)], "is not valid"),
        (["--config", str(shared_gru_key)], "world model 'geodesic': unknown key 'input_dim'"),
        (["--out", str(taken)], "already holds a comparison"),
        (["--no-sac", "--reference", "sac"], "--reference 'sac' is not compared here"),
    ]


def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, capsys):
    out = tmp_path / "out"
    for argv, expected in _bad_cases(tmp_path):
        argv = argv if "--out" in argv else [*argv, "--out", str(out)]
        code, lines, stdout = call_main(compare.main, argv, capsys)
        assert code == 2, (argv, lines)
        assert len(lines) == 1 and expected in lines[0], (argv, lines)
        assert lines[0].startswith("python -m agent.compare: error: ")
        assert stdout == ""
    assert not out.exists()  # nothing written for a comparison that never started
    assert (tmp_path / "taken" / "results.json").read_text() == "{}"


def test_bad_input_in_a_real_process(tmp_path):
    bad = run_cli("--world-models", "gru", "nope", "--out", str(tmp_path / "out"), timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    (line,) = bad.stderr.strip().splitlines()
    assert "unknown world model 'nope'" in line
    assert not (tmp_path / "out").exists()


def test_results_hold_no_non_finite_numbers_for_sac_only_columns(tmp_path):
    """A comparison without SAC writes null ratios (valid JSON), and the table shows them as —."""
    config = CompareConfig(world_models=("gru",), sac=False, steps=10, seeds=1)
    comparison = Comparison(config, tmp_path)
    run = MethodRun("gru", 1, str(tmp_path))
    run.points.append(PointResult(10, [-5.0, -7.0], 1.0, 1.0, 0.1, 2.0, 3.0, 4))
    comparison.runs.append(run)
    data = json.loads(comparison.save().read_text(), parse_constant=pytest.fail)
    (row,) = data["summary"]
    assert row["ratio_to_sac"] is None and row["mean"] == -6.0 and math.isfinite(row["train_s"])
    assert row["sem"] is None and row["episode_sem"] == pytest.approx(1.0)  # std 1.41 / sqrt 2
    assert "| gru    | 10        | -6.0   | -6       | 1.0          |" in format_table(comparison)


def _comparison_with(tmp_path, means: dict[str, dict[int, float]], **config) -> Comparison:
    """A Comparison holding one evaluation at step 10 per (method, seed), two episodes each,
    whose mean is the given one."""
    cfg = CompareConfig(steps=10, seeds=max(max(m) for m in means.values()), **config)
    comparison = Comparison(cfg, tmp_path)
    for method, per_seed in means.items():
        for seed, mean in per_seed.items():
            run = MethodRun(method, seed, str(tmp_path))
            run.points.append(PointResult(10, [mean - 1, mean + 1], 1, 1, 0.1, 2, 3, 4))
            comparison.runs.append(run)
    return comparison


def test_paired_table_pairs_each_method_with_the_gru_on_the_seeds_both_finished(tmp_path):
    geodesic = {1: -120.0, 2: -300.0, 3: -110.0, 4: -115.0}
    gru = {1: -150.0, 2: -140.0, 3: -112.0}  # seed 4 unfinished: not paired
    sac = {1: -700.0, 2: -600.0, 3: -650.0, 4: -500.0}
    comparison = _comparison_with(tmp_path, {"geodesic": geodesic, "gru": gru, "sac": sac})
    assert comparison.config.reference == "gru"
    rows = {row.method: row for row in comparison.paired()}
    assert set(rows) == {"geodesic", "sac"}
    for method, per_seed in (("geodesic", geodesic), ("sac", sac)):
        d = np.array([per_seed[s] - gru[s] for s in (1, 2, 3)])  # independent of the code
        row = rows[method]
        assert (row.reference, row.step, row.seeds) == ("gru", 10, 3)
        assert row.wins == int((d > 0).sum())
        assert row.mean_diff == pytest.approx(d.mean())
        assert row.median_diff == pytest.approx(np.median(d))
        assert d.min() <= row.ci_low <= row.mean_diff <= row.ci_high <= d.max()
    # geodesic: better on 2 of 3 seeds, worse on the mean because of one seed
    assert rows["geodesic"].wins == 2 and rows["geodesic"].mean_diff < 0
    assert rows["geodesic"].median_diff == pytest.approx(2.0)

    data = json.loads(comparison.save().read_text())
    assert [r["method"] for r in data["paired"]] == ["geodesic", "sac"]
    assert data["paired"][0]["wins"] == 2 and data["reference"] == "gru"
    table = format_table(comparison)
    assert "Paired by seed against gru" in table
    assert "| geodesic | 10        | 2/3 seeds |" in table


def test_bootstrap_interval_agrees_with_normal_theory():
    """For many seeds the percentile bootstrap of a mean approaches mean +- 1.96 s / sqrt(n)."""
    d = np.random.default_rng(7).normal(1.0, 2.0, size=400)
    mean, median, low, high = paired_differences(d)
    assert mean == pytest.approx(d.mean()) and median == pytest.approx(np.median(d))
    half = 1.96 * d.std(ddof=1) / np.sqrt(d.size)
    assert (high - low) / 2 == pytest.approx(half, rel=0.08)
    assert (low + high) / 2 == pytest.approx(mean, abs=0.1 * half)
    # no spread, no interval width; one seed, no interval
    assert paired_differences([3.0, 3.0, 3.0])[2:] == (3.0, 3.0)
    assert paired_differences([3.0])[2:] == (None, None)
    # reproducible: a table printed twice is the same table
    assert paired_differences(d[:5]) == paired_differences(d[:5])


def test_reference_defaults_to_the_gru_and_must_be_compared():
    assert CompareConfig(world_models=("geodesic",), steps=10).reference == "geodesic"
    assert CompareConfig(world_models=("geodesic",), sac=False, steps=10).reference == "geodesic"
    assert CompareConfig(steps=10, reference="sac").reference == "sac"
    with pytest.raises(ConfigError, match="--reference 'sac' is not compared here"):
        CompareConfig(world_models=("gru",), sac=False, steps=10, reference="sac")


def test_summary_standard_errors_over_seeds_and_over_episodes(tmp_path):
    comparison = _comparison_with(tmp_path, {"gru": {1: 1.0, 2: 2.0, 3: 6.0}}, sac=False)
    (row,) = comparison.summary()
    assert row.sem == pytest.approx(np.std([1.0, 2.0, 6.0], ddof=1) / np.sqrt(3))  # 1.53
    assert row.episode_sem == pytest.approx(1.0)  # each seed: [m - 1, m + 1]
    assert f"| 3.0 ± {row.sem:.1f} |" in format_table(comparison)


def test_dmc_learning_curves_carry_the_published_points_at_100k_environment_steps(tmp_path):
    from agent.comparison.report import learning_curves_figure

    means = {"gru": {1: 300.0, 2: 500.0}}
    comparison = _comparison_with(tmp_path, means, env_id="dm_control/pendulum-swingup-v0",
                                  sac=False, overrides={"train": {"action_repeat": 2}})  # fmt: skip
    (ax,) = learning_curves_figure(comparison).axes
    drawn = {tuple(map(float, xy)) for c in ax.collections for xy in c.get_offsets()}
    # TD-MPC2 (its seeds), DreamerV3, SAC, MR.Q, SimbaV2 at 2 and 8 updates per step
    for value in (724.0, 564.0, 756.0, 852.0, 699.0, 96.0, 617.0, 245.0, 826.0):
        assert (50_000.0, value) in drawn  # 100k environment steps = 50k decisions
    (curve,) = ax.lines
    assert curve.get_xydata().tolist() == [[10.0, 400.0]]
    assert "decisions (x 2" in ax.get_xlabel()
    labels = ax.get_legend_handles_labels()[1]
    assert "TD-MPC2 (published, mean of 3 seeds)" in labels
    assert "MR.Q (published, mean of 10 seeds)" in labels
    assert "SimbaV2 (UTD 8) (published, mean of 5 seeds)" in labels
