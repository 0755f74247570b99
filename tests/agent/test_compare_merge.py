"""`agent.compare --merge`: a comparison run in pieces (methods and seeds apart, as a long DMC
comparison is run over several sessions) reads as the comparison run at once; pieces whose
settings differ, or that hold the same run twice, are refused in one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.image import imread

from agent import compare
from agent.comparison.config import CompareConfig
from tests.agent.conftest import call_main, tiny


def _settings(config: Path) -> list[str]:
    return ["--steps", "200", "--at", "100", "--episodes", "2", "--config", str(config)]


def _runs(results: dict) -> dict[tuple[str, int], list[list[float]]]:
    """(method, seed) -> the returns at every point."""
    return {
        (run["method"], run["seed"]): [p["returns"] for p in run["points"]]
        for run in results["runs"]
    }


def _read(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
def test_pieces_merge_to_the_comparison_run_at_once(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny()))
    pieces = {  # the GRU on seed 1, on seed 2 (--first-seed), and SAC on both
        "gru1": ["--world-models", "gru", "--no-sac", "--seeds", "1"],
        "gru2": ["--world-models", "gru", "--no-sac", "--seeds", "1", "--first-seed", "2"],
        "sac": ["--world-models", "--sac", "--seeds", "2"],
        "whole": ["--world-models", "gru", "--sac", "--seeds", "2"],
    }
    for name, flags in pieces.items():
        code, err, _ = call_main(
            compare.main, [*flags, *_settings(config), "--out", str(tmp_path / name)], capsys
        )
        assert code == 0, err
    assert [r["seed"] for r in _read(tmp_path / "gru2")["runs"]] == [2]

    # a run stopped before its first evaluation (as a piece killed after its last finished run)
    results = _read(tmp_path / "gru2")
    results["runs"].append({**results["runs"][0], "seed": 3, "status": "interrupted", "points": []})
    (tmp_path / "gru2" / "results.json").write_text(json.dumps(results))
    merged = tmp_path / "merged"
    sources = [
        str(tmp_path / "gru1" / "results.json"),
        str(tmp_path / "gru2"),
        str(tmp_path / "sac"),
    ]
    code, err, out = call_main(compare.main, ["--merge", *sources, "--out", str(merged)], capsys)
    assert code == 0, err
    mine, whole = _read(merged), _read(tmp_path / "whole")
    assert mine["status"] == "done" and mine["seeds"] == [1, 2] and mine["reference"] == "gru"
    assert set(mine["methods"]) == {"gru", "sac"}
    # the same runs with the same returns at every point, so the same table
    assert _runs(mine) == _runs(whole)
    assert [r["per_seed"] for r in mine["summary"]] == [r["per_seed"] for r in whole["summary"]]
    assert mine["paired"] == whole["paired"]
    assert [m["results"] for m in mine["meta"]["merged_from"]] == sources
    assert any(line.startswith("| gru") for line in out.splitlines())
    assert imread(merged / "learning_curves.png").shape[0] > 100
    assert CompareConfig.from_dict(mine).seed_list == [1, 2]

    # refused in one line, nothing written: the same run twice, different settings, --seeds
    for argv, says in [
        (["--merge", sources[0], str(tmp_path / "whole")], "gru seed 1 is in both"),
        (["--merge", sources[0], str(tmp_path / "gru2"), "--seeds", "2"], "leave out --seeds"),
        (["--merge", str(tmp_path / "nothing")], "no results.json there"),
    ]:
        code, err, _ = call_main(compare.main, [*argv, "--out", str(tmp_path / "no")], capsys)
        assert code == 2 and len(err) == 1 and says in err[0], err
        assert not (tmp_path / "no").exists()
    other = tmp_path / "other"
    results = _read(tmp_path / "gru2")
    results["episodes"] = 3
    other.mkdir()
    (other / "results.json").write_text(json.dumps(results))
    code, err, _ = call_main(
        compare.main, ["--merge", sources[0], str(other), "--out", str(tmp_path / "no")], capsys
    )
    assert code == 2 and "differ in episodes (3 against 2)" in err[0]
    assert not (tmp_path / "no").exists()


def test_seeds_start_at_first_seed_and_round_trip_through_results():
    config = CompareConfig(seeds=2, first_seed=4, world_models=("gru",), sac=False, steps=10)
    assert config.seed_list == [4, 5]
    assert [seed for _, seed in config.run_order] == [4, 5]
    again = CompareConfig.from_dict(config.to_dict())
    assert again.seed_list == [4, 5] and again.to_dict() == config.to_dict()
