"""The HIDA operator family of seed 000 §5 (M1-M4): hyperbolic inverse-distance attention
W_ij ∝ (d_H(q_i, k_j)^2 + eps)^-1 at four costs, each with the call shape of
docs/architecture.md (``out, weights = op(queries, keys, values, mask)``).
This module re-exports them; each lives in its own file.

| operator | seed | cost | attends to | file |
| --- | --- | --- | --- | --- |
| :class:`DenseHIDA` | M1, Def 5.1 | Theta(Nq Nk d) | every key | hida_dense.py |
| :class:`FPHIDA`    | M2, Def 5.2 | O(Nq log Nk d) | a fixed sparse index set S_i | hida_fp.py |
| :class:`LHIDA`     | M3, Def 5.3 | O((Nq + Nk) m d) | m learnable anchors | hida_anchor.py |
| :class:`CHIDA`     | M4, Def 5.4 | O(c d) per token | c k-means summaries | hida_compressed.py |

(files under world_model/attention/; shared validation in world_model/attention/hida_common.py)

``weights`` is always the exact linear map from ``values`` to ``out`` as a dense [..., Nq, Nk]
tensor (zeros outside FP's index set; composed through anchors / summaries for L and C). It is
O(Nq Nk) memory, so large-n callers pass ``need_weights=False`` and get ``(out, None)``.

Memory use (the HIDA memory queries a time-ordered store with a query at "now"): FP's positions
are the keys' time order and ``query_time="now"`` puts every query after the newest key; L's
summaries are sums over keys (:func:`l_hida_summaries`), so they can be accumulated as keys
arrive while the anchors are fixed; C keeps its summaries as state (:meth:`CHIDA.ingest`,
:meth:`CHIDA.read`) at a cost per new key and per query that does not depend on how many keys
it has seen.

Departures from the seed (L's mean-normalised anchors, C's Riemannian update) are described in
world_model/attention/hida_anchor.py and world_model/attention/hida_compressed.py, measured in
tests/world_model/test_ida_claims.py and listed in the inverse-distance section of
docs/seed_map.md.
"""

from __future__ import annotations

from .hida_anchor import LHIDA, LHIDAConfig, anchor_memberships, l_hida_attention, l_hida_summaries
from .hida_compressed import (
    CHIDA,
    CHIDAConfig,
    CHIDAState,
    c_hida_composite_weights,
    c_hida_empty_state,
    c_hida_ingest,
    c_hida_read,
)
from .hida_dense import DenseHIDA, DenseHIDAConfig
from .hida_fp import FPHIDA, FPHIDAConfig, fp_attention, fp_index_set

__all__ = [
    "DenseHIDAConfig",
    "DenseHIDA",
    "FPHIDAConfig",
    "FPHIDA",
    "fp_index_set",
    "fp_attention",
    "LHIDAConfig",
    "LHIDA",
    "anchor_memberships",
    "l_hida_summaries",
    "l_hida_attention",
    "CHIDAConfig",
    "CHIDA",
    "CHIDAState",
    "c_hida_empty_state",
    "c_hida_ingest",
    "c_hida_read",
    "c_hida_composite_weights",
]
