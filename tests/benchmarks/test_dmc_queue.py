"""benchmarks.dmc_queue: jobs run to a finished comparison, a finished job is not run again, an
unfinished one continues with --resume, and only finished results are kept."""

from __future__ import annotations

import json

from benchmarks.dmc_queue import _command, finished, keep_finished, run_queue
from tests.agent.conftest import tiny


def test_the_queue_runs_skips_and_keeps(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny()))
    args = ["--world-models", "gru", "--no-sac", "--seeds", "1", "--steps", "60", "--at", "60",
            "--episodes", "1", "--config", str(config)]  # fmt: skip
    jobs = [(tmp_path / "q" / f"job{k}", [*args, "--first-seed", str(k)]) for k in (1, 2)]
    assert _command(jobs[0][0], jobs[0][1])[-2:] == ["--out", str(jobs[0][0])]

    run_queue(jobs, parallel=2)
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == ["job1: exit 0", "job2: exit 0", "start job1", "start job2"]
    for k, (folder, _) in enumerate(jobs, start=1):
        assert finished(folder)
        (run,) = json.loads((folder / "results.json").read_text())["runs"]
        assert (run["seed"], [p["step"] for p in run["points"]]) == (k, [60])
        assert keep_finished(folder, tmp_path / "kept" / f"{folder.name}.json")
        assert finished(tmp_path / "kept" / f"{folder.name}.json")

    run_queue(jobs, parallel=2)  # all finished: nothing starts
    assert capsys.readouterr().out == ""
    data = json.loads((jobs[0][0] / "results.json").read_text())
    data["status"] = "interrupted"  # an unfinished comparison continues, its own settings kept
    (jobs[0][0] / "results.json").write_text(json.dumps(data))
    assert not finished(jobs[0][0]) and not keep_finished(jobs[0][0], tmp_path / "no.json")
    assert _command(*jobs[0])[-2:] == ["--resume", str(jobs[0][0])]
    assert not (tmp_path / "no.json").exists()
