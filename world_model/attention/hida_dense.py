"""Dense-HIDA, seed 000 M1 (Def 5.1): inverse-distance attention over every key,
W_ij ∝ (d(q_i, k_j)^2 + eps)^-1, Theta(Nq Nk d); with another metric it is the Resolver
("euclidean") or SIDA ("sphere", Def 8.1). Overview of the family: world_model/attention/hida.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from world_model.options import check_choices

from .hida_common import _check_positive_int, cat_rows, check_operator_inputs, query_chunks
from .ida import (
    Form,
    Metric,
    _check_eps,
    inverse_distance_attention,
)
from .triton_ida import fused_or_none

__all__ = ["DenseHIDAConfig", "DenseHIDA"]


@dataclass
class DenseHIDAConfig:
    """Dense inverse-distance attention (seed 000 M1, Def 5.1; Resolver and SIDA with another
    metric).

    Attributes:
        eps: kernel regulariser eps > 0.
        metric: "poincare" (HIDA), "euclidean" (Resolver) or "sphere" (SIDA).
        form: all-pairs distance evaluation, see world_model/attention/ida.py.
        query_chunk: process queries in chunks of this many rows (bounds the [chunk, Nk]
            intermediates when no gradient is taken); None = all at once.
        fused: with need_weights=False, use the fused Triton kernels (forward and backward) of
            world_model/attention/triton_ida.py where they apply: CUDA tensors, metric
            "euclidean" or "poincare", no mask or a key mask; elsewhere the PyTorch path (on a
            GPU the reason is logged once).
        check_inputs: validate shapes and domains at every call.
    """

    eps: float = 1e-3
    metric: Metric = "poincare"
    form: Form = "expanded"
    query_chunk: int | None = None
    fused: bool = True
    check_inputs: bool = True

    def __post_init__(self):
        _check_eps(self.eps)
        check_choices(self, "DenseHIDAConfig")
        _check_positive_int("query_chunk", self.query_chunk, allow_none=True)


class DenseHIDA(nn.Module):
    """M1: out_i = sum_j W_ij v_j, W_ij ∝ (d(q_i, k_j)^2 + eps)^-1 over all keys; Theta(n^2 d)."""

    def __init__(self, config: DenseHIDAConfig | None = None):
        super().__init__()
        self.config = config or DenseHIDAConfig()

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        cfg = self.config
        if cfg.check_inputs:
            check_operator_inputs(queries, keys, values, mask, cfg.metric)
        if not need_weights and cfg.fused:
            out = fused_or_none(queries, keys, values, cfg.eps, cfg.metric, mask)
            if out is not None:
                return out, None
        n_q = queries.shape[-2]
        outs, weights = [], []
        for rows in query_chunks(n_q, cfg.query_chunk or max(n_q, 1)):
            m = None
            if mask is not None:
                m = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., rows, :]
            out, w = inverse_distance_attention(
                queries[..., rows, :], keys, values, cfg.eps, cfg.metric, m,
                form=cfg.form, check_inputs=False,
            )  # fmt: skip
            outs.append(out)
            if need_weights:
                weights.append(w)
        return cat_rows(outs), (cat_rows(weights) if need_weights else None)
