"""Stop training at the first non-finite number, saying where it appeared.

A diverging run (a learning rate of 1e12, a reward of NaN from a broken env) otherwise dies
later with a message about something else (a NaN target turned into a bin index) or, worse,
writes a checkpoint full of NaNs over the last good one. `Agent.update` checks the losses and
the latent states before the backward pass and the gradients before the optimiser step;
`plan_batch` (agent/core/planner.py) checks the trajectory weights and the planned actions. Each
check is one `isfinite` over tensors the update computes anyway; the names are looked up only
once something is wrong. The trainer (agent/core/loop.py) writes no checkpoint after a
`NonFiniteError`, so the run folder keeps the last good one, and adds the last diagnostic node
that was out of range and the checkpoint kept to the message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import Tensor, nn

__all__ = [
    "NonFiniteError",
    "check_losses",
    "check_states",
    "clip_gradients",
    "check_actions",
    "located",
]


class NonFiniteError(RuntimeError):
    """A loss, gradient, latent state or action was NaN or infinite."""


def _finite(x: Tensor) -> bool:
    return bool(torch.isfinite(x).all())


def check_losses(losses: Mapping[str, Tensor], where: str) -> None:
    """Raise naming every non-finite entry of `losses` (scalars or tensors)."""
    if _finite(torch.cat([value.reshape(-1) for value in losses.values()])):
        return
    bad = [name for name, value in losses.items() if not _finite(value)]
    raise NonFiniteError(f"{where}: non-finite loss ({', '.join(bad)})")


def check_states(states: Iterable[Tensor], where: str) -> None:
    """Raise if any latent-state tensor holds a non-finite entry."""
    if not all(_finite(t) for t in states):
        raise NonFiniteError(f"{where}: non-finite latent state in the model's rollout")


def clip_gradients(model: nn.Module, params: list[Tensor], max_norm: float, where: str) -> Tensor:
    """torch's clip_grad_norm_ in its two halves (the same numbers), with a check between: a
    non-finite total norm raises naming the parameters whose gradients are not finite (after
    clipping every gradient would be NaN, hiding where it came from). Returns the norm."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if not _finite(norm):
        bad = [
            name
            for name, p in model.named_parameters()
            if p.grad is not None and not _finite(p.grad)
        ]
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise NonFiniteError(f"{where}: non-finite gradient (of {shown or 'the total norm'})")
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm


def check_actions(actions: Tensor, where: str) -> None:
    """Raise if a planned action is not finite (it would reach the environment)."""
    if not _finite(actions):
        raise NonFiniteError(f"{where}: the planner returned a non-finite action")


@contextlib.contextmanager
def located(where: str) -> Iterator[None]:
    """Prefix a NonFiniteError raised inside (by code that does not know the step) with
    `where`."""
    try:
        yield
    except NonFiniteError as err:
        raise NonFiniteError(f"{where}: {err}") from None
