"""Open-loop prediction error on held-out episodes (agent/comparison/prediction.py) against a
start-by-start loop written out here, for both world models (the geodesic one with its history
window), and the recorder against the episodes run_episodes plays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent.comparison.prediction import EpisodeRecorder, open_loop_error
from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.core.episodes import run_episodes
from agent.persistence.runs import make_run_vector_env
from tests.agent.conftest import tiny
from tests.agent.test_compare import TINY_DYNAMICS
from world_model.model import EpisodeInputs


def _one_start(model, obs, acts, t, horizon, std, w):
    """Decoded error [horizon, O] / std of one start, one sample at a time."""
    o = torch.as_tensor(obs)
    history = mask = None
    if w > 0:
        history, mask = torch.zeros(w, 1, o.shape[-1]), torch.zeros(w, 1, dtype=torch.bool)
        for j in range(w):
            if t - w + j >= 0:
                history[j, 0], mask[j, 0] = o[t - w + j], True
    state = model.encode(o[t : t + 1])
    ctx = model.context(state, EpisodeInputs(history, mask))
    out = []
    for h in range(horizon):
        state = model.next(state, torch.as_tensor(acts[t + h : t + h + 1]), ctx, stochastic=False)
        out.append(((model.decode(state)[0] - o[t + h + 1]) / std).numpy())
    return np.stack(out)


@pytest.mark.parametrize("world_model", ["gru", "geodesic"])
def test_open_loop_error_is_the_rms_of_each_starts_rollout(world_model):
    dynamics = {k: v for k, v in TINY_DYNAMICS.items() if not isinstance(v, dict)}
    dynamics.update(TINY_DYNAMICS.get(world_model, {}))
    sections = tiny(train={"world_model": world_model, "max_episode_steps": 40})
    config = RunConfig.from_dict({**sections, "dynamics": dynamics})
    agent = Agent(None, config)
    recorder = EpisodeRecorder()
    returns = run_episodes(agent.policy(5), make_run_vector_env(config, 2), 2, 5, on_step=recorder)
    episodes = recorder.episodes()
    assert [(len(o), len(a)) for o, a in episodes] == [(41, 40), (41, 40)]
    assert np.isfinite(returns).all()

    horizon, stride = 12, 7
    got = open_loop_error(agent.model, episodes, horizon=horizon, stride=stride)
    std = torch.as_tensor(np.concatenate([o for o, _ in episodes]).std(axis=0) + 1e-6)
    w = agent.model.history_length
    assert (w > 0) == (world_model == "geodesic")
    agent.model.eval()
    with torch.no_grad():
        errs = [_one_start(agent.model, o, a, t, horizon, std, w)
                for o, a in episodes for t in range(0, len(a) - horizon + 1, stride)]  # fmt: skip
    expected = np.sqrt(np.mean(np.square(np.stack(errs)), axis=(0, 2)))  # [horizon]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert open_loop_error(agent.model, episodes, horizon=41) is None  # no episode that long
