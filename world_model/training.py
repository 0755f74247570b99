"""World-model and policy losses in TD-MPC2's recipe, usable outside the agent loop.

Given a batch of sub-trajectories (obs_0..obs_H, a_0..a_{H-1}, r_0..r_{H-1}, terminated) the
world-model loss is

    L = c_cons * sum_t rho^t cons(s_{t+1}, enc_target(obs_{t+1})) / H     (latent consistency)
      + c_rew  * sum_t rho^t CE(reward(s_t, a_t), twohot(r_t)) / H        (reward)
      + c_val  * sum_t rho^t sum_q CE(Q_q(s_t, a_t), twohot(y_t)) / (H E) (value, TD)
      + c_dec  * sum_t rho^t |decode(s_t) - obs_t|^2 / (H + 1)             (decoding)
      + the dynamics' own regularisers,

with s_0 = enc(obs_0), s_{t+1} = next(s_t, a_t, context) (stochastic during training) and the TD
target y_t = r_t + gamma (1 - terminated_t) min_q Qbar_q(s'_{t+1}, pi(s'_{t+1})), where s' comes
from the target encoder and Qbar are the target Q heads. `truncated` never stops bootstrapping:
the replay buffer only cuts sub-trajectories at episode ends (terminated or truncated).

Rewards and values are regressed as categorical distributions over bins in symlog space (two-hot
targets), as in TD-MPC2 (Hansen et al. 2024, "TD-MPC2: Scalable, Robust World Models for
Continuous Control"), so one set of hyperparameters copes with any reward scale.

No seed specifies this recipe; seed 003 Prop 96 (failure modes of flat world models) is why a
strong flat baseline, trained exactly like the geodesic model, is needed at all.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from world_model import sharding
from world_model.memory.episodic import MemoryInputs
from world_model.model import EpisodeInputs, LatentState, WorldModel
from world_model.twohot import soft_cross_entropy, symexp, symlog, two_hot, two_hot_inv

__all__ = [
    "symlog",
    "symexp",
    "two_hot",
    "two_hot_inv",
    "soft_cross_entropy",
    "discount_for_episode_length",
    "SequenceBatch",
    "LossConfig",
    "RunningScale",
    "td_target",
    "world_model_loss",
    "policy_loss",
]


def discount_for_episode_length(episode_length: int) -> float:
    """TD-MPC2's heuristic: gamma = (T/5 - 1)/(T/5), clipped to [0.95, 0.995] (200 -> 0.975)."""
    frac = episode_length / 5
    return float(min(max((frac - 1) / frac, 0.95), 0.995))


# ----------------------------------------------------------------------- batch and config


@dataclass
class SequenceBatch:
    """B sub-trajectories of H steps, time-major. No episode ends inside a sub-trajectory except
    possibly at its last step, so obs[t + 1] is the observation after action[t] for every t.

    obs [H+1, B, O], action [H, B, A], reward [H, B, 1], terminated [H, B, 1] (float 0/1),
    truncated [H, B, 1] (float 0/1; informational: truncation bootstraps like any other step);
    optional history_obs [W, B, O] (oldest first) and history_mask [W, B] (bool): the W
    observations before obs[0] in the same episode, for dynamics whose context reads the recent
    trajectory (Dynamics.history_length); steps before the episode's start are masked out;
    optional memory: the transitions before obs[0] in the same episode (at most
    Dynamics.memory_capacity, world_model.memory.episodic.MemoryInputs), for an episodic memory.
    """

    obs: Tensor
    action: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    history_obs: Tensor | None = None
    history_mask: Tensor | None = None
    memory: MemoryInputs | None = None

    def __post_init__(self):
        h1, b = self.obs.shape[:2]
        for name, t in (("action", self.action), ("reward", self.reward)):
            if t.shape[:2] != (h1 - 1, b):
                raise ValueError(
                    f"SequenceBatch: {name} has leading shape {tuple(t.shape[:2])}, "
                    f"expected {(h1 - 1, b)} for obs of shape {tuple(self.obs.shape)}"
                )

    @property
    def horizon(self) -> int:
        return self.action.shape[0]

    @property
    def episode(self) -> EpisodeInputs:
        """What the model's context reads of the episode before each sequence's start."""
        return EpisodeInputs(self.history_obs, self.history_mask, self.memory)

    def to(self, device) -> SequenceBatch:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        return SequenceBatch(**{f.name: move(getattr(self, f.name)) for f in fields(self)})


