"""benchmarks.dmc_departures: every row is a valid agent.compare configuration that differs
from the GRU agent it departs from in exactly the settings it names, and that agent is the one
the kept "current" runs measured."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from agent.comparison.config import CompareConfig
from agent.comparison.merge import load_comparison
from agent.core.config import merge_tables
from benchmarks.dmc_departures import ROWS, base, row
from benchmarks.dmc_queue import ROOT


def _flat(config) -> dict[str, object]:
    """{section.key: value} of a RunConfig, the dynamics' keys under dynamics."""
    out = {}
    for section in ("train", "agent", "loss", "planner", "model", "dynamics"):
        for key, value in dataclasses.asdict(getattr(config, section)).items():
            out[f"{section}.{key}"] = value
    return out


def _run_config(overrides: dict):
    return CompareConfig(
        env_id="dm_control/reacher-easy-v0", steps=15_000, world_models=("gru",), sac=False,
        overrides=merge_tables(base(), overrides),
    ).run_config("gru", seed=1)  # fmt: skip


def _named(overrides: dict, prefix: str = "") -> set[str]:
    names = set()
    for key, value in overrides.items():
        if isinstance(value, dict):
            names |= _named(value, f"{prefix}{key}.")
        else:
            names.add(f"{prefix}{key}".replace("dynamics.gru.", "dynamics."))
    return names


@pytest.mark.parametrize("row", [r for r in ROWS if r != "current"])
def test_each_row_changes_exactly_the_settings_it_names(row):
    base, changed = _flat(_run_config({})), _flat(_run_config(ROWS[row][1]))
    differ = {k for k in base if base[k] != changed[k]}
    assert differ == _named(ROWS[row][1])


def test_rows_joined_by_plus_change_the_union_of_their_settings():
    description, overrides = row("batch+q-ensemble+encoder")
    assert description.startswith(ROWS["batch"][0]) and ROWS["encoder"][0] in description
    base, changed = _flat(_run_config({})), _flat(_run_config(overrides))
    differ = {k for k in base if base[k] != changed[k]}
    assert differ == set().union(*(_named(ROWS[r][1]) for r in ("batch", "q-ensemble", "encoder")))
    for bad in ("batch+nothing", "batch+batch", "current+lr"):
        with pytest.raises(argparse.ArgumentTypeError, match="joined by"):
            row(bad)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_rows_depart_from_the_agent_the_kept_current_runs_measured(seed):
    kept = ROOT / "docs/results/dmc/departures/reacher-easy" / f"current-seed{seed}.json"
    measured = load_comparison(kept).config.run_config("gru", seed=1)
    assert _flat(measured) == _flat(_run_config({}))
