"""The geodesic integrator's compiled planning steps (world_model/geodesic/compiled.py) against
the eager steps they replace: the same states and gradients to float32 rounding, in whole
graphs (no graph break); a failed build falls back to eager with one logged line.

The suite runs with torch.compile disabled (tests/conftest.py); the slow test re-enables it.
"""

from __future__ import annotations

import copy
import logging

import geoopt
import pytest
import torch

from world_model.geodesic import GeodesicConfig, GeodesicDynamics, GeodesicState
from world_model.geodesic.compiled import MEMORY_CHUNK, CompiledSteps, pad_rows
from world_model.geodesic.config import ContextConfig, GeodesicHeadOptions
from world_model.memory.episodic import MemoryInputs

ROLLOUT = 3


def small(**context) -> GeodesicDynamics:
    cfg = GeodesicConfig(
        latent_dim=4,
        encoder_dim=32,
        head=GeodesicHeadOptions(d_k=8, chirality=0.5),  # a live chiral gate: Pi is read
        context=ContextConfig(
            **{
                "prototypes": 12,
                "feature_dim": 8,
                "window": 2,
                "memory": "none",
                "routing": "dense",
            }
            | context
        ),
    )
    torch.manual_seed(5)
    dyn = GeodesicDynamics(6, 2, cfg)
    with torch.no_grad():  # off the zero read-outs of a new model: every head's path is live
        for p in dyn.parameters():
            if not isinstance(p, geoopt.ManifoldParameter):  # the ball's points stay inside
                p.add_(0.1 * torch.randn_like(p))
    return dyn


def memory_inputs(transitions: int = 10, capacity: int = 4, batch: int = 16) -> MemoryInputs:
    """Random transitions, each of `batch` samples holding `capacity` of them (some masked)."""
    g = torch.Generator().manual_seed(7)
    return MemoryInputs(
        obs=torch.randn(transitions, 6, generator=g),
        action=torch.rand(transitions, 2, generator=g) * 2 - 1,
        next_obs=torch.randn(transitions, 6, generator=g),
        index=torch.randint(0, transitions, (capacity, batch), generator=g),
        mask=torch.rand(capacity, batch, generator=g) < 0.8,
    )


def rollout(
    dyn: GeodesicDynamics, stochastic: bool, seed: int = 3, memory: MemoryInputs | None = None
) -> list[torch.Tensor]:
    """A planning-style rollout (root terms, then steps with the carry) from fixed inputs; the
    noise drawn from torch's generator seeded `seed`; `memory`: the samples' memories."""
    g = torch.Generator().manual_seed(0)
    obs, actions = torch.randn(16, 6, generator=g), torch.rand(ROLLOUT, 16, 2, generator=g) * 2 - 1
    history = dyn.encode(torch.randn(16 * 2, 6, generator=g))
    history = GeodesicState(history.z.view(16, 2, -1), history.p.view(16, 2, -1))
    state = dyn.encode(obs)
    value_grad = torch.randn(1, 4, generator=g)
    mask = torch.ones(16, 2, dtype=torch.bool)
    context = dyn.context(state, history, mask, value_grad, memory=memory)
    state = dyn.root(state, context)
    torch.manual_seed(seed)
    out = []
    for t in range(ROLLOUT):
        state = dyn.next(state, actions[t], context, stochastic=stochastic)
        out += [state.z, state.p]
    return out


def test_a_failed_build_runs_the_eager_step_and_logs_one_line(caplog):
    """Where inductor cannot build, the first call logs one line and every step, that one
    included, runs eagerly: the states are the eager model's bit for bit (the failure injected
    by a compiled step that raises, as a missing C++ compiler does)."""
    eager = small()
    dyn = copy.deepcopy(eager)
    dyn.compile_steps()

    def no_compiler(*args, **kwargs):
        raise RuntimeError("InductorError: C++ compiler not found")

    dyn.compiled._step = dyn.compiled._terms = no_compiler
    with caplog.at_level(logging.WARNING, logger="world_model.geodesic.compiled"):
        with torch.no_grad():
            got, want = rollout(dyn, stochastic=False), rollout(eager, stochastic=False)
            rollout(dyn, stochastic=False)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert len(caplog.records) == 1 and "run eagerly" in caplog.records[0].getMessage()
    assert "C++ compiler not found" in dyn.compiled.failed


def test_the_compiled_path_without_a_compiler_is_the_eager_step():
    """Under torch.compile's switch-off (the tests' setting) CompiledSteps runs the eager
    methods: the same states bit for bit, the stochastic ones included (the O step's noise is
    drawn before the step from the same generator, in the order the eager step draws it)."""
    eager = small()
    dyn = copy.deepcopy(eager)
    dyn.compile_steps()
    assert isinstance(dyn.compiled, CompiledSteps)
    for stochastic in (False, True):
        got, want = rollout(dyn, stochastic), rollout(eager, stochastic)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_the_memory_read_in_chunks_is_the_memory_read_at_once(monkeypatch):
    """memory_bank evaluates the distinct transitions' kicks MEMORY_CHUNK rows at a time; with
    chunks of 3 rows (4 chunks, the last of one row) the bank is the one-chunk bank, routed pool
    included (rows are independent)."""
    dyn = small(memory="dense", routing="gsr", pool_capacity=16, route_k=5)
    inputs = memory_inputs(transitions=10)
    with torch.no_grad():
        want = dyn.memory_bank(inputs)
        monkeypatch.setattr("world_model.geodesic.dynamics.MEMORY_CHUNK", 3)
        got = dyn.memory_bank(inputs)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert want.values.abs().amax() > 0  # a bank with residuals, not an empty one


