"""benchmarks.dmc_results: the queue's pieces are the comparisons the README describes, a kept
piece counts only under configs/dmc.toml as it is now, and the table's numbers are the pieces'
(means, standard errors and the paired difference computed here independently)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agent.compare import build_parser, config_from_args
from agent.comparison.config import CompareConfig
from agent.comparison.results import Comparison, MethodRun, PointResult
from agent.core.config import load_config_file
from agent.diagnose import main as diagnose_main
from benchmarks.dmc_results import (
    CONFIG,
    arguments,
    current,
    keep_nodes,
    nodes_cell,
    nodes_path,
    progress,
    report,
    set_aside,
)
from tests.agent.test_diagnose import GEODESIC, train_run

DMC = load_config_file(CONFIG)


def _piece(folder, method: str, seed: int, mean: float, overrides=DMC, status="done",
           steps: int = 10_000, run_dir=None):  # fmt: skip
    """A piece: one run of `steps` decisions evaluated at 5,000 and 10,000, 2 episodes each."""
    config = CompareConfig(env_id="dm_control/reacher-easy-v0", steps=steps,
                           points=tuple(range(5_000, steps + 1, 5_000)), episodes=2,
                           first_seed=seed, seeds=1,
                           world_models=() if method == "sac" else (method,),
                           sac=method == "sac", overrides=overrides)  # fmt: skip
    comparison = Comparison(config, folder, status=status)
    run = MethodRun(method, seed, str(run_dir or folder), status=status)
    loop = None if method == "sac" else [0.5] * 50
    for step, train_s in ((5_000, 100.0), (10_000, 250.0)):
        run.points.append(PointResult(step, [mean - 10, mean + 10], train_s, train_s, 7.0,
                                      open_loop_error=loop))  # fmt: skip
    comparison.runs.append(run)
    folder.mkdir(parents=True, exist_ok=True)
    comparison.save()
    return folder / "results.json"


@pytest.mark.parametrize("method", ["gru", "geodesic", "sac"])
def test_each_piece_is_one_method_on_one_seed_under_the_dmc_config(method):
    config = config_from_args(build_parser().parse_args(arguments("cartpole-swingup", method, 3)))
    assert config.env_id == "dm_control/cartpole-swingup-v0" and config.seed_list == [3]
    assert config.methods == [method] and config.overrides == DMC
    assert config.steps == 50_000 and config.points[-1] == 50_000


def test_the_table_holds_the_current_pieces_numbers(tmp_path):
    kept = tmp_path / "kept" / "reacher-easy"
    gru, geo = {1: 300.0, 2: 500.0, 3: 700.0}, {1: 450.0, 2: 480.0, 3: 900.0}
    for seed in (1, 2, 3):
        _piece(kept / f"gru-seed{seed}", "gru", seed, gru[seed]).rename(
            kept / f"gru-seed{seed}.json"
        )
        _piece(kept / f"geodesic-seed{seed}", "geodesic", seed, geo[seed]).rename(
            kept / f"geodesic-seed{seed}.json"
        )
    stale = _piece(kept / "s1", "sac", 1, 100.0, overrides={**DMC, "agent": {"lr": 1.0}})
    stale.rename(kept / "sac-seed1.json")
    _piece(kept / "s2", "sac", 2, 100.0, status="interrupted").rename(kept / "sac-seed2.json")
    assert current(kept / "gru-seed1.json")
    assert not current(kept / "sac-seed1.json") and not current(kept / "sac-seed2.json")

    table = report(["reacher-easy"], ["gru", "sac", "geodesic"], [1, 2, 3], tmp_path / "kept",
                   figures=tmp_path / "figures").splitlines()  # fmt: skip
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    g = np.array(list(gru.values()))
    assert cells[1] == f"{g.mean():.1f} ± {g.std(ddof=1) / np.sqrt(3):.1f} (300.0 / 500.0 / 700.0)"
    assert cells[3] == "—"  # SAC: no current piece
    d = np.array([geo[s] - gru[s] for s in (1, 2, 3)])
    mean, interval = cells[4].split(" [")
    assert float(mean) == pytest.approx(d.mean(), abs=0.05) and cells[4].endswith("(3 seeds)")
    low, high = (float(x) for x in interval.split("]")[0].split(", "))
    assert d.min() <= low <= d.mean() <= high <= d.max()
    assert cells[5] == "0.50 / 0.50"
    assert cells[6] == " / ".join(["250 + 14 s"] * 3)
    assert (tmp_path / "figures" / "reacher-easy" / "learning_curves.png").is_file()


def test_a_folder_started_under_an_older_config_is_set_aside_and_never_kept(tmp_path):
    old = _piece(tmp_path / "gru-seed1", "gru", 1, 300.0, overrides={**DMC, "agent": {"lr": 1.0}})
    now = _piece(tmp_path / "gru-seed2", "gru", 2, 300.0)
    moved = set_aside(old.parent)
    assert moved == tmp_path / "gru-seed1.old-1" and (moved / "results.json").is_file()
    assert not (tmp_path / "gru-seed1").exists()
    assert set_aside(now.parent) is None and now.is_file()
    _piece(tmp_path / "gru-seed1", "gru", 1, 300.0, overrides={**DMC, "agent": {"lr": 1.0}})
    assert set_aside(tmp_path / "gru-seed1") == tmp_path / "gru-seed1.old-2"


def test_an_unfinished_piece_says_where_it_stands(tmp_path):
    assert progress(tmp_path / "gru-seed1") == "not started"
    _piece(tmp_path / "gru-seed1", "gru", 1, 300.0, status="interrupted")
    assert progress(tmp_path / "gru-seed1") == (
        "interrupted, evaluated at 10,000 of 10,000 decisions (250 s of training, 14 s of "
        "evaluation)"
    )
    # at 20,000 decisions: 10,000 more at (250 - 100) s per 5,000, two evaluations of 7 s
    _piece(tmp_path / "gru-seed2", "gru", 2, 300.0, status="running", steps=20_000)
    assert progress(tmp_path / "gru-seed2").endswith(
        "(250 s of training, 14 s of evaluation; ~314 s (0.1 h) left at its recent pace)"
    )


@pytest.mark.slow
def test_a_kept_geodesic_piece_keeps_the_nodes_agent_diagnose_reports(tmp_path, capsys):
    run = train_run(tmp_path, "geodesic", GEODESIC)
    folder, kept = tmp_path / "geodesic-seed1", tmp_path / "kept" / "geodesic-seed1.json"
    kept.parent.mkdir()
    _piece(folder, "geodesic", 1, 300.0, run_dir=run)
    assert not keep_nodes(folder, kept)  # not kept yet: nothing to keep nodes for
    (folder / "results.json").replace(kept)
    _piece(folder, "geodesic", 1, 300.0, run_dir=run)
    assert keep_nodes(folder, kept) and not keep_nodes(folder, kept)  # once
    assert diagnose_main([str(run), "--states", "64", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["geometric"]["nodes"]
    kept_nodes = json.loads(nodes_path(kept).read_text())
    assert kept_nodes["nodes"] == expected and {n["node"] for n in expected} >= {67, 68, 70}
    crossed = [n for n in expected if not n["passed"]]
    cell = nodes_cell([kept])
    assert cell == "pass" if not crossed else all(f"{n['node']}: " in cell for n in crossed)
    # a piece run again (another run folder) does not read the nodes of the one before
    _piece(tmp_path / "again", "geodesic", 1, 300.0, run_dir=tmp_path / "elsewhere")
    (tmp_path / "again" / "results.json").replace(kept)
    assert nodes_cell([kept]) == "—"


def test_the_nodes_cell_names_each_crossed_node_with_its_worst_and_mean_query(tmp_path):
    pieces = []
    for seed, passed in ((1, True), (2, False)):
        kept = _piece(tmp_path / f"geodesic-seed{seed}", "geodesic", seed, 300.0)
        nodes = [{"node": 67, "value": 2e-4, "passed": True, "extra": {"relative": 1e-5}},
                 {"node": 70, "value": 1.0 if not passed else 0.1, "passed": passed,
                  "extra": {"mean": 0.086}}]  # fmt: skip
        nodes_path(kept).parent.mkdir(exist_ok=True)
        nodes_path(kept).write_text(json.dumps({"run_dir": str(kept.parent), "nodes": nodes}))
        pieces.append(kept)
    assert nodes_cell(pieces) == "pass / 70: 1 (mean 0.086)"
