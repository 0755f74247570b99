"""world_model/memory/episodic.py and its plumbing: the buffer hands each sample exactly its
episode's transitions before the start (causal), the read-out is a potential (inverse-distance
blend of linear patches, against geoopt's distance) whose force is its gradient and keeps the
kick conservative (energy error of second order), the residual is what the model's kick leaves
unexplained, the planner remembers its episode's executed transitions, and the config refuses
unknown and removed operators."""

from __future__ import annotations

import dataclasses

import geoopt
import pytest
import torch

from agent.core.buffer import ReplayBuffer
from agent.core.episode import EpisodeSoFar, episode_inputs
from agent.core.planner import Planner, PlannerConfig, _rows_inputs, plan_batch
from world_model.geodesic import GeodesicConfig, GeodesicDynamics, kick
from world_model.geodesic.config import ContextConfig
from world_model.memory.episodic import (
    EpisodicMemory,
    MemoryBank,
    MemoryInputs,
    empirical_residual,
)
from world_model.model import WorldModel, WorldModelConfig

LENGTHS = (7, 3, 12, 5, 9, 6)


def _fill(buffer: ReplayBuffer) -> None:
    """obs = (global step, episode), next_obs = (step + 1, episode), action = step / 100."""
    step = 0
    for e, length in enumerate(LENGTHS):
        for t in range(length):
            end = t == length - 1
            buffer.add([step, e], [step / 100], 0.0, [step + 1, e], False, end)
            step += 1


def _first_step_of(step: int) -> int:
    first = 0
    for length in LENGTHS:
        if step < first + length:
            return first
        first += length
    raise ValueError(step)


@pytest.mark.parametrize("capacity", [1000, 30])
def test_each_sample_holds_its_episodes_transitions_before_the_start(capacity):
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=capacity, seed=3)
    _fill(buffer)  # the ring of 30 has overwritten the oldest 12 steps
    batch = buffer.sample(batch_size=300, horizon=2, memory=5)
    mem = batch.memory
    assert mem.index.shape == mem.mask.shape == (5, 300)
    # every distinct transition is stored once
    assert torch.unique(mem.obs[:, 0]).numel() == mem.obs.shape[0]
    start = batch.obs[0, :, 0]
    oldest = sum(LENGTHS) - len(buffer)
    for k in range(5):  # k = 0 is the oldest entry, 5 steps back
        back = 5 - k
        first = torch.tensor([_first_step_of(int(s)) for s in start])
        expected = (start - back >= first) & (start - back >= oldest)
        assert torch.equal(mem.mask[k], expected)
        rows = mem.index[k][expected]
        assert torch.equal(mem.obs[rows, 0], start[expected] - back)
        assert torch.equal(mem.obs[rows, 1], batch.obs[0, expected, 1])  # the same episode
        assert torch.allclose(mem.action[rows, 0], (start[expected] - back) / 100)
        # causal: an entry's next observation is at most the start's observation
        assert (mem.next_obs[rows, 0] <= start[expected]).all()
    assert mem.mask.any() and not mem.mask.all()
    # next_row: where an entry's next step is held, its obs is the entry's next_obs; where not
    # held, no distinct transition is that next step
    held = mem.next_row >= 0
    assert held.any() and not held.all()
    assert torch.equal(mem.obs[mem.next_row[held]], mem.next_obs[held])
    assert not torch.isin(mem.next_obs[~held, 0], mem.obs[:, 0]).any()


def test_sampling_with_a_memory_draws_the_same_sub_trajectories():
    """The memory adds inputs without touching the sampling stream (a run without memory
    trains as before)."""
    a, b = (ReplayBuffer(obs_dim=2, action_dim=1, capacity=100, seed=4) for _ in range(2))
    _fill(a)
    _fill(b)
    plain, with_memory = a.sample(64, 2), b.sample(64, 2, memory=8)
    assert torch.equal(plain.obs, with_memory.obs) and plain.memory is None


