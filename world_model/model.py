"""The world-model interface every dynamics plugs into, and the TD-MPC2-style heads around it.

A *dynamics* (the GRU baseline in `world_model/gru.py`, the geodesic BAOAB model in
`world_model/geodesic/`; `world_model/registry.py` lists them) owns the latent space: it defines
a latent-state dataclass, `encode` (obs -> state), `next` (one env step in latent space),
`features` (state -> flat vector for the heads) and its own consistency loss and regularisers.
`WorldModel` wraps a dynamics with everything that reads latent features: reward, an ensemble of
Q heads (two-hot categorical outputs, `world_model/twohot.py`), the policy prior `pi`, the
observation decoder `decode`, and the target copies (EMA) of the encoder and of the Q heads.

    model = WorldModel(obs_dim, action_dim, GRUDynamics(obs_dim, action_dim, GRUConfig()))
    s = model.encode(obs)                                   # [B] latent state
    ctx = model.context(s)                                  # once per plan() / training batch
    s = model.root(s, ctx)                                  # what every rollout from s shares
    s1 = model.next(s, a, ctx, stochastic=False)            # [B]
    r = model.reward(s, a); q = model.Q(s, a, "avg")        # [B, 1]
    a_pi, info = model.pi(s)                                # [B, A] in [-1, 1]
    obs_hat = model.decode(s1)                              # [B, O]

Stochasticity: `next(..., stochastic=True)` samples the dynamics' noise (used by the training
losses); planning calls it with `stochastic=False` (the mean step). This explicit flag is the only
switch for the dynamics' noise; module train/eval mode only toggles dropout in the Q heads.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from world_model.layers import ACTIVATIONS, QEnsemble, mlp
from world_model.memory.episodic import MemoryInputs
from world_model.twohot import two_hot_inv

__all__ = [
    "LatentState",
    "carried",
    "EpisodeInputs",
    "Dynamics",
    "DynamicsConfig",
    "WorldModelConfig",
    "WorldModel",
]

S = TypeVar("S", bound="LatentState")


# ----------------------------------------------------------------------- latent state


def carried() -> Any:
    """Declare a field of a LatentState that is not one of its tensors but a value computed from
    them and carried with the state, so that the next reader need not recompute it (the heads'
    features, a dynamics' closing-kick terms). Defaults to None, keyword-only, left out of repr
    and equality. Every operation that builds a new state from the tensors (map, and so indexing,
    detach, to, expand, repeat, flatten; stack, cat) leaves it out, since it may depend on
    parameters, a context or the grad mode as well as on the tensors: the new state starts with
    None and recomputes it. A subclass that can carry it through an operation overrides that
    operation explicitly (GeodesicState.expand)."""
    return field(default=None, kw_only=True, repr=False, compare=False, metadata={"carried": True})


def _tensor_fields(cls_or_state) -> list[Field]:
    return [f for f in fields(cls_or_state) if not f.metadata.get("carried", False)]


@dataclass
class LatentState:
    """Base of the latent-state dataclasses. Every field is a tensor whose leading dimensions are
    the batch dimensions ([B, ...], or [T, B, ...] after `stack`); every operation below acts on
    all tensor fields at once, so a subclass only declares its fields:

        @dataclass
        class GRUState(LatentState):
            h: Tensor  # [B, latent_dim]

    Fields declared with `carried()` are not tensors of the state but values carried with it
    (see `carried`): `feature_cache` holds WorldModel.features' result for this state object,
    (grad mode, features [B, F]).
    """

    feature_cache: tuple[bool, Tensor] | None = carried()

    def map(self: S, fn: Callable[[Tensor], Tensor]) -> S:
        """A new state of fn(tensor) for every tensor field (carried values are not carried)."""
        return type(self)(**{f.name: fn(getattr(self, f.name)) for f in _tensor_fields(self)})

    def tensors(self) -> list[Tensor]:
        return [getattr(self, f.name) for f in _tensor_fields(self)]

    def batch_shape(self, ndim: int = 1) -> torch.Size:
        """The first `ndim` dimensions shared by all fields ([B], or [T, B] with ndim=2)."""
        return self.tensors()[0].shape[:ndim]

    def __getitem__(self: S, index) -> S:
        """Index the leading dimension (a time step of a stacked state, or a batch subset)."""
        return self.map(lambda t: t[index])

    def detach(self: S) -> S:
        return self.map(Tensor.detach)

    def to(self: S, device) -> S:
        return self.map(lambda t: t.to(device))

    def expand(self: S, n: int) -> S:
        """A batch of 1 viewed as a batch of n (no copy): [1, ...] -> [n, ...]."""
        return self.map(lambda t: t.expand(n, *t.shape[1:]))

    def repeat(self: S, n: int) -> S:
        """Each batch element repeated n times, consecutively: [B, ...] -> [B * n, ...]."""
        return self.map(lambda t: t.repeat_interleave(n, dim=0))

    def flatten(self: S) -> S:
        """[T, B, ...] -> [T * B, ...]."""
        return self.map(lambda t: t.flatten(0, 1))

    def unflatten(self: S, sizes: tuple[int, int]) -> S:
        """[T * B, ...] -> [T, B, ...]."""
        return self.map(lambda t: t.unflatten(0, sizes))

    @classmethod
    def stack(cls: type[S], states: Sequence[S]) -> S:
        """Stack over time: T states [B, ...] -> [T, B, ...]."""
        names = [f.name for f in _tensor_fields(cls)]
        return cls(**{n: torch.stack([getattr(s, n) for s in states]) for n in names})

    @classmethod
    def cat(cls: type[S], states: Sequence[S]) -> S:
        """Concatenate batches: [B1, ...], [B2, ...] -> [B1 + B2, ...]."""
        names = [f.name for f in _tensor_fields(cls)]
        return cls(**{n: torch.cat([getattr(s, n) for s in states]) for n in names})


@dataclass
class EpisodeInputs:
    """What a dynamics' context reads of the episode before B rollout roots: history_obs
    [W, B, O] (oldest first) with history_mask [W, B] (bool), the W observations before each
    root in its episode (Dynamics.history_length; masked before the episode's start), and
    memory, its transitions before the root (world_model.memory.episodic.MemoryInputs;
    Dynamics.memory_capacity). Each None when not read. Assembled while acting by
    agent.core.episode.episode_inputs and in training by the replay buffer
    (SequenceBatch.episode)."""

    history_obs: Tensor | None = None
    history_mask: Tensor | None = None
    memory: MemoryInputs | None = None


# ----------------------------------------------------------------------- dynamics interface


@dataclass
class DynamicsConfig:
    """Base of the dynamics' config dataclasses (each dynamics validates its own fields)."""


class Dynamics(nn.Module):
    """Latent dynamics: the part of a world model that owns the latent space.

    Subclasses set `state_type` (their LatentState dataclass), `feature_dim` and implement
    `encode`, `next` and `features`. Everything else has a default:

    - `consistency_loss(pred, target) -> [B]`: mean squared error over `features`;
      the geodesic model overrides it with the hyperbolic distance of z and the metric error of
      the transported velocity.
    - `regularisers(states [T, B], batch) -> {name: scalar}`: already weighted, added to the
      loss and logged under `losses/`; default none.
    - `context(state, **inputs) -> Any`: built once per `plan()` (from the root state, batch 1)
      and once per training batch (from s_0, batch B); passed to every `next` of that rollout.
      `next` must accept a context built from a batch of 1 with any batch size. Default None.
      Optional inputs, passed only to a dynamics that asks for them:
      `history_length > 0`: `history` (the encoded states of the last W observations before the
      root in its episode, [B, W], oldest first) and `history_mask` [B, W];
      `memory_capacity > 0`: `memory` (the root's episode's last C transitions as raw
      (obs, action, next_obs), world_model.memory.episodic.MemoryInputs);
      `uses_value_gradient`: `value_fn` (state -> V(state) [B, 1], the agent's current value
      estimate, for dynamics that differentiate it, e.g. a chiral projector).
      Building a context writes into no state.
    - `root(state, context) -> state`: the rollout start with what the first step would
      compute at it, computed once (a planner calls it once per plan, not per iteration);
      default the state itself.
    - `genesis(roots [B], errors [B]) -> [(parameter, rows)]`: called after every update with
      the batch's root states and their one-step prediction errors, for a dynamics that grows
      (DMG prototypes); returns the parameter rows it rewrote, whose optimiser moments the
      agent clears. Default: nothing.
    - `compile_steps()`: run `next` compiled from now on (the agent calls it unless
      train.compile is off); default: nothing to compile.
    - `diagnostics(batch, **inputs) -> (scalars, histograms)`: logged under `diagnostics/`
      every N updates and at the end of every run (batch None when the buffer cannot fill one
      yet); `value_fn` as for `context` when uses_value_gradient; default empty.
    - `parameter_groups() -> {"encoder": [...], "dynamics": [...]}`: the encoder's learning
      rate is scaled (TD-MPC2); default everything in "dynamics".
    - `exact_observation` / `observation(state) -> [B, O]`: a dynamics whose encoder is exactly
      invertible (the latent state is the observation, e.g. the geodesic model's identity
      encoder) sets `exact_observation = True` and returns the observation itself; the world
      model then decodes with it and builds no learned decoder. Default False.

    The agent keeps an EMA copy of the whole dynamics as the target encoder, so `encode` must
    depend on parameters (and buffers) only.
    """

    state_type: type[LatentState] = LatentState
    feature_dim: int
    history_length: int = 0  # W: recent observations the context reads (see context)
    memory_capacity: int = 0  # C: transitions before the root an episodic memory reads
    uses_value_gradient: bool = False  # context receives value_fn (see context)
    exact_observation: bool = False  # observation() inverts encode: no learned decoder

    def encode(self, obs: Tensor) -> LatentState:  # obs [B, O]
        raise NotImplementedError

    def next(
        self, state: LatentState, action: Tensor, context: Any = None, *, stochastic: bool = False
    ) -> LatentState:
        raise NotImplementedError

    def features(self, state: LatentState) -> Tensor:  # -> [B, F]
        """Flat features of the state for the heads: a function of the state's tensors alone,
        without parameters (WorldModel.features computes them once per state object)."""
        raise NotImplementedError

    def consistency_loss(self, predicted: LatentState, target: LatentState) -> Tensor:
        """Per-sample latent consistency loss [B]; default MSE between features."""
        return (self.features(predicted) - self.features(target)).square().mean(-1)

    def observation(self, state: LatentState) -> Tensor:  # -> [B, O]
        """The observation `state` encodes, when exact_observation (encode is invertible)."""
        raise NotImplementedError(f"{type(self).__name__} has no exact observation")

    def regularisers(self, states: LatentState, batch: Any) -> dict[str, Tensor]:
        return {}

    def context(self, state: LatentState, **inputs: Any) -> Any:
        return None

    def root(self, state: LatentState, context: Any) -> LatentState:
        """The state rollouts under `context` start from: `state` [B] with what a step would
        compute at it first and that depends on the state and context alone (carried()
        fields). A planner calls it once per plan on its rows, whose every iteration then
        starts from them: computed once, not once per iteration. Default: `state`."""
        return state

    def genesis(self, roots: LatentState, errors: Tensor) -> list[tuple[Tensor, Tensor]]:
        return []

    def compile_steps(self) -> bool:
        """Run `next` compiled from now on, where the dynamics has a compiled form (the
        geodesic model's integrator); whether it has. Default: nothing to compile."""
        return False

    def diagnostics(self, batch: Any, **inputs: Any) -> tuple[dict[str, float], dict[str, Tensor]]:
        return {}, {}

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"encoder": [], "dynamics": list(self.parameters())}


# ----------------------------------------------------------------------- world model


@dataclass
class WorldModelConfig:
    """Heads around the dynamics (TD-MPC2 layout; widths tuned on Pendulum-v1 for CPU)."""

    hidden_dim: int = 128
    """width of the reward, Q, policy and decoder MLPs"""
    hidden_layers: int = 2
    """hidden layers per head"""
    activation: str = "silu"
    """activation of every head: silu, mish or elu (silu was 2x faster than mish on CPU)"""
    num_q: int = 2
    """Q heads in the ensemble; 'min' and 'avg' read all of them"""
    q_dropout: float = 0.0
    """dropout after the first layer of each Q head, train mode only (TD-MPC2: 0.01; off by
    default: on the CPU it costs more than the layer's matmul, docs/measurements.md, "Numbers
    behind config defaults")"""
    num_bins: int = 101
    """bins of the two-hot reward and value distributions"""
    vmin: float = -10.0
    """lowest bin, in symlog space"""
    vmax: float = 10.0
    """highest bin, in symlog space"""
    log_std_min: float = -10.0
    """lower bound of the policy's log standard deviation"""
    log_std_max: float = 2.0
    """upper bound of the policy's log standard deviation"""

    def __post_init__(self):
        for name in ("hidden_dim", "hidden_layers", "num_q", "num_bins"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"WorldModelConfig.{name} must be an integer >= 1, got {value!r}")
        if self.num_bins < 2:
            raise ValueError(f"WorldModelConfig.num_bins must be >= 2, got {self.num_bins}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"WorldModelConfig.activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {self.activation!r}"
            )
        if not 0.0 <= self.q_dropout < 1.0:
            raise ValueError(f"WorldModelConfig.q_dropout must lie in [0, 1), got {self.q_dropout}")
        if not self.vmin < self.vmax:
            raise ValueError(f"WorldModelConfig needs vmin < vmax, got {self.vmin}, {self.vmax}")
        if not self.log_std_min < self.log_std_max:
            raise ValueError("WorldModelConfig needs log_std_min < log_std_max")


class WorldModel(nn.Module):
    """A dynamics plus the heads that read its latent features (see the module docstring)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        dynamics: Dynamics,
        config: WorldModelConfig | None = None,
    ):
        super().__init__()
        cfg = config or WorldModelConfig()
        self.config = cfg
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.dynamics = dynamics
        feat = dynamics.feature_dim
        hidden = [cfg.hidden_dim] * cfg.hidden_layers
        self._reward = mlp(feat + action_dim, hidden, cfg.num_bins, cfg.activation)
        self._q = QEnsemble(
            cfg.num_q, feat + action_dim, hidden, cfg.num_bins, cfg.activation, cfg.q_dropout
        )
        self._pi = mlp(feat, hidden, 2 * action_dim, cfg.activation)
        # a dynamics whose latent state is the observation decodes exactly, without a head
        self._decoder = (
            None if dynamics.exact_observation else mlp(feat, hidden, obs_dim, cfg.activation)
        )
        # TD-MPC2: zero-initialised output layers give reward = Q = 0 at the start
        for layer in (self._reward[-1], self._q.out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.register_buffer("bins", torch.linspace(cfg.vmin, cfg.vmax, cfg.num_bins))
        self._target_dynamics = copy.deepcopy(dynamics).requires_grad_(False)
        self._target_q = copy.deepcopy(self._q).requires_grad_(False)
        self.train()

    # -- mode: target copies stay in eval mode (no dropout in TD targets)
    def train(self, mode: bool = True) -> WorldModel:
        super().train(mode)
        self._target_dynamics.eval()
        self._target_q.eval()
        return self

    # -- the dynamics' interface, forwarded
    def encode(self, obs: Tensor, *, target: bool = False) -> LatentState:
        """obs [B, O] -> latent state [B] (with the EMA target encoder if target=True)."""
        return (self._target_dynamics if target else self.dynamics).encode(obs)

    def next(
        self, state: LatentState, action: Tensor, context: Any = None, *, stochastic: bool = False
    ) -> LatentState:
        """One env step in latent space: state [B], action [B, A] -> state [B]."""
        return self.dynamics.next(state, action, context, stochastic=stochastic)

    def context(self, state: LatentState, episode: EpisodeInputs | None = None) -> Any:
        """The dynamics' context for rollouts from `state` [B], given what it reads of the
        episode before each root (`episode`): its history observations are encoded here and
        passed on only to a dynamics with history_length > 0, its memory only to one with
        memory_capacity > 0, and value_fn only to one with uses_value_gradient."""
        dyn = self.dynamics
        episode = episode or EpisodeInputs()
        inputs: dict[str, Any] = {}
        if dyn.memory_capacity > 0 and episode.memory is not None:
            inputs["memory"] = episode.memory
        if dyn.history_length > 0 and episode.history_obs is not None:
            history_obs, history_mask = episode.history_obs, episode.history_mask
            w, b = history_obs.shape[:2]
            encoded = dyn.encode(history_obs.flatten(0, 1))  # [W * B]
            inputs["history"] = encoded.unflatten((w, b)).map(lambda t: t.transpose(0, 1))
            inputs["history_mask"] = (
                history_mask.transpose(0, 1) if history_mask is not None else None
            )
        if dyn.uses_value_gradient:
            inputs["value_fn"] = self.value
        return dyn.context(state, **inputs)

    def root(self, state: LatentState, context: Any) -> LatentState:
        """The state rollouts under `context` start from (Dynamics.root): state [B] -> [B]."""
        return self.dynamics.root(state, context)

    def diagnostics(self, batch: Any) -> tuple[dict[str, float], dict[str, Tensor]]:
        """The dynamics' diagnostics (Dynamics.diagnostics), with value_fn when it asks."""
        if self.dynamics.uses_value_gradient:
            return self.dynamics.diagnostics(batch, value_fn=self.value)
        return self.dynamics.diagnostics(batch)

    @property
    def history_length(self) -> int:
        """W, the observations before a root that the dynamics' context reads."""
        return self.dynamics.history_length

    @property
    def memory_capacity(self) -> int:
        """C, the transitions before a root that the dynamics' episodic memory reads (0: none)."""
        return self.dynamics.memory_capacity

    def value(self, state: LatentState) -> Tensor:
        """V(s) = mean_q Q_q(s, mean action of pi(s)): the value estimate handed to dynamics that
        differentiate it (Dynamics.uses_value_gradient). [B] -> [B, 1]."""
        action, _ = self.pi(state, deterministic=True)
        return self.Q(state, action, return_type="avg")

    def features(self, state: LatentState) -> Tensor:
        """The dynamics' features of `state` [B, F], computed once per state object and grad
        mode and kept in its carried field `feature_cache`: the heads read a state's features
        several times (reward and Q in the loss, pi and Q in the value and the policy loss,
        reward and pi per planning step), and a dynamics' features are a function of the state
        alone (no parameters)."""
        grad = torch.is_grad_enabled()
        cached = state.feature_cache
        if cached is not None and cached[0] == grad:
            return cached[1]
        features = self.dynamics.features(state)
        state.feature_cache = (grad, features)
        return features

    def consistency_loss(self, predicted: LatentState, target: LatentState) -> Tensor:
        return self.dynamics.consistency_loss(predicted, target)  # [B]

    # -- heads
    def decode(self, state: LatentState) -> Tensor:
        """Latent state [B] -> predicted observation [B, O] (the dynamics' exact observation
        when it has one, else the learned decoder)."""
        if self._decoder is None:
            return self.dynamics.observation(state)
        return self._decoder(self.features(state))

    def reward(self, state: LatentState, action: Tensor, *, return_logits: bool = False) -> Tensor:
        """Predicted reward [B, 1] (or its bin logits [B, K])."""
        logits = self._reward(torch.cat([self.features(state), action], dim=-1))
        return logits if return_logits else two_hot_inv(logits, self.bins)

    def Q(
        self, state: LatentState, action: Tensor, return_type: str = "min", *, target: bool = False
    ) -> Tensor:
        """Q values of the ensemble: return_type 'logits' [E, B, K], 'all' [E, B, 1],
        'min' or 'avg' over the heads [B, 1]."""
        x = torch.cat([self.features(state), action], dim=-1)  # [B, F + A]
        logits = (self._target_q if target else self._q)(x)  # [E, B, K]
        if return_type == "logits":
            return logits
        values = two_hot_inv(logits, self.bins)  # [E, B, 1]
        if return_type == "all":
            return values
        if return_type == "min":
            return values.min(0).values
        if return_type == "avg":
            return values.mean(0)
        raise ValueError(f"Q: return_type must be logits, all, min or avg, got {return_type!r}")

    def pi(
        self,
        state: LatentState,
        *,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Policy prior: tanh-squashed Gaussian on the latent features.
        Returns the action [B, A] in [-1, 1] (the mean's tanh if deterministic) and
        {'mean' [B, A], 'log_std' [B, A], 'log_prob' [B], 'entropy' [B]}. `noise` [B, A]: the
        standard normal draw to use (a planner drawing per environment), else from
        `generator`."""
        cfg = self.config
        mean, log_std = self._pi(self.features(state)).chunk(2, dim=-1)  # [B, A] each
        log_std = cfg.log_std_min + 0.5 * (cfg.log_std_max - cfg.log_std_min) * (
            torch.tanh(log_std) + 1
        )
        if deterministic:
            eps = torch.zeros_like(mean)
        elif noise is not None:
            eps = noise.to(mean)
        else:
            eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        pre_tanh = mean + eps * log_std.exp()
        action = torch.tanh(pre_tanh)
        log_prob = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - torch.log(F.relu(1 - action.square()) + 1e-6).sum(-1)
        info = {
            "mean": torch.tanh(mean),
            "log_std": log_std,
            "log_prob": log_prob,
            "entropy": -log_prob,
        }
        return action, info

    # -- optimisation helpers
    def policy_parameters(self) -> list[nn.Parameter]:
        return list(self._pi.parameters())

    def decoder_parameters(self) -> list[nn.Parameter]:
        """The learned decoder's parameters (none when the dynamics decodes exactly)."""
        return [] if self._decoder is None else list(self._decoder.parameters())

    def model_parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters trained by the world-model loss: the dynamics' groups plus the heads."""
        groups = self.dynamics.parameter_groups()
        heads = [*self._reward.parameters(), *self._q.parameters(), *self.decoder_parameters()]
        return {
            "encoder": list(groups.get("encoder", [])),
            "dynamics": list(groups.get("dynamics", [])),
            "heads": heads,
        }

    @contextlib.contextmanager
    def frozen_q(self) -> Iterator[None]:
        """Evaluate the online Q heads without accumulating gradients in their parameters."""
        params = list(self._q.parameters())
        flags = [p.requires_grad for p in params]
        for p in params:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p, flag in zip(params, flags, strict=True):
                p.requires_grad_(flag)

    @torch.no_grad()
    def update_targets(self, q_tau: float, encoder_tau: float) -> None:
        """EMA: target <- (1 - tau) target + tau online, for the Q heads and the dynamics."""
        for online, target, tau in (
            (self._q, self._target_q, q_tau),
            (self.dynamics, self._target_dynamics, encoder_tau),
        ):
            pairs = list(zip(online.parameters(), target.parameters(), strict=True))
            same = [(s, t) for s, t in pairs if s.shape == t.shape]
            if same:
                torch._foreach_lerp_([t.data for _, t in same], [s.data for s, _ in same], tau)
            for s, t in pairs:  # a parameter that changed shape (e.g. a grown prototype pool)
                if s.shape != t.shape:
                    t.data = s.detach().clone()
            for b_src, b_dst in zip(online.buffers(), target.buffers(), strict=True):
                if b_dst.shape == b_src.shape:
                    b_dst.copy_(b_src)
                else:
                    b_dst.data = b_src.detach().clone()
