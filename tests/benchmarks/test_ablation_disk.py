"""benchmarks/ablation_disk.py's rows: each ablation's overrides reach the geodesic model of the
disk benchmark (validated), the full model is the benchmark's own, and the ablations that cannot
act in its rollouts are left out."""

from __future__ import annotations

import pytest

from agent.comparison.ablations import ABLATIONS, FULL_MODEL
from agent.core.config import config_from_dict
from benchmarks.ablation_disk import NOT_HERE, rows_of
from benchmarks.world_model_disk import build, geodesic_config
from world_model.geodesic import GeodesicConfig


def test_rows_are_the_full_model_and_the_ablations_that_act_here():
    rows = rows_of(None)
    assert rows[FULL_MODEL] is None
    assert set(rows) - {FULL_MODEL} == {a.row for n, a in ABLATIONS.items() if n not in NOT_HERE}
    with pytest.raises(SystemExit, match="unknown ablation"):
        rows_of(["wilson-sideways"])


def test_overrides_reach_the_model_and_are_validated():
    full = build("geodesic").dynamics.config
    assert full == geodesic_config()
    ablated = build("geodesic", dynamics=ABLATIONS["wilson-off"].dynamics).dynamics.config
    assert ablated.head.wilson == "none"
    assert ablated == config_from_dict(GeodesicConfig, {"head": {"wilson": "none"}}, "d", full)
    assert ablated.integrator == full.integrator  # nothing else moved
    with pytest.raises(ValueError):
        config_from_dict(GeodesicConfig, {"head": {"wilson": "sideways"}}, "d", full)
