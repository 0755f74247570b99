"""Inverse-distance attention (IDA), seed 000 §2.1:
W_ij = (d(q_i, k_j)^2 + eps)^-1 / sum_m (d(q_i, k_m)^2 + eps)^-1.

Seed 000: Euclidean distance is the Resolver (§2.1), the Poincare-ball geodesic distance is HIDA
(§4, Def 5.1), the great-circle distance is SIDA (Def 8.1). All three share one kernel and the
call shape (docs/architecture.md, "The attention call shape"):

    out, weights = inverse_distance_attention(q, k, v, eps, metric, mask=None)

How the all-pairs distance is computed (``form``; measured by ``benchmarks/hida_scaling.py``,
the numbers are in the inverse-distance section of docs/seed_map.md):

- ``"expanded"`` (default, every metric): |x|^2 + |y|^2 - 2 x.y as one matrix product of
  augmented coordinates, accumulated in float64 whatever the input dtype, rounded once to the
  input dtype. In float32 the same expression loses all relative accuracy at small distances
  (measured relative error of d^2: 3.6e3 at |x - y| = 1e-5, 0.31 at 1e-3), and ``torch.cdist``
  switches to exactly this matrix-product path for more than 25 points, so it fails the same
  way. Accumulated in float64: 9e-6 and 3e-7. No N x M float64 tensor is kept for the backward
  pass (the Poincare factors are folded into the operands).
- ``"cdist"``: ``torch.cdist(..., compute_mode="donot_use_mm_for_euclid_dist")``, the exact
  difference path in the input dtype (relative error ~1e-6 at every distance). Measured dense
  IDA forward / forward+backward time against "expanded" at n = 1024, d = 16: 1.1-3.7 /
  1.5-2.2x (Euclidean), 1.6-1.9 / 1.6-2.1x (Poincare), 2.4-2.5 / 1.5-2.1x (sphere); at n = 4096
  1.1-1.5 / 1.3-1.5x (three runs on a shared CPU).
- ``"difference"``: explicit differences through ``geometry.poincare.pairwise_dist`` /
  ``geometry.sphere.pairwise_dist``, the project's reference formulas; 6-31x slower and memory
  O(N M d).

All three give the same retrieval weights (query = key, eps = 1e-7) to 6e-7. Fused Triton
kernels, forward and backward, that never form the N x M matrix (explicit differences, online
softmax; Euclidean and Poincare, key masks and masses) are in
``world_model/attention/triton_ida.py``; DenseHIDA calls them on CUDA tensors.

The metric-specific step from |x - y|^2 to d^2 is written in t = |x - y|^2 / ((1 - |x|^2)(1 -
|y|^2)) (Poincare: d = 2 asinh(sqrt t) = log1p(2t + 2 sqrt(t(1 + t))), the function of
``geometry.poincare.dist``) and in |x - y|^2 and |x + y|^2 (sphere: d = 2 atan2(|x - y|,
|x + y|), as ``geometry.sphere.dist``). These arguments are floored at the smallest normal
number, where the chain rule through the square root is still finite, so the gradient at a
query equal to a key (or antipodal to it) is finite (it is 0).

Weights are a softmax of the logits -log(d^2 + eps): the same normalised kernel, with the row
maximum subtracted, so no 1/eps or 1/eps^2 overflows in values or gradients for any eps > 0.
"""

from __future__ import annotations

import math
import typing
from typing import Literal

import torch
from torch import Tensor

from geometry import poincare, sphere

__all__ = [
    "METRICS",
    "FORMS",
    "check_attention_inputs",
    "check_points",
    "squared_distance_matrix",
    "squared_distance",
    "inverse_distance_weights",
    "inverse_distance_attention",
    "effective_rank",
]

Metric = Literal["euclidean", "poincare", "sphere"]
Form = Literal["expanded", "cdist", "difference"]
METRICS: tuple[str, ...] = typing.get_args(Metric)
FORMS: tuple[str, ...] = typing.get_args(Form)


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")