def test_read_out_is_finite_and_zero_without_entries():
    """Queries on entries and near the boundary keep the potential, the force and their
    gradients finite; a sample without entries reads 0."""
    torch.manual_seed(0)
    memory = EpisodicMemory()
    with torch.no_grad():
        memory.gate.fill_(1.0)
    keys = geoopt.PoincareBall().expmap0(0.5 * torch.randn(3, 10, 4))
    keys[0, 3] = 0.999 * keys[0, 3] / keys[0, 3].norm()  # an entry at the boundary
    z = 0.3 * torch.randn(3, 4)
    z[0], z[2] = keys[0, 3], keys[2, 8]  # queries on entries
    z.requires_grad_(True)
    values = torch.randn(3, 10, 4)
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1] = False  # a sample whose episode has just begun
    mask[2, :7] = False
    phi, force = memory(z, MemoryBank(keys, values, mask), tension=0.1)
    assert phi.shape == (3,) and force.shape == (3, 4)
    assert torch.isfinite(phi).all() and torch.isfinite(force).all()
    assert phi[1] == 0 and (force[1] == 0).all()
    (phi.sum() + force.square().sum()).backward()
    assert torch.isfinite(z.grad).all() and torch.isfinite(memory.gate.grad)
    assert torch.isfinite(memory.log_eps.grad) and memory.log_eps.grad != 0  # a learned bandwidth


def _patches_by_geoopt(z, keys, values, mask, eps, tension):
    """Phi(z) = sum_i W_i <f_i, z_i - z> with W_i ∝ (d^2 + eps)^-1 exp(-sigma d^2 / 2), d by
    geoopt's distance: the blend of linear patches written out entry by entry. z [d]."""
    ball = geoopt.PoincareBall()
    d2 = ball.dist(z[None], keys).square()  # [C]
    w = torch.exp(-0.5 * tension * d2) / (d2 + eps) * mask
    return (w * ((keys - z) * values).sum(-1)).sum() / w.sum()


def test_the_read_out_is_a_potential_and_its_force_is_its_gradient():
    """The potential is the inverse-distance blend of linear patches (against geoopt's
    distance), and the closed-form force is minus its autograd gradient, to 1e-9 in float64."""
    torch.manual_seed(1)
    ball = geoopt.PoincareBall()
    memory = EpisodicMemory(eps=1e-3).double()
    with torch.no_grad():
        memory.gate.fill_(0.7)
    z = ball.expmap0(0.4 * torch.randn(2, 3, dtype=torch.float64)).requires_grad_(True)
    keys = ball.expmap0(0.6 * torch.randn(2, 6, 3, dtype=torch.float64))
    values = torch.randn(2, 6, 3, dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, :2] = False
    phi, force = memory(z, MemoryBank(keys, values, mask), tension=0.3)
    (grad,) = torch.autograd.grad(phi.sum(), z)
    torch.testing.assert_close(force, -grad, rtol=1e-9, atol=1e-9)
    for b in range(2):
        eps = float(memory.eps.detach())  # the learned bandwidth, 1e-3 at the start
        expected = 0.7 * _patches_by_geoopt(z[b], keys[b], values[b], mask[b], eps, 0.3)
        torch.testing.assert_close(phi[b], expected, rtol=1e-9, atol=1e-12)
    # at an entry the force is nearly that entry's residual (its weight dominates)
    phi, force = memory(keys[1, :3].detach(), MemoryBank(keys[1:], values[1:], mask[1:]))
    torch.testing.assert_close(force, 0.7 * values[1, :3], rtol=0.1, atol=0.1)


@pytest.mark.parametrize("offset", [1e-6, 1e-3, 0.1])
def test_near_an_entry_the_read_is_a_gradient_and_float32_keeps_float64s_accuracy(offset):
    """Queries at hyperbolic offsets 1e-6..0.1 from entries (where the matrix-product read's
    distance ratio d / |(-z) (+) z_i| switches to its series, and where z_i - z cancels): in
    float64 the force is minus the autograd gradient; in float32 the potential, the force and
    the force's gradient in z agree with float64's to 1e-5 relative."""
    torch.manual_seed(4)
    ball = geoopt.PoincareBall()
    keys = ball.expmap0(0.5 * torch.randn(1, 32, 5, dtype=torch.float64))
    values = torch.randn(1, 32, 5, dtype=torch.float64)
    mask = torch.ones(1, 32, dtype=torch.bool)
    near = keys[0, torch.arange(40) % 32]  # [40, 5]
    step = torch.nn.functional.normalize(torch.randn(40, 5, dtype=torch.float64), dim=-1)
    z = ball.expmap(near, offset * step / ball.lambda_x(near, keepdim=True))  # d_H = offset
    torch.testing.assert_close(ball.dist(z, near), torch.full((40,), offset, dtype=z.dtype))

    def read(z, dtype):
        memory = EpisodicMemory().to(dtype)
        with torch.no_grad():
            memory.gate.fill_(1.0)
        z = z.to(dtype).requires_grad_(True)
        bank = MemoryBank(keys.to(dtype), values.to(dtype), mask)
        phi, force = memory(z, bank, tension=0.5)
        (grad_phi,) = torch.autograd.grad(phi.sum(), z, retain_graph=True)
        (grad_force,) = torch.autograd.grad(force.square().sum(), z)
        return phi, force, -grad_phi, grad_force

    phi64, force64, minus_grad, grad_force64 = read(z, torch.float64)
    torch.testing.assert_close(force64, minus_grad, rtol=1e-8, atol=1e-9)
    phi32, force32, _, grad_force32 = read(z, torch.float32)
    for low, high in ((phi32, phi64), (force32, force64), (grad_force32, grad_force64)):
        assert float((low.double() - high).norm() / high.norm()) < 1e-5


