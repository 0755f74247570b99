"""The ablation switches from the command line (README.md, "Ablations"): `agent.train`'s short
flags set their config fields (read back from the run's config.json), a bad value is one line
and exit 2, and `agent.compare --ablations` trains the full geodesic model and each ablation on
the same seeds, pairs them against the full model, and resumes and merges like any comparison.
What each switch does to the model: tests/world_model/test_ablations.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agent import compare
from agent import train as train_cli
from agent.comparison.ablations import ABLATIONS, FULL_MODEL
from agent.comparison.config import CompareConfig
from tests.agent.conftest import call_main, tiny
from tests.agent.test_compare import TINY_DYNAMICS, write_config

GEODESIC_TINY = TINY_DYNAMICS["geodesic"]

# flag words -> the config field each sets, and its value
SWITCHED = {
    ("--wilson", "none"): ("head", "wilson", "none"),
    ("--temperature", "constant"): ("head", "temperature", "constant"),
    ("--screening", "off"): ("head", "screening", False),
    ("--chirality", "off"): ("context", "value_gradient", False),
    ("--thermostat", "learned"): ("integrator", "learned_thermostat", True),
    ("--curl", "on"): ("integrator", "curl", True),
    ("--memory", "none"): ("context", "memory", "none"),
    ("--routing", "dense"): ("context", "routing", "dense"),
}


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _differences(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    """The fields in which two dataclasses differ: {dotted name: (a's, b's)}."""
    fa, fb = _flat(dataclasses.asdict(a)), _flat(dataclasses.asdict(b))
    return {k: (fa[k], fb[k]) for k in fa if fa[k] != fb[k]}


# ----------------------------------------------------------------------- agent.train


def test_train_switch_flags_set_their_fields_in_the_saved_config(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**tiny(), "dynamics": GEODESIC_TINY}))
    flags = [word for pair in SWITCHED for word in pair]
    argv = ["--world-model", "geodesic", "--config", str(config), "--steps", "70",
            "--logdir", str(tmp_path / "runs"), *flags]  # fmt: skip
    code, err, _ = call_main(train_cli.main, argv, capsys)
    assert code == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    saved = json.loads((run / "config.json").read_text())["dynamics"]
    for (flag, _), (section, field, value) in SWITCHED.items():
        assert saved[section][field] == value, flag
    # every word of every switch, parsed alone: the field it sets and nothing else
    parser = train_cli.build_parser("geodesic")
    default = train_cli.config_from_args(parser.parse_args(["--world-model", "geodesic"]))
    words = {"--wilson": ("none", "first_order", "exp", "path_ordered", "magnus4"),
             "--temperature": ("metric", "constant"), "--screening": ("on", "off"),
             "--chirality": ("on", "off"), "--thermostat": ("exact", "learned"),
             "--curl": ("off", "on")}  # fmt: skip
    for flag, options in words.items():
        for word in options:
            args = parser.parse_args(["--world-model", "geodesic", flag, word])
            changed = _differences(train_cli.config_from_args(args).dynamics, default.dynamics)
            is_default = word in ("magnus4", "metric", "exact") or (word == "on") != (
                flag == "--curl"
            )
            assert len(changed) == (0 if is_default else 1), (flag, word, changed)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--screening", "maybe"], "argument --screening: invalid choice: 'maybe'"),
        (["--chirality", "true"], "argument --chirality: invalid choice: 'true'"),
        (["--thermostat", "on"], "argument --thermostat: invalid choice: 'on'"),
        (["--curl", "yes"], "argument --curl: invalid choice: 'yes'"),
        (["--wilson", "off"], "GeodesicConfig.head.wilson must be one of ('none', 'first_order'"),
        (["--temperature", "calibrated"], "GeodesicConfig.head.temperature must be one of"),
    ],
)
def test_a_bad_switch_value_is_one_line_and_exit_2(tmp_path, capsys, argv, expected):
    logdir = tmp_path / "runs"
    argv = ["--world-model", "geodesic", *argv, "--logdir", str(logdir)]
    code, lines, stdout = call_main(train_cli.main, argv, capsys)
    assert code == 2 and len(lines) == 1 and expected in lines[0], lines
    assert lines[0].startswith("python -m agent.train: error: ") and stdout == ""
    assert not logdir.exists()


# ----------------------------------------------------------------------- agent.compare


def _compare_config(argv: list[str]) -> CompareConfig:
    return compare.config_from_args(compare.build_parser().parse_args(argv))


def test_ablations_are_methods_each_their_switches_away_from_the_full_model():
    config = _compare_config(["--ablations", "--steps", "10"])  # no names: all of them
    rows = [a.row for a in ABLATIONS.values()]
    assert config.methods == [FULL_MODEL, *rows] and config.reference == FULL_MODEL
    assert config.run_order[0] == (FULL_MODEL, 1)  # the reference first
    full = config.run_config(FULL_MODEL, seed=2)
    for name, ablation in ABLATIONS.items():
        run = config.run_config(ablation.row, seed=2)
        assert run.train.world_model == FULL_MODEL and run.train.seed == 2
        changed = _differences(run.dynamics, full.dynamics)
        assert set(changed) == set(_flat(ablation.dynamics)), name
    # a subset, beside the GRU and SAC when asked for: still paired against the full model
    config = _compare_config(
        ["--ablations", "wilson-off", "screening-off", "--world-models", "geodesic", "gru",
         "--sac", "--steps", "10"]
    )  # fmt: skip
    assert config.methods == ["geodesic", "gru", "geodesic-no-wilson", "geodesic-no-screening",
                              "sac"]  # fmt: skip
    assert config.reference == FULL_MODEL
    assert CompareConfig.from_dict(config.to_dict()).ablations == ("wilson-off", "screening-off")
    assert config.to_dict()["ablations"]["geodesic-no-wilson"] == {"head": {"wilson": "none"}}
    # without --ablations nothing changes: geodesic, gru and SAC, paired against the GRU
    plain = _compare_config(["--steps", "10"])
    assert plain.methods == ["geodesic", "gru", "sac"] and plain.reference == "gru"
    assert "ablations" not in plain.to_dict()


def test_bad_ablations_are_one_line_and_exit_2(tmp_path, capsys):
    quiet = tmp_path / "quiet.json"  # a config that already switches screening off
    quiet.write_text(json.dumps({"dynamics": {"head": {"screening": False}}}))
    cases = [
        (["--ablations", "nope"], "unknown ablation 'nope'; available: wilson-off, "),
        (["--ablations", "wilson-off", "wilson-off"], "names an ablation twice"),
        (["--ablations", "wilson-off", "--world-models", "gru"], "must be compared too"),
        (["--ablations", "screening-off", "--config", str(quiet)],
         "ablation 'screening-off' changes nothing: the --config already sets "
         "dynamics.head.screening = False"),
    ]  # fmt: skip
    out = tmp_path / "out"
    for argv, expected in cases:
        code, lines, stdout = call_main(compare.main, [*argv, "--out", str(out)], capsys)
        assert code == 2 and len(lines) == 1 and expected in lines[0], (argv, lines)
        assert stdout == ""
    assert not out.exists()


def test_compare_ablations_trains_both_rows_on_the_same_seed_and_pairs_them(tmp_path, capsys):
    config = write_config(tmp_path / "tiny.json")
    out = tmp_path / "cmp"
    argv = ["--ablations", "screening-off", "--seeds", "1", "--steps", "70", "--episodes", "1",
            "--config", str(config), "--out", str(out)]  # fmt: skip
    code, err, stdout = call_main(compare.main, argv, capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "done" and results["reference"] == FULL_MODEL
    assert results["methods"] == [FULL_MODEL, "geodesic-no-screening"]
    assert results["ablations"] == {"geodesic-no-screening": {"head": {"screening": False}}}
    runs = {run["method"]: run for run in results["runs"]}
    assert set(runs) == {FULL_MODEL, "geodesic-no-screening"}
    for method, run in runs.items():
        assert run["seed"] == 1 and run["status"] == "done"
        assert [p["step"] for p in run["points"]] == [70]
        assert Path(run["run_dir"]).name.startswith(f"Pendulum-v1__{method}__1__")
        saved = json.loads((Path(run["run_dir"]) / "config.json").read_text())
        assert saved["train"]["world_model"] == FULL_MODEL and saved["train"]["seed"] == 1
        assert saved["dynamics"]["head"]["screening"] is (method == FULL_MODEL)
        assert saved["dynamics"]["latent_dim"] == GEODESIC_TINY["latent_dim"]  # the --config
    (paired,) = results["paired"]
    assert paired["method"] == "geodesic-no-screening" and paired["reference"] == FULL_MODEL
    assert paired["mean_diff"] == pytest.approx(
        runs["geodesic-no-screening"]["points"][0]["mean"] - runs[FULL_MODEL]["points"][0]["mean"]
    )
    assert "Paired by seed against geodesic" in stdout and "| geodesic-no-screening" in stdout
    assert (out / "learning_curves.png").exists()

    # --resume of the finished comparison trains nothing and prints the same rows
    code, err, again = call_main(compare.main, ["--resume", str(out)], capsys)
    assert code == 0, err
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["methods"] == results["methods"] and resumed["runs"] == results["runs"]
    assert "| geodesic-no-screening" in again
    # --merge reads the rows back as ablations
    code, err, merged = call_main(
        compare.main, ["--merge", str(out), "--out", str(tmp_path / "merged")], capsys
    )
    assert code == 0, err
    assert (
        json.loads((tmp_path / "merged" / "results.json").read_text())["ablations"]
        == (results["ablations"])
    )
