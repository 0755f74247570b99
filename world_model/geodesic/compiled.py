"""The integrator's steps compiled (issue 43; docs/measurements.md, "Cost"): one graph per kind
of step, built by torch.compile (inductor) with static shapes and kept in inductor's on-disk
cache, so a second run on the same machine loads its graphs instead of generating them.

On one CPU thread an eager step is ~600 small tensor ops whose cost is dispatch, not arithmetic;
inductor fuses them into a few generated C++ loops around the matrix products. Kinds (each its
own graph, compiled at its first call): a plan's steps and its rows' root terms
(`position_terms`) at the plan's batch, the episodic memory's kicks at its distinct
transitions (`position_terms` at a padded row count, pad_rows: 64 in a plan, chunks of
MEMORY_CHUNK rows in an update, the last padded), and the steps under autograd at the training
batch (a forward graph and, at the first backward, its backward graph). What makes the graphs whole:

- the constant tables the geometry reads (geometry/tables.py) are dict reads, not rebuilt;
- the chiral projector (complex arithmetic, which inductor does not generate code for) and the
  charged entries' columns (a nonzero: its size depends on the data, a graph break) are
  computed once per context, before a compiled step reads them (GeodesicContext.read_ahead);
- the O step's noise is drawn by the caller (world_model.sharding reads a context variable),
  from the same generator and in the same order as an eager step draws it.

INDUCTOR_OPTIONS turns off two of torch 2.13's inductor passes on CPU: with them, the training
graph of a step whose bank holds the window's entries returned gradients off by up to 5,000x
(in-place buffer reuse) and wrote out of bounds (vectorised loop tails: heap corruption,
"corrupted size vs. prev_size"); aot_eager and inductor's decompositions alone were right.
tests/world_model/test_compiled_steps.py checks the compiled training step's gradients against
the eager step's.

Where inductor cannot build (no C++ compiler, an unsupported platform), the first call logs one
line and every step runs eagerly from then on. Under `torch._dynamo.config.disable` (the tests)
torch.compile is a no-op and the steps run eagerly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .context import GeodesicContext
from .integrator import GeodesicCrossAttention, PositionTerms

__all__ = ["CompiledSteps", "MEMORY_CHUNK", "pad_rows"]

_logger = logging.getLogger(__name__)

RECOMPILE_LIMIT = 64
"""graphs per compiled function before dynamo runs further kinds eagerly. Dynamo counts the
graphs of a function's code, not of an integrator: a process that trains several models one
after another (benchmarks/ablation_dmc.py's three rows per seed, agent.compare's runs) reached
16 during its second seed (2026-12-06), and its later models' new kinds ran eagerly."""

INDUCTOR_OPTIONS = {"inplace_buffers": False, "cpp.enable_loop_tail_vec": False}
"""inductor passes that miscompiled the training step (module docstring)"""


PADDED_ROWS = (64, 256, 1024, 2048)
"""row counts a batch of varying size is padded to (pad_rows) so that it meets a few graphs:
the memory's distinct transitions, 0-64 in a plan, up to batch x capacity in an update, read in
chunks of the last size (MEMORY_CHUNK)"""

MEMORY_CHUNK = PADDED_ROWS[-1]
"""rows of the memory's distinct transitions whose kicks are evaluated at once. One chunk of all
~6,000-8,000 of an update padded to 16,384 cost 2.6x the chunks' time (reacher-easy, a 20k
buffer: 186 against 71 ms per update; docs/measurements.md, "The memory at a full buffer")"""


def pad_rows(z: Tensor, sizes: tuple[int, ...] = PADDED_ROWS) -> Tensor:
    """z [U, d] with origin rows appended up to the first of `sizes` >= U (as is beyond the
    last). Rows of position_terms are independent, so the first U rows of the result are U's."""
    rows = next((n for n in sizes if n >= z.shape[0]), z.shape[0])
    return torch.cat([z, z.new_zeros(rows - z.shape[0], *z.shape[1:])]) if rows > z.shape[0] else z


class CompiledSteps:
    """`step` (GeodesicCrossAttention.forward) and `root_terms` (position_terms) of one
    integrator, compiled on first use; eager for good after a failed build (one logged line)."""

    def __init__(self, integrator: GeodesicCrossAttention):
        self.integrator = integrator
        limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        torch._dynamo.config.recompile_limit = limit
        self._step = torch.compile(integrator.forward, dynamic=False, options=INDUCTOR_OPTIONS)
        self._terms = torch.compile(
            integrator.position_terms, dynamic=False, options=INDUCTOR_OPTIONS
        )
        self.failed: str | None = None  # why compiling failed (then every call runs eagerly)

    def step(
        self,
        z: Tensor,
        p: Tensor,
        action: Tensor,
        context: GeodesicContext,
        *,
        stochastic: bool,
        carry: PositionTerms | None,
        noise: Tensor | None,
    ) -> tuple[Tensor, Tensor, PositionTerms]:
        """integrator(z, p, action, context, ...), compiled (GeodesicCrossAttention.forward)."""
        return self._run(
            self._step,
            self.integrator.forward,
            context,
            z,
            p,
            action,
            context,
            stochastic=stochastic,
            carry=carry,
            noise=noise,
        )

    def root_terms(self, z: Tensor, context: GeodesicContext) -> PositionTerms:
        """integrator.position_terms(z, context), compiled."""
        return self._run(self._terms, self.integrator.position_terms, context, z, context)

    def _run(
        self,
        compiled: Callable[..., Any],
        eager: Callable[..., Any],
        context: GeodesicContext,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if self.failed is None:
            context.read_ahead(self.integrator.heads())  # eager, once per context
            # a row-expanded root is a stride-0 view: contiguous inputs keep to one graph
            args = tuple(a.contiguous() if isinstance(a, Tensor) else a for a in args)
            try:
                return compiled(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - inductor's build errors have no common type
                self.failed = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                _logger.warning(
                    "torch.compile of the geodesic integrator failed (%s); its steps run eagerly",
                    self.failed,
                )
        return eager(*args, **kwargs)