@dataclass
class LossConfig:
    """Coefficients of the TD-MPC2 loss (defaults: TD-MPC2's, tuned on Pendulum-v1)."""

    horizon: int = 3
    """rollout length H of the multi-step latent loss (train a baseline on the horizon it is judged
    on: an evaluation over k-step predictions needs horizon >= k)"""
    rho: float = 0.5
    """temporal weight rho^t of step t's losses"""
    consistency_coef: float = 20.0
    """weight of the latent consistency loss"""
    reward_coef: float = 0.1
    """weight of the reward cross-entropy"""
    value_coef: float = 0.1
    """weight of the Q cross-entropy against TD targets"""
    decode_coef: float = 0.1
    """weight of the observation-decoding MSE (0 disables the decoder's training)"""
    entropy_coef: float = 1e-4
    """weight of the policy entropy bonus"""

    def __post_init__(self):
        if not (isinstance(self.horizon, int) and self.horizon >= 1):
            raise ValueError(f"LossConfig.horizon must be an integer >= 1, got {self.horizon!r}")
        if not 0.0 < self.rho <= 1.0:
            raise ValueError(f"LossConfig.rho must lie in (0, 1], got {self.rho}")
        for name in ("consistency_coef", "reward_coef", "value_coef", "decode_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"LossConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.entropy_coef < 0:
            raise ValueError(f"LossConfig.entropy_coef must be >= 0, got {self.entropy_coef}")


class RunningScale(nn.Module):
    """Running estimate of the spread of Q values (5th to 95th percentile, EMA with rate tau), by
    which the policy objective is divided (TD-MPC2) so the entropy weight is scale-free."""

    def __init__(self, tau: float = 0.01):
        super().__init__()
        self.tau = tau
        self.register_buffer("value", torch.ones(()))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        levels = torch.tensor([0.05, 0.95], device=x.device)
        q = torch.quantile(x.detach().flatten().float(), levels)
        spread = (q[1] - q[0]).to(self.value.dtype)
        if not bool(self.initialised):
            self.value.copy_(spread)
            self.initialised.fill_(True)
        else:
            self.value.lerp_(spread, self.tau)

    def forward(self, x: Tensor) -> Tensor:
        return x / self.value.clamp_min(1.0)


# ----------------------------------------------------------------------- losses


def _rho_weights(rho: float, n: int, like: Tensor) -> Tensor:
    return rho ** torch.arange(n, dtype=like.dtype, device=like.device)  # [n]


@torch.no_grad()
def td_target(
    model: WorldModel,
    next_state: LatentState,
    reward: Tensor,
    terminated: Tensor,
    discount: float,
    noise: Tensor | None = None,
) -> Tensor:
    """y = r + gamma (1 - terminated) min_q Qbar_q(s', a'), a' ~ pi(s'); shapes [N] -> [N, 1].
    `noise` [N, A]: the policy's standard normal draw (default: a fresh one)."""
    next_action, _ = model.pi(next_state, noise=noise)  # [N, A]
    next_q = model.Q(next_state, next_action, return_type="min", target=True)  # [N, 1]
    return reward + discount * (1.0 - terminated) * next_q


def world_model_loss(
    model: WorldModel, batch: SequenceBatch, discount: float, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor], LatentState]:
    """The world-model loss of the module docstring.

    Returns (total loss, detached scalar terms for logging, the rolled-out latent states
    s_0..s_H stacked [H+1, B] (with graph; detach before the policy loss)).
    """
    horizon, batch_size = batch.horizon, batch.obs.shape[1]
    if horizon != cfg.horizon:
        raise ValueError(f"batch horizon {horizon} != LossConfig.horizon {cfg.horizon}")
    rho = _rho_weights(cfg.rho, horizon + 1, batch.obs)  # [H+1]

    with torch.no_grad():
        next_obs = batch.obs[1:].flatten(0, 1)  # [H*B, O]
        target_next = model.encode(next_obs, target=True)  # [H*B] consistency targets
        online_next = model.encode(next_obs)  # [H*B] TD targets read the online encoder
        # the policy's draw per (step, sequence), sharded with the batch (world_model/sharding.py)
        like = model.policy_parameters()[0]  # the policy's dtype and device, as its own draw has
        noise = sharding.randn((horizon, batch_size, model.action_dim), like, batch_dim=1)
        y = td_target(
            model,
            online_next,
            batch.reward.flatten(0, 1),
            batch.terminated.flatten(0, 1),
            discount,
            noise.flatten(0, 1),
        )  # [H*B, 1]
        y = y.unflatten(0, (horizon, batch_size))  # [H, B, 1]
        target_next = target_next.unflatten((horizon, batch_size))  # [H, B]

    state = model.encode(batch.obs[0])  # [B]
    context = model.context(state, batch.episode)
    states = [state]
    consistency = batch.obs.new_zeros(())
    for t in range(horizon):
        state = model.next(state, batch.action[t], context, stochastic=True)  # [B]
        consistency = consistency + rho[t] * model.consistency_loss(state, target_next[t]).mean()
        states.append(state)
    stacked = type(state).stack(states)  # [H+1, B]

    flat = stacked[:horizon].flatten()  # [H*B] states s_0..s_{H-1}
    actions = batch.action.flatten(0, 1)  # [H*B, A]
    reward_logits = model.reward(flat, actions, return_logits=True)  # [H*B, K]
    q_logits = model.Q(flat, actions, return_type="logits")  # [E, H*B, K]
    bins = model.bins
    reward_ce = soft_cross_entropy(reward_logits, batch.reward.flatten(0, 1), bins)  # [H*B]
    reward_loss = (reward_ce.view(horizon, batch_size).mean(1) * rho[:horizon]).sum()
    value_ce = soft_cross_entropy(
        q_logits, y.flatten(0, 1).expand(q_logits.shape[0], -1, -1), bins
    )  # [E, H*B]
    value_loss = (value_ce.view(-1, horizon, batch_size).mean(2) * rho[:horizon]).sum(1).mean()

    decoded = model.decode(stacked.flatten())  # [(H+1)*B, O]
    decode_err = (decoded - batch.obs.flatten(0, 1)).square().mean(-1)  # [(H+1)*B]
    decode_loss = (decode_err.view(horizon + 1, batch_size).mean(1) * rho).sum() / (horizon + 1)

    consistency = consistency / horizon
    reward_loss = reward_loss / horizon
    value_loss = value_loss / horizon
    total = (
        cfg.consistency_coef * consistency
        + cfg.reward_coef * reward_loss
        + cfg.value_coef * value_loss
        + cfg.decode_coef * decode_loss
    )
    metrics = {
        "consistency": consistency,
        "reward": reward_loss,
        "value": value_loss,
        "decode": decode_loss,
    }
    for name, reg in model.dynamics.regularisers(stacked, batch).items():
        total = total + reg
        metrics[name] = reg
    metrics["world_model"] = total
    metrics["td_target_mean"] = y.mean()
    return total, {k: v.detach() for k, v in metrics.items()}, stacked


