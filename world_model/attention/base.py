"""The call shape every plain attention operator shares (DESIGN.md: "attention operators sharing
one call shape (queries, keys, values, masks) -> (out, weights)").

    out, weights = op(queries, keys, values, mask=None)

- queries [..., Nq, d], keys [..., Nk, d], values [..., Nk, dv]
- mask: bool, broadcastable to [..., Nq, Nk], True where a query may attend to a key; a row with
  no allowed key yields out = 0 and weights = 0 (never NaN)
- out [..., Nq, dv]; weights [..., Nq, Nk], the linear map from values to out (rows sum to 1 for
  normalised operators; for kernel ridge regression they are K_qk (K_kk + lam I)^-1 and need not).
  Operators whose weights cost more than the output (KRR: a solve with Nk right-hand sides) take
  `need_weights=False` and then return None for them.

Operators with more structure (the covariant head, which also needs positions, levels and a
connection) wrap this shape: their inputs are richer, their output is the same (out, weights).
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class AttentionOperator(Protocol):
    def __call__(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]: ...