def test_node_70s_screened_mass_of_the_memory_in_closed_form():
    """EpisodicMemory.screened_mass: 1 without tension; for one entry exp(-sigma d^2 / 2) with
    d geoopt's distance; for several, the kernel-weighted mean of those factors; 0 with no
    entry; and it falls as the tension grows."""
    ball = geoopt.PoincareBall()
    memory = EpisodicMemory(eps=0.3).double()
    z = ball.expmap0(0.4 * torch.randn(3, 4, dtype=torch.float64))
    keys = ball.expmap0(0.6 * torch.randn(3, 5, 4, dtype=torch.float64))
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 1:] = False  # one entry
    mask[2] = False  # none
    bank = MemoryBank(keys, torch.zeros_like(keys), mask)
    torch.testing.assert_close(memory.screened_mass(z, bank, 0.0)[:2], torch.ones(2).double())
    d2 = ball.dist(z.unsqueeze(1), keys).square()  # [3, 5]
    got = memory.screened_mass(z, bank, 0.7)
    torch.testing.assert_close(got[1], torch.exp(-0.35 * d2[1, 0]))
    kernel = 1.0 / (d2[0] + 0.3)
    torch.testing.assert_close(got[0], (kernel * torch.exp(-0.35 * d2[0])).sum() / kernel.sum())
    assert got[2] == 0.0 and memory.screened_mass(z, bank, 3.0)[0] < got[0]


@pytest.mark.parametrize("held", [True, False])
def test_a_shared_bank_read_by_all_rows_at_once_equals_each_row_reading_its_copy(held):
    """A plan's root bank (batch 1) is read as one call with the rows as its queries; each row's
    output is the one it gets from its own (expanded) copy of the bank, read row by row."""
    torch.manual_seed(3)
    ball = geoopt.PoincareBall()
    memory = EpisodicMemory().double()
    with torch.no_grad():
        memory.gate.fill_(0.9)
    z = ball.expmap0(0.5 * torch.randn(7, 4, dtype=torch.float64))
    keys = ball.expmap0(0.6 * torch.randn(1, 9, 4, dtype=torch.float64))
    values = torch.randn(1, 9, 4, dtype=torch.float64)
    mask = torch.ones(1, 9, dtype=torch.bool)
    mask[0, :3] = False
    if not held:
        mask[:] = False
    shared = memory(z, MemoryBank(keys, values, mask))
    copies = MemoryBank(*(t.expand(7, *t.shape[1:]) for t in (keys, values, mask)))
    for one, other in zip(shared, memory(z, copies), strict=True):
        torch.testing.assert_close(one, other, rtol=1e-10, atol=1e-12)
    assert bool(shared[1].abs().sum() > 0) == held


def _identity_dynamics(memory: str = "dense") -> GeodesicDynamics:
    torch.manual_seed(2)
    cfg = GeodesicConfig(
        latent_dim=4,
        encoder="identity",
        context=ContextConfig(
            prototypes=8, feature_dim=8, window=0, memory=memory, routing="dense"
        ),
    )
    dyn = GeodesicDynamics(obs_dim=8, action_dim=2, config=cfg)
    with torch.no_grad():  # a kick head that is not zero, and a state-dependent control gain
        dyn.integrator.kick_head.w_o.weight.normal_(0.0, 0.5)
        if dyn.integrator.control_mlp is not None:
            dyn.integrator.control_mlp[-1].weight.normal_(0.0, 0.5)
    return dyn