def _check_eps(eps: float) -> None:
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")


# --------------------------------------------------------------------------- input validation


def check_points(x: Tensor, metric: str, name: str) -> None:
    """Raise ValueError unless x [..., N, d] is finite and lies in the metric's domain: anywhere
    (euclidean), inside the closed unit ball up to rounding (poincare; points rounded onto the
    boundary are accepted, see ``geometry.poincare.one_minus_sqnorm``), on the unit sphere to
    1e-3 (sphere)."""
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf")
    if metric == "poincare":
        worst = poincare.sqnorm(x).max().item() if x.numel() else 0.0
        if worst > 1.0 + 8 * torch.finfo(x.dtype).eps:
            raise ValueError(
                f"{name} must lie in the Poincare ball (|x| < 1); the largest norm is "
                f"{math.sqrt(worst):.6g}"
            )
    elif metric == "sphere" and x.numel():
        worst = (x.norm(dim=-1) - 1.0).abs().max().item()
        if worst > 1e-3:
            raise ValueError(
                f"{name} must be unit vectors for metric 'sphere' (normalise with "
                f"geometry.sphere.normalize); the largest | |x| - 1 | is {worst:.3g}"
            )


def check_attention_inputs(
    queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
) -> None:
    """Raise ValueError unless the shapes follow the attention call shape: queries
    [..., Nq, d], keys [..., Nk, d], values [..., Nk, dv], mask bool broadcastable to
    [..., Nq, Nk]."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape [..., N, d], got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"queries and keys must share their last dim, got {tuple(queries.shape)} and "
            f"{tuple(keys.shape)}"
        )
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            f"keys and values must have the same number of entries, got {tuple(keys.shape)} "
            f"and {tuple(values.shape)}"
        )
    if queries.dtype != keys.dtype or keys.dtype != values.dtype:
        raise ValueError(
            f"queries, keys and values must share a dtype, got {queries.dtype}, {keys.dtype}, "
            f"{values.dtype}"
        )
    try:
        batch = torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dims of queries {tuple(queries.shape)}, keys "
            f"{tuple(keys.shape)} and values {tuple(values.shape)} do not broadcast"
        ) from None
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
        target = (*batch, queries.shape[-2], keys.shape[-2])
        try:
            if torch.broadcast_shapes(mask.shape, target) != torch.Size(target):
                raise RuntimeError
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to [..., Nq, Nk] = {target}"
            ) from None


# --------------------------------------------------------------------------- distances


def _hyperbolic_sq_from_t(t: Tensor) -> Tensor:
    """d_H^2 = (2 asinh(sqrt t))^2 (geometry.poincare.dist_from_t) for t >= the dtype's smallest
    normal number. At the floor the chain rule's d/dt is ~4 (finite), so a query equal to a key
    gets a finite gradient."""
    return poincare.dist_from_t(t).square()


def _half_angle_sq(diff2: Tensor, sum2: Tensor) -> Tensor:
    """atan2(|x - y|, |x + y|)^2 = (theta / 2)^2 from |x - y|^2, |x + y|^2 >= the smallest
    normal number: finite values and gradients at theta = 0 and at theta = pi."""
    return torch.atan2(diff2.sqrt(), sum2.sqrt()).square()


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if torch.finfo(dtype).bits < 64 else dtype


def _expanded_quantities(x: Tensor, y: Tensor, metric: str) -> tuple[Tensor, Tensor | None]:
    """The metric's argument t (and for the sphere |x + y|^2) as matrices: the expanded form
    as one matrix product of augmented coordinates, accumulated in float64, rounded once to
    x.dtype.

    euclidean: |x - y|^2 = [|x|^2, 1, x] . [1, |y|^2, -2y];
    poincare: t = |x - y|^2 / (a_x a_y), a = 1 - |.|^2, = [|x|^2/a_x, 1/a_x, x/a_x] .
              [1/a_y, |y|^2/a_y, -2y/a_y];
    sphere: (|x - y|^2, |x + y|^2), the second with +2y.
    No N x M float64 tensor is kept for the backward pass (only the [N, d + 2] factors).
    """
    if metric == "poincare":
        return poincare.pairwise_t(x, y), None
    acc = _accumulation_dtype(x.dtype)
    xa, ya = x.to(acc), y.to(acc)  # [..., N, d], [..., M, d]
    x2, y2 = poincare.sqnorm(xa), poincare.sqnorm(ya)  # [..., N, 1], [..., M, 1]
    left = torch.cat([x2, torch.ones_like(x2), xa], dim=-1)  # [..., N, d + 2]
    right = torch.cat([torch.ones_like(y2), y2, -2.0 * ya], dim=-1)  # [..., M, d + 2]
    diff2 = (left @ right.transpose(-1, -2)).to(x.dtype)  # [..., N, M]
    if metric == "sphere":
        right_sum = torch.cat([torch.ones_like(y2), y2, 2.0 * ya], dim=-1)
        return diff2, (left @ right_sum.transpose(-1, -2)).to(x.dtype)
    return diff2, None


def _cdist_quantities(x: Tensor, y: Tensor, metric: str) -> tuple[Tensor, Tensor | None]:
    """As :func:`_expanded_quantities` from torch.cdist's exact (difference) path."""
    mode = "donot_use_mm_for_euclid_dist"
    diff2 = torch.cdist(x, y, compute_mode=mode).square()  # [..., N, M]
    if metric == "poincare":
        ax = poincare.one_minus_sqnorm(x)  # [..., N, 1]
        ay = poincare.one_minus_sqnorm(y).transpose(-1, -2)  # [..., 1, M]
        return diff2 / (ax * ay), None
    if metric == "sphere":
        return diff2, torch.cdist(x, -y, compute_mode=mode).square()
    return diff2, None