def test_padded_rows_leave_the_first_rows_and_the_memory_bank_as_they_are():
    """pad_rows appends origin rows up to a fixed count; the memory's bank read through the
    padded rows (a compiled model's path, here eager) is the unpadded bank, with routing too
    (GSR routes the padding rows as well: rows are independent)."""
    z = 0.3 * torch.randn(5, 4)
    padded = pad_rows(z)
    assert padded.shape == (64, 4) and torch.equal(padded[:5], z) and not padded[5:].any()
    assert pad_rows(torch.zeros(64, 4)).shape == (64, 4)
    assert pad_rows(torch.zeros(65, 4)).shape == (256, 4)
    assert pad_rows(torch.zeros(20000, 4)).shape == (20000, 4)  # beyond the last size: as is
    assert pad_rows(torch.zeros(MEMORY_CHUNK, 4)).shape == (MEMORY_CHUNK, 4)  # a full chunk
    eager = small(memory="dense", routing="gsr", pool_capacity=16, route_k=5)
    dyn = copy.deepcopy(eager)
    dyn.compile_steps()
    inputs = memory_inputs()
    with torch.no_grad():
        got, want = dyn.memory_bank(inputs), eager.memory_bank(inputs)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert want.mask.any() and want.values.abs().max() > 0


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|: one tolerance for tensors of every scale."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def compiled_against_eager(
    dyn: GeodesicDynamics,
    eager: GeodesicDynamics,
    memory: MemoryInputs | None = None,
    training: bool = True,
) -> dict[str, int]:
    """Compile `dyn` (a copy of `eager`) and compare: a planning rollout (no_grad), then (if
    `training`) a stochastic training rollout's states and every parameter's gradient. Returns
    the graphs compiled after the planning rollout and in all."""
    import torch._dynamo  # here, not at import: it imports triton (see test_triton_ida.py)
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # forget the frames the switched-off runs before marked to skip
    counters.clear()
    graphs = {}
    with torch._dynamo.config.patch(disable=False):
        dyn.compile_steps()  # torch.compile reads the switch when it wraps
        with torch.no_grad():
            got, want = rollout(dyn, False, memory=memory), rollout(eager, False, memory=memory)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=2e-4, atol=1e-5)
        graphs["planning"] = counters["stats"]["unique_graphs"]
        if training:
            got, want = rollout(dyn, True, memory=memory), rollout(eager, True, memory=memory)
            for a, b in zip(got, want, strict=True):
                torch.testing.assert_close(a.detach(), b.detach(), rtol=2e-4, atol=1e-5)
            sum(x.square().sum() for x in got).backward()
            sum(x.square().sum() for x in want).backward()
    assert dyn.compiled.failed is None
    assert not counters["graph_break"], dict(counters["graph_break"])
    graphs["all"] = counters["stats"]["unique_graphs"]
    for (name, a), (_, b) in zip(dyn.named_parameters(), eager.named_parameters(), strict=True):
        assert (a.grad is None) == (b.grad is None), name
        if b.grad is not None and b.grad.abs().max() > 0:
            assert relative_error(a.grad, b.grad) < 1e-3, (name, relative_error(a.grad, b.grad))
    return graphs


@pytest.mark.slow
def test_compiled_steps_equal_the_eager_steps_in_planning_and_in_training():
    """torch.compile on: a planning rollout (no_grad; root terms and steps, with the window's
    charged entries and a live chiral gate) and a stochastic training rollout agree with the
    eager model's states to float32 rounding amplified by three steps of a perturbed model
    (2e-4 relative; a dropped term errs by O(1)); every parameter's gradient through the
    compiled training rollout is the eager one's to 1e-3 of its largest entry (measured
    2.4e-5; torch 2.13's inductor with its default passes erred by 5,000x here, see
    world_model/geodesic/compiled.py); in whole graphs, no graph break, one per kind."""
    eager = small()
    graphs = compiled_against_eager(copy.deepcopy(eager), eager)
    # the root terms and a plan's step; then the same two under autograd
    assert graphs == {"planning": 2, "all": 4}


@pytest.mark.slow
def test_the_compiled_memory_and_routed_pool_equal_the_eager_ones():
    """The planning rollout with the episodic memory (its bank's rows padded to a fixed count,
    pad_rows) and a routed pool (each root's top-K as a mask over the pool prepared once) read
    by every step, and the memory's bank itself. Planning only: the training graphs' kinds are
    the test above's (their cold compile is CI's longest wait)."""
    eager = small(memory="dense", routing="gsr", pool_capacity=16, route_k=5)
    dyn = copy.deepcopy(eager)
    inputs = memory_inputs()
    compiled_against_eager(dyn, eager, inputs, training=False)
    with torch.no_grad():
        got, want = dyn.memory_bank(inputs), eager.memory_bank(inputs)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=1e-5)
