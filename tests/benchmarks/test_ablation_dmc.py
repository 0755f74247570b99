"""benchmarks/ablation_dmc.py: its rows are exactly agent.compare's agents (the ablation's
override and nothing else), its replay is whole, seeded episodes of the agent's scaled env that
replay to the same observations, and one row's result is the open-loop error of the agent it
trained, read back."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from agent.comparison.ablations import ABLATIONS, FULL_MODEL
from agent.comparison.config import CompareConfig
from agent.comparison.prediction import HORIZON
from agent.core.agent import Agent
from agent.persistence.runs import make_run_env
from benchmarks.ablation_dmc import NOT_HERE, collect, draw, rows_of, run_row
from tests.agent.conftest import tiny

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("shimmy") is None or importlib.util.find_spec("dm_control") is None,
    reason="the dmc extra (shimmy, dm-control) is not installed",
)
ENV = "dm_control/reacher-easy-v0"
SMALL = tiny(train={"action_repeat": 2, "max_episode_steps": 60})  # one row trains in seconds


def test_rows_are_gru_the_full_model_and_the_ablations_that_act_in_open_loop():
    rows = rows_of(None)
    assert list(rows)[:2] == ["gru", FULL_MODEL]
    assert set(rows) - {"gru", FULL_MODEL} == set(ABLATIONS) - set(NOT_HERE)
    assert rows["wilson-off"] == ABLATIONS["wilson-off"].row
    with pytest.raises(SystemExit, match="unknown row"):
        rows_of(["wilson-sideways"])
    compare = CompareConfig(env_id=ENV, world_models=("gru", FULL_MODEL), sac=False)
    full = compare.run_config(FULL_MODEL, 1)
    ablated = compare.run_config(rows["screening-off"], 1)
    assert full.dynamics.head.screening and not ablated.dynamics.head.screening
    assert ablated.dynamics.integrator == full.dynamics.integrator
    assert ablated.agent == full.agent and ablated.planner == full.planner


def test_replay_is_whole_seeded_episodes_that_replay_to_the_same_observations():
    config = CompareConfig(env_id=ENV, sac=False, world_models=("gru",), overrides=SMALL)
    config = config.run_config("gru", 1)
    episodes = collect(config, seed=3, episodes=2)
    again = collect(config, seed=3, episodes=2)
    assert len(episodes) == 2
    for ep, same in zip(episodes, again, strict=True):
        assert len(ep["obs"]) == len(ep["action"]) + 1 == 61  # whole: the episode limit
        assert np.abs(ep["action"]).max() <= 1.0  # the agent's scaled units
        np.testing.assert_array_equal(ep["obs"], same["obs"])
    assert not np.array_equal(episodes[0]["action"], episodes[1]["action"])
    env = make_run_env(config, seed=3)  # the recorded actions replay to the recorded states
    obs, _ = env.reset(seed=3)
    for t, action in enumerate(episodes[0]["action"][:10]):
        np.testing.assert_allclose(obs, episodes[0]["obs"][t], rtol=1e-6)
        obs, *_ = env.step(action)
    env.close()


def test_a_row_trains_its_agent_and_reports_its_open_loop_error(monkeypatch):
    """The row's agent is trained: after its 3 updates its open-loop error is below that of the
    same row with every update a no-op (the same seed's untrained agent, through the same
    run_row), at every horizon and by more than 3% (measured: 9-12% lower)."""
    compare = CompareConfig(env_id=ENV, world_models=("gru",), sac=False, overrides=SMALL)
    config = compare.run_config("gru", 1)
    train, held_out = collect(config, 1, 1), collect(config, 99, 1)
    args = SimpleNamespace(updates=3)
    result = run_row(compare, "gru", 1, train, held_out, args)
    assert len(result["error"]) == HORIZON
    assert result["at1"] == result["error"][0] and result["at50"] == result["error"][-1]
    assert result["mean"] == pytest.approx(np.mean(result["error"]))
    assert all(np.isfinite(result["error"])) and result["update_ms"] > 0
    with monkeypatch.context() as patch:
        patch.setattr(Agent, "update", lambda self: {})
        untrained = run_row(compare, "gru", 1, train, held_out, args)
    assert np.all(np.array(result["error"]) < 0.97 * np.array(untrained["error"]))


def test_the_figure_labels_only_the_rows_that_differ_from_the_full_model(tmp_path):
    rng = np.random.default_rng(0)

    def row(shift: float, noise: float) -> dict:
        out = {}
        for seed in (1, 2, 3):
            error = np.linspace(0.4, 1.0, HORIZON) + shift + noise * rng.standard_normal()
            out[seed] = {"error": error.tolist(), "mean": float(error.mean())}
        return out

    results = {"gru": row(0.1, 0.0), FULL_MODEL: row(0.0, 0.0), "screening-off": row(0.3, 0.01),
               "wilson-off": row(0.0, 0.01)}  # fmt: skip
    path = tmp_path / "ablation.png"
    labelled = draw(results, [1, 2, 3], path, "test")
    assert labelled == ["gru", FULL_MODEL, "screening-off"]
    assert path.stat().st_size > 10_000