def squared_distance_matrix(x: Tensor, y: Tensor, metric: str, form: str = "expanded") -> Tensor:
    """All-pairs squared geodesic distance d(x_i, y_j)^2: x [..., N, d], y [..., M, d] ->
    [..., N, M]. Euclidean |x - y|^2 (seed 000 §2.1); Poincare d_H^2 with
    d_H = 2 asinh(|x - y| / sqrt((1 - |x|^2)(1 - |y|^2))) (§4); sphere d_S^2 with
    d_S = 2 atan2(|x - y|, |x + y|) (§4, §8.1)."""
    _check_metric(metric)
    _check_form(form)
    if form == "difference":
        if metric == "poincare":
            return poincare.pairwise_dist(x, y).square()
        if metric == "sphere":
            return sphere.pairwise_dist(x, y).square()
        return (x.unsqueeze(-2) - y.unsqueeze(-3)).square().sum(-1)
    first, second = (_expanded_quantities if form == "expanded" else _cdist_quantities)(
        x, y, metric
    )
    if metric == "euclidean":
        return first.clamp_min(0.0)
    first = first.clamp_min(torch.finfo(first.dtype).tiny)  # keeps d sqrt(t) / dt finite
    if metric == "poincare":
        return _hyperbolic_sq_from_t(first)
    return 4.0 * _half_angle_sq(first, second.clamp_min(torch.finfo(second.dtype).tiny))


def squared_distance(x: Tensor, y: Tensor, metric: str) -> Tensor:
    """Elementwise squared distance d(x, y)^2 over the last dim (broadcast), by explicit
    differences through the geometry module (used where no matrix product is involved, e.g.
    FP-HIDA's gathered keys)."""
    _check_metric(metric)
    if metric == "poincare":
        return poincare.dist(x, y).square()
    if metric == "sphere":
        return sphere.dist(x, y).square()
    return (x - y).square().sum(-1)


