"""One kill -9 trial of benchmarks/kill_trials.py in CI (the others: the script, its table in
docs/measurements.md): a geodesic run with episodic memory and a routed prototype pool, killed
half-way through writing its last checkpoint, resumes from the one before and ends bit for bit
as the uninterrupted run, its TensorBoard curves neither split nor duplicated."""

from __future__ import annotations

import pytest

from benchmarks.kill_trials import format_table, run_trials


@pytest.mark.slow
def test_a_run_killed_mid_checkpoint_write_resumes_to_the_uninterrupted_run(tmp_path):
    (row,) = run_trials(["checkpoint-write"], 75, "geodesic", tmp_path)
    seen = f"{format_table([row])}\n{row}"
    assert row["killed_at"] == 75 and row["resumed_from"] == 50, seen  # the write at 75 failed
    assert row["lost_steps"] == 25, seen  # one checkpoint interval at most
    assert row["identical"], seen  # weights, buffer, memory, pool, generators
    assert row["curves_same_steps"] and row["curves_no_duplicates"], seen
    assert row["curve_values_differ"] == [], seen
    assert row["temporaries_left"] == 0, seen  # the killed writer's half file was removed
