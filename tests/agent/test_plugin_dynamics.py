"""A dynamics with a (z, p) latent in the Poincare ball, a ManifoldParameter, a context, memory
hooks, regularisers and diagnostics plugs into the agent through the registry alone: the shape
the geodesic model will have. Nothing in agent/ knows about it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import geoopt
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import Tensor, nn

from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.core.loop import Trainer
from agent.persistence.runs import CHECKPOINT_NAME
from agent.train import build_parser
from geometry import poincare as P
from tests.agent.conftest import tiny
from world_model.model import Dynamics, DynamicsConfig, LatentState
from world_model.registry import dynamics_names, register_dynamics

CALLS: Counter = Counter()


@dataclass
class ZPState(LatentState):
    z: Tensor  # [B, d] in the ball
    p: Tensor  # [B, d]


@dataclass
class ToyConfig(DynamicsConfig):
    dim: int = 4
    """ball dimension"""

    def __post_init__(self):
        if self.dim < 2:
            raise ValueError(f"ToyConfig.dim must be >= 2, got {self.dim}")


@register_dynamics("toy-zp", ToyConfig, "test plug-in with a ball latent")
class ToyBallDynamics(Dynamics):
    state_type = ZPState

    def __init__(self, obs_dim: int, action_dim: int, config: ToyConfig):
        super().__init__()
        d = config.dim
        self.feature_dim = 2 * d
        self.enc = nn.Linear(obs_dim, 2 * d)
        self.kick = nn.Linear(2 * d + action_dim, d)
        self.anchor = geoopt.ManifoldParameter(
            torch.full((d,), 0.6 / d**0.5), manifold=geoopt.PoincareBall()
        )
        self.register_buffer("updates_seen", torch.zeros((), dtype=torch.long))

    def encode(self, obs):
        e_z, e_p = self.enc(obs).chunk(2, -1)
        return ZPState(P.expmap0(0.5 * torch.tanh(e_z)), e_p)

    def context(self, state):
        CALLS[f"context_batch_{'1' if state.batch_shape()[0] == 1 else 'B'}"] += 1
        return {"root": state.z.detach()}

    def next(self, state, action, context=None, *, stochastic=False):
        assert context is not None and context["root"].shape[0] in (1, state.z.shape[0])
        CALLS[f"next_stochastic_{stochastic}"] += 1
        p = state.p + self.kick(torch.cat([self.features(state), action], -1))
        if stochastic:
            p = p + 0.01 * torch.randn_like(p)
        z = P.project(P.expmap(state.z, 0.1 * p * P.inverse_metric_factor(state.z)), 0.99)
        return ZPState(z, p)

    def features(self, state):
        return torch.cat([P.logmap(self.anchor.expand_as(state.z), state.z), state.p], -1)

    def consistency_loss(self, predicted, target):
        CALLS["consistency"] += 1
        return P.dist(predicted.z, target.z).square() + (predicted.p - target.p).square().mean(-1)

    def regularisers(self, states, batch):
        return {"toy_momentum": 1e-3 * states.p.square().mean()}

    def genesis(self, roots, errors):
        assert roots.z.shape == (errors.shape[0], self.anchor.shape[0])
        self.updates_seen += 1
        return []

    def diagnostics(self, batch):
        CALLS["diagnostics"] += 1
        if batch is None:
            return {}, {}
        with torch.no_grad():
            z = self.encode(batch.obs[0]).z
        return {"mean_norm": float(z.norm(dim=-1).mean())}, {"z_norm": z.norm(dim=-1)}


def test_a_ball_latent_dynamics_plugs_in_through_the_registry(tmp_path):
    assert "toy-zp" in dynamics_names()
    assert "toy-zp" in build_parser().format_help()  # a --world-model choice
    CALLS.clear()
    data = tiny(train={"world_model": "toy-zp", "steps": 120})
    data["dynamics"] = {"dim": 3}
    config = RunConfig.from_dict(data)
    agent = Agent(None, config)
    anchor0 = agent.model.dynamics.anchor.detach().clone()
    trainer = Trainer(agent, tmp_path / "run")
    assert trainer.run(120) == "done"
    trainer.close()

    dyn = agent.model.dynamics
    assert int(dyn.updates_seen) == 61  # the growth hook after every update
    assert agent.num_updates == 61
    # context: once per training batch and once per plan (60 training + 50 evaluation plans)
    assert CALLS["context_batch_B"] == 61
    assert CALLS["context_batch_1"] == 60 + 50
    # stochastic steps in the losses only, mean steps in planning
    assert CALLS["next_stochastic_True"] == 61 * config.loss.horizon
    assert CALLS["next_stochastic_False"] > 0
    # the loss's, plus genesis's step-1 errors (this dynamics grows: it overrides genesis)
    assert CALLS["consistency"] == 61 * (config.loss.horizon + 1)
    # diagnostics every 40 updates and once at the end
    assert CALLS["diagnostics"] == 61 // 40 + 1
    # RiemannianAdam moved the anchor and kept it in the ball; the EMA target copy too
    assert not torch.equal(dyn.anchor.detach(), anchor0)
    assert float(dyn.anchor.detach().norm()) < 1.0
    assert float(agent.model._target_dynamics.anchor.norm()) < 1.0

    # the dynamics' buffers and ball parameter are checkpointed and restored
    resumed = Agent.resume(tmp_path / "run")
    assert int(resumed.agent.model.dynamics.updates_seen) == 61
    assert torch.equal(resumed.agent.model.dynamics.anchor, dyn.anchor)
    assert isinstance(resumed.agent.model.dynamics.anchor, geoopt.ManifoldParameter)
    resumed.close()
    assert (tmp_path / "run" / CHECKPOINT_NAME).is_file()

    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0}).Reload()
    tags = events.Tags()
    assert "losses/toy_momentum" in tags["scalars"]
    assert "diagnostics/mean_norm" in tags["scalars"]
    assert "diagnostics/z_norm" in tags["histograms"]


def test_registering_a_second_class_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):

        @register_dynamics("toy-zp", ToyConfig)
        class Other(Dynamics):
            pass