# --------------------------------------------------------------------------- weights and output


def inverse_distance_weights(
    sqdist: Tensor, eps: float, mask: Tensor | None = None, key_mass: Tensor | None = None
) -> Tensor:
    """W_ij = m_j (d_ij^2 + eps)^-1 / sum_l m_l (d_il^2 + eps)^-1 over the allowed keys
    (seed 000 §2.1 with m = 1; a key of mass m_j counts as m_j coincident keys).

    sqdist [..., Nq, Nk]; mask bool broadcastable to it (True = may attend); key_mass [..., Nk]
    >= 0 (mass 0 = not attended). Computed as softmax(-log(d^2 + eps) + log m), i.e. divided by
    the row's largest term, so nothing overflows for small eps. A row with no allowed key is 0.
    log m is floored at the smallest normal number: a key of mass exactly 0 is masked out, and
    its mass gradient is 0 (log 0 in the graph gave 0 * inf = NaN, e.g. to L-HIDA's anchors
    through the masses of a fully masked row; tests/world_model/test_attention_boundary_fuzz.py).
    """
    logits = -torch.log(sqdist + eps)  # [..., Nq, Nk]
    if key_mass is not None:
        log_mass = torch.log(key_mass.clamp_min(torch.finfo(key_mass.dtype).tiny))  # [..., Nk]
        logits = logits + log_mass.unsqueeze(-2)
        positive = (key_mass > 0).unsqueeze(-2)  # mass 0: not attended
        mask = positive if mask is None else mask & positive
    if mask is None:
        return torch.softmax(logits, dim=-1)
    mask = mask.expand_as(logits)
    allowed = mask.any(dim=-1, keepdim=True)  # [..., Nq, 1]
    logits = logits.masked_fill(~mask, -math.inf).masked_fill(~allowed, 0.0)
    return torch.softmax(logits, dim=-1) * mask


def inverse_distance_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    eps: float,
    metric: str,
    mask: Tensor | None = None,
    *,
    key_mass: Tensor | None = None,
    form: str = "expanded",
    check_inputs: bool = True,
) -> tuple[Tensor, Tensor]:
    """Dense inverse-distance attention: out_i = sum_j W_ij v_j with
    W_ij = (d(q_i, k_j)^2 + eps)^-1 / sum_m (d(q_i, k_m)^2 + eps)^-1
    (seed 000 §2.1 Resolver, Def 5.1 Dense-HIDA, Def 8.1 SIDA; Theta(Nq Nk d)).

    queries [..., Nq, d], keys [..., Nk, d], values [..., Nk, dv]; mask bool broadcastable to
    [..., Nq, Nk] (True = may attend); key_mass [..., Nk] optional multiplicities.
    Returns out [..., Nq, dv] and weights [..., Nq, Nk] (rows sum to 1; 0 for fully masked
    rows). A query equal to a key gives finite values and gradients.
    """
    _check_metric(metric)
    _check_eps(eps)
    if check_inputs:
        check_attention_inputs(queries, keys, values, mask)
        check_points(queries, metric, "queries")
        check_points(keys, metric, "keys")
    sqdist = squared_distance_matrix(queries, keys, metric, form)  # [..., Nq, Nk]
    weights = inverse_distance_weights(sqdist, eps, mask, key_mass)  # [..., Nq, Nk]
    return weights @ values, weights


# --------------------------------------------------------------------------- diagnostics


def effective_rank(kernel: Tensor) -> Tensor:
    """eff-rank(K) = (tr K)^2 / tr(K^2) (seed 000 §2.1) = (sum lambda)^2 / sum lambda^2 over K's
    eigenvalues, for a diagonalisable K [..., n, n] (symmetric or not)."""
    tr = kernel.diagonal(dim1=-2, dim2=-1).sum(-1)
    tr2 = (kernel * kernel.transpose(-1, -2)).sum((-2, -1))
    return tr.square() / tr2