def test_residual_is_the_momentum_change_the_models_kick_does_not_explain():
    """Transitions whose momentum changes by h (F_kick(z, a) + F0): the memory's values are F0,
    at every sample's entries in order (identity encoder: the latent is the observation)."""
    dyn = _identity_dynamics()
    h = dyn.config.integrator.dt
    ball = geoopt.PoincareBall()
    z = ball.expmap0(0.5 * torch.randn(5, 4))
    p, a = torch.randn(5, 4), torch.rand(5, 2) * 2 - 1
    f0 = torch.randn(5, 4)
    integ = dyn.integrator
    with torch.no_grad():
        terms = integ.position_terms(z, integ.build_context(dyn.prototypes, None))
        kick = terms.force + integ.control_force(z, a, terms.gain)
    inputs = MemoryInputs(
        obs=torch.cat([z, p], -1),
        action=a,
        next_obs=torch.cat([z, p + h * (kick + f0)], -1),
        index=torch.tensor([[0, 3], [1, 4], [2, 0]]),  # [C = 3, B = 2]
        mask=torch.tensor([[True, False], [True, True], [True, True]]),
    )
    bank = dyn.memory_bank(inputs)
    # transition 1's next observation held as row 2 of obs and next_row saying so: the bank
    # reads it there (its own next_obs row, zeroed here, is not read); rows with -1 still
    # read their next_obs
    moved, unread = inputs.obs.clone(), inputs.next_obs.clone()
    moved[2], unread[1] = inputs.next_obs[1], 0.0
    shared = dataclasses.replace(
        inputs, obs=moved, next_obs=unread, next_row=torch.tensor([-1, 2, -1, -1, -1])
    )
    values = dyn.memory_bank(shared).values
    torch.testing.assert_close(values[0, :2], f0[[0, 1]], rtol=1e-4, atol=1e-4)
    assert bank.keys.shape == bank.values.shape == (2, 3, 4)
    torch.testing.assert_close(bank.values[0], f0[[0, 1, 2]], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bank.values[1, 1:], f0[[4, 0]], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bank.keys[1, 1:], z[[4, 0]])
    assert not bank.values.requires_grad  # data for the read-out, not a gradient path


def test_the_memory_force_enters_the_kick_through_the_gate():
    dyn = _identity_dynamics()
    ball = geoopt.PoincareBall()
    z = ball.expmap0(0.3 * torch.randn(2, 4))
    bank = MemoryBank(
        ball.expmap0(0.3 * torch.randn(2, 5, 4)), torch.randn(2, 5, 4), torch.ones(2, 5).bool()
    )
    context = dyn.integrator.build_context(dyn.prototypes, None)
    with torch.no_grad():
        without, _ = dyn.integrator.kick_force(z, context)
        context.memory = bank
        closed, _ = dyn.integrator.kick_force(z, context)  # gate 0 at the start
        dyn.integrator.memory.gate.fill_(2.0)
        opened, _ = dyn.integrator.kick_force(z, context)
    torch.testing.assert_close(closed, without)
    tension = dyn.integrator.kick_head.string_tension()[1]  # the texture level's sigma
    torch.testing.assert_close(opened - without, dyn.integrator.memory(z, bank, tension)[1])
    assert (opened - without).abs().max() > 1e-3


def test_with_the_memory_the_kick_is_minus_the_gradient_of_the_hamiltonians_potential():
    """The whole position-only kick (head, confinement, memory) against autograd of the
    potential that hamiltonian() reads, at trained-looking parameters, in float64."""
    dyn = _identity_dynamics().double()
    ball = geoopt.PoincareBall()
    integ = dyn.integrator
    with torch.no_grad():
        integ.memory.gate.fill_(1.5)
    z = ball.expmap0(0.4 * torch.randn(3, 4, dtype=torch.float64)).requires_grad_(True)
    keys = ball.expmap0(0.4 * torch.randn(3, 6, 4, dtype=torch.float64))
    bank = MemoryBank(keys, torch.randn(3, 6, 4, dtype=torch.float64), torch.ones(3, 6).bool())
    context = integ.build_context(dyn.prototypes, None)
    context.memory = bank
    (grad,) = torch.autograd.grad(kick.potential(integ, z, context).sum(), z)
    force, _ = integ.kick_force(z, context)
    torch.testing.assert_close(force, -grad, rtol=1e-8, atol=1e-10)
    context.memory = None
    without, _ = integ.kick_force(z, context)
    assert (force - without).abs().max() > 1e-2  # the memory's part is not zero