def policy_loss(
    model: WorldModel, states: LatentState, scale: RunningScale, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """TD-MPC2's policy objective on detached latent states [T, B]:
    L = -mean_t rho^t mean_b (alpha H(pi(.|s)) + Q(s, a) / scale), a ~ pi(s) reparameterised,
    Q the average of the online heads (their parameters are not trained by this loss)."""
    steps, batch_size = states.batch_shape(2)
    flat = states.flatten()  # [T*B]
    like = model.policy_parameters()[0]  # the policy's dtype and device, as its own draw has
    noise = sharding.randn((steps, batch_size, model.action_dim), like, batch_dim=1)
    action, info = model.pi(flat, noise=noise.flatten(0, 1))  # [T*B, A]
    with model.frozen_q():
        q = model.Q(flat, action, return_type="avg")  # [T*B, 1]
    scale.update(sharding.gather(q))  # the percentiles of the whole (union) batch
    q = scale(q)
    rho = _rho_weights(cfg.rho, steps, q)  # [T]
    objective = (cfg.entropy_coef * info["entropy"] + q.squeeze(-1)).view(steps, batch_size)
    loss = -(objective.mean(1) * rho).mean()
    metrics = {
        "pi": loss.detach(),
        "pi_entropy": info["entropy"].mean().detach(),
        "pi_scale": scale.value.detach().clone(),
        "pi_log_std": info["log_std"].mean().detach(),
    }
    return loss, metrics