def test_with_the_memory_frictionless_rollouts_conserve_energy_to_second_order():
    """Frictionless, action-free, noise-free B-A-B steps with the memory's potential in the
    kick: the energy error is bounded and falls ~4x when the step halves (a symplectic splitting
    of H = K + Phi with Phi_mem inside Phi); the non-gradient read-out it replaces drifted 7.7
    over 200 steps (docs/measurements.md)."""
    ball = geoopt.PoincareBall()
    worst = []
    for dt in (0.1, 0.05):
        dyn = _identity_dynamics("dense").double()
        dyn.config.integrator.dt = dt
        integ = dyn.integrator
        torch.manual_seed(4)
        with torch.no_grad():
            integ.memory.gate.fill_(1.0)
            integ.friction_raw.fill_(-1.0)  # relu: friction 0
        keys = ball.expmap0(0.5 * torch.randn(1, 16, 4, dtype=torch.float64))
        residuals = torch.randn(1, 16, 4, dtype=torch.float64)
        bank = MemoryBank(keys, residuals, torch.ones(1, 16).bool())
        z = ball.expmap0(0.3 * torch.randn(8, 4, dtype=torch.float64))
        p = 0.5 * torch.randn(8, 4, dtype=torch.float64)
        with torch.no_grad():
            context = integ.build_context(dyn.prototypes, None)
            context.memory = bank
            context.ou = integ.ou_coefficients()
            h0 = integ.hamiltonian(z, p, context)
            err = torch.zeros_like(h0)
            action = torch.zeros(8, 2, dtype=torch.float64)
            for _ in range(round(2.0 / dt)):  # the same time span
                z, p, _ = integ(z, p, action, context)
                err = torch.maximum(err, (integ.hamiltonian(z, p, context) - h0).abs())
        worst.append(float((err / h0.abs()).max()))
    assert worst[0] < 0.05
    assert 2.5 < worst[0] / worst[1] < 6.0, worst


def test_the_episode_so_far_remembers_its_executed_transitions():
    """Acting as the agent does (agent.core.agent.Agent.act_batch: the episodes' inputs, one batched
    plan, each action joining its episode), every plan completes the previous step's (obs,
    action) with its observation; reset starts a new episode; the last `capacity` are kept; two
    environments index their own, and the planner repeats them for its rows."""
    torch.manual_seed(3)
    dyn = _identity_dynamics()
    model = WorldModel(8, 2, dyn, WorldModelConfig(hidden_dim=16))
    cfg = PlannerConfig(horizon=2, iterations=1, num_samples=16, num_elites=4, num_pi_trajs=2)
    planners = [Planner(cfg, 2, 0.99) for _ in range(2)]
    episodes = [EpisodeSoFar() for _ in range(2)]
    g = [torch.Generator().manual_seed(i) for i in range(2)]
    observations, actions = [], []
    for t in range(6):
        obs = torch.cat([0.1 * torch.randn(1, 4), torch.randn(1, 4)], -1)
        if t == 4:
            episodes[1].reset()  # env 1's episode ends here
        observations.append(obs)
        both = obs.expand(2, -1)
        inputs = episode_inputs(episodes, both, model.history_length, model.memory_capacity)
        chosen = plan_batch(planners, model, both, inputs, explore=True, generators=g)
        for episode, o, a in zip(episodes, both, chosen, strict=True):
            episode.acted(o, a)
        actions.append(chosen[0])
    held = episodes[0].transitions
    assert len(held) == 5
    for t, (o, a, o2) in enumerate(held):
        assert torch.equal(o, observations[t][0]) and torch.equal(o2, observations[t + 1][0])
        assert torch.equal(a, actions[t])
    assert len(episodes[1].transitions) == 1  # reset at t = 4: one transition since
    now = torch.cat([0.1 * torch.randn(1, 4), torch.randn(1, 4)], -1)
    inputs = episode_inputs(episodes, now.expand(2, -1), 0, 64)
    memory = _rows_inputs(inputs, 3).memory  # 3 rows per env
    assert memory.obs.shape[0] == 6 + 2  # the new obs completes each env's pending step
    assert memory.mask[:, :3].sum(0).tolist() == [6, 6, 6]
    assert memory.mask[:, 3:].sum(0).tolist() == [2, 2, 2]
    rows = memory.index[-1, 3][None]
    assert torch.equal(memory.next_obs[rows][0], now[0])
    small = EpisodeSoFar()
    for _ in range(5):
        small.acted(now[0], torch.zeros(2))
        episode_inputs([small], now, 0, 3)
    assert len(small.transitions) == 3


def test_unknown_memory_operator_is_a_clear_error():
    with pytest.raises(ValueError, match="GeodesicConfig.context.memory must be one of"):
        ContextConfig(memory="lstm")
    with pytest.raises(ValueError, match="context.memory = 'fp' was removed"):
        GeodesicConfig.migrate_removed({"context": {"memory": "fp"}})
    saved = {"context": {"memory": "dense", "memory_anchors": 16}}  # a run saved before
    kept = {"context": {"memory": "dense", "routing": "dense"}}  # routing: the fixed table then
    assert GeodesicConfig.migrate_removed(saved) == kept
    with pytest.raises(ValueError, match="memory_capacity must be an integer >= 1"):
        ContextConfig(memory="dense", memory_capacity=0)


def test_memory_inputs_refuse_mismatched_rows_and_move_to_a_device():
    """MemoryInputs refuses an action or a next_obs that does not match obs's rows, and an
    index / mask pair that is not two equal [C, B] tensors (each alone); `to` moves every
    field (the meta device stands in for an accelerator)."""
    obs, action = torch.zeros(4, 3), torch.zeros(4, 2)
    index, mask = torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool)
    rows = "^MemoryInputs: obs, action and next_obs need one row per transition, got "
    with pytest.raises(ValueError, match=rows + r"\(4, 3\), \(3, 2\), \(4, 3\)$"):
        MemoryInputs(obs, action[:3], obs, index, mask)
    with pytest.raises(ValueError, match=rows):
        MemoryInputs(obs, action, obs[:, :2], index, mask)
    pair = r"^MemoryInputs: index and mask must both be \[C, B\], got "
    with pytest.raises(ValueError, match=pair + r"\(2, 5\) and \(2, 4\)$"):
        MemoryInputs(obs, action, obs, index, mask[:, :4])
    with pytest.raises(ValueError, match=pair):
        MemoryInputs(obs, action, obs, index[0], mask[0])
    next_row = r"^MemoryInputs: next_row must be \[U\] = \[4\], got \(3,\)$"
    with pytest.raises(ValueError, match=next_row):
        MemoryInputs(obs, action, obs, index, mask, next_row=torch.zeros(3, dtype=torch.long))
    moved = MemoryInputs(obs, action, obs, index, mask).to("meta")
    for name in ("obs", "action", "next_obs", "index", "mask"):
        assert getattr(moved, name).device.type == "meta"
    assert moved.next_row is None
    moved = MemoryInputs(obs, action, obs, index, mask, torch.arange(4)).to("meta")
    assert moved.next_row.device.type == "meta"
    assert moved.capacity == 2 and moved.batch_size == 5


def test_empirical_residual_in_numbers():
    """f_hat = (p' - p) / h - F_kick at h = 0.5 (h = 1 would hide a product for the quotient)."""
    p, p_next = torch.tensor([1.0, -2.0]), torch.tensor([2.0, 1.0])
    kick = torch.tensor([0.5, 4.0])
    torch.testing.assert_close(empirical_residual(p, p_next, kick, 0.5), torch.tensor([1.5, 2.0]))


def test_defaults_are_a_bandwidth_of_0_3_and_no_tension():
    """EpisodicMemory() starts at eps = 0.3 (and refuses eps = 0 with its own message, not
    log's), and a read without `tension` is the unscreened blend (sigma = 0) of the geoopt
    reference."""
    memory = EpisodicMemory().double()
    eps = float(memory.eps)  # log(0.3) held in float32
    assert eps == pytest.approx(0.3, rel=1e-6)
    with pytest.raises(ValueError, match="^EpisodicMemory: eps must be > 0, got 0.0$"):
        EpisodicMemory(eps=0.0)
    with torch.no_grad():
        memory.gate.fill_(1.0)
    ball = geoopt.PoincareBall()
    g = torch.Generator().manual_seed(9)
    z = ball.expmap0(0.4 * torch.randn(2, 3, generator=g, dtype=torch.float64))
    keys = ball.expmap0(0.9 * torch.randn(2, 5, 3, generator=g, dtype=torch.float64))
    values = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    mask = torch.ones(2, 5, dtype=torch.bool)
    phi, _ = memory(z, MemoryBank(keys, values, mask))
    for b in range(2):
        expected = _patches_by_geoopt(z[b], keys[b], values[b], mask[b], eps, 0.0)
        torch.testing.assert_close(phi[b], expected, rtol=1e-9, atol=1e-12)
