"""The Poincare ball B^d = {z : |z| < 1} with curvature -1, as pure functions on tensors.

Every function is batched over leading dimensions and acts on the last one (the coordinates).
Shapes in comments use ``[..., d]`` for points and tangent vectors and ``[..., 1]`` for
per-point scalars (kept so they broadcast against ``[..., d]``).

Conventions (seed 003 Def 281, seed 000 §4): conformal factor lambda(z) = 2 / (1 - |z|^2),
metric G(z) = lambda(z)^2 I, momentum p is a covector with velocity v = G^-1 p.

Why not geoopt for these formulas: geoopt's ``PoincareBall`` is the reference the tests compare
against, but (i) it projects every result to |z| <= 1 - 4e-3 in float32, far inside the
|z| <= 1 - 1e-5 this project must support, and (ii) its distance goes through |(-x) (+) y|
computed in the expanded Mobius form, which loses relative accuracy at small distances in
float32. The forms below avoid both (each says how) and are tested against geoopt in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "sqnorm",
    "one_minus_sqnorm",
    "conformal_factor",
    "metric_factor",
    "inverse_metric_factor",
    "metric_temperature",
    "mobius_add",
    "gyro_difference",
    "gyration",
    "gyro_norm_dist",
    "dist",
    "dist0",
    "pairwise_dist",
    "expmap0",
    "logmap0",
    "logmap0_jacobian",
    "logmap0_vjp",
    "expmap",
    "logmap",
    "project",
    "parallel_transport",
    "christoffel_contract",
    "kinetic_energy",
    "kinetic_energy_grad",
    "transported_velocity_error",
    "geodesic_drift",
    "geodesic_flow",
]


MIN_NORM = 1e-15  # floor for norms and denominators (as in geoopt); far below any real scale


def _safe_norm(x: Tensor) -> Tensor:
    """|x| over the last dim, keepdim; clamped away from 0 so x / |x| is finite and the
    gradient at x = 0 is 0 (clamp_min passes no gradient below its floor)."""
    return x.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)  # [..., 1]


def sqnorm(x: Tensor, keepdim: bool = True) -> Tensor:
    """|x|^2 over the last dim."""
    return (x * x).sum(dim=-1, keepdim=keepdim)  # [..., 1]


def one_minus_sqnorm(z: Tensor) -> Tensor:
    """1 - |z|^2, floored at the dtype's eps so that points on (or rounded onto) the boundary
    give large finite conformal factors instead of inf."""
    return (1.0 - sqnorm(z)).clamp_min(torch.finfo(z.dtype).eps)  # [..., 1]


def conformal_factor(z: Tensor) -> Tensor:
    """lambda(z) = 2 / (1 - |z|^2)  (seed 003 Def 281)."""
    return 2.0 / one_minus_sqnorm(z)  # [..., 1]


def metric_factor(z: Tensor) -> Tensor:
    """G(z) = lambda(z)^2 I, returned as the scalar lambda(z)^2  (seed 003 Def 281)."""
    return conformal_factor(z).square()  # [..., 1]


def inverse_metric_factor(z: Tensor) -> Tensor:
    """G^-1(z) = (1 - |z|^2)^2 / 4 I, returned as the scalar  (seed 003 Def 281)."""
    return (0.5 * one_minus_sqnorm(z)).square()  # [..., 1]


def metric_temperature(z: Tensor, d_k: int) -> Tensor:
    """tau(z) = sqrt(d_k) / lambda(z) = sqrt(d_k) (1 - |z|^2) / 2  (seed 003 Thm 99)."""
    return (d_k**0.5) * 0.5 * one_minus_sqnorm(z)  # [..., 1]


def mobius_add(x: Tensor, y: Tensor) -> Tensor:
    """Mobius addition x (+) y on the unit ball (curvature -1).

    x (+) y = ((1 + 2<x,y> + |y|^2) x + (1 - |x|^2) y) / (1 + 2<x,y> + |x|^2 |y|^2).
    """
    xy = (x * y).sum(-1, keepdim=True)  # [..., 1]
    x2, y2 = sqnorm(x), sqnorm(y)  # [..., 1]
    num = (1 + 2 * xy + y2) * x + (1 - x2) * y  # [..., d]
    den = (1 + 2 * xy + x2 * y2).clamp_min(MIN_NORM)  # [..., 1]
    return num / den


def gyro_difference(x: Tensor, y: Tensor) -> Tensor:
    """(-x) (+) y, the ball point that carries x to the origin and y along with it.

    Written in delta = y - x so that nothing cancels when y is close to x:
    (-x) (+) y = ((1 - |x|^2) delta - |delta|^2 x) / ((1 - |x|^2)(1 - |y|^2) + |delta|^2),
    algebraically identical to mobius_add(-x, y).
    """
    delta = y - x  # [..., d]
    d2 = sqnorm(delta)  # [..., 1]
    ax, ay = one_minus_sqnorm(x), one_minus_sqnorm(y)  # [..., 1]
    return (ax * delta - d2 * x) / (ax * ay + d2)


def gyration(u: Tensor, v: Tensor, w: Tensor) -> Tensor:
    """gyr[u, v] w = -(u (+) v) (+) (u (+) (v (+) w)), in Ungar's closed form (curvature -1):
    w + 2 (A u + B v) / D with A = -<u,w>|v|^2 + <v,w> + 2<u,v><v,w>,
    B = -<v,w>|u|^2 - <u,w>, D = 1 + 2<u,v> + |u|^2 |v|^2.
    """
    u2, v2 = sqnorm(u), sqnorm(v)  # [..., 1]
    uv = (u * v).sum(-1, keepdim=True)
    uw = (u * w).sum(-1, keepdim=True)
    vw = (v * w).sum(-1, keepdim=True)
    a = -uw * v2 + vw + 2 * uv * vw
    b = -vw * u2 - uw
    den = (1 + 2 * uv + u2 * v2).clamp_min(MIN_NORM)
    return w + 2 * (a * u + b * v) / den  # [..., d]


def dist(x: Tensor, y: Tensor, keepdim: bool = False) -> Tensor:
    """Geodesic distance (seed 000 §4):
    d(x, y) = arcosh(1 + 2|x - y|^2 / ((1 - |x|^2)(1 - |y|^2)))
            = 2 asinh(|x - y| / sqrt((1 - |x|^2)(1 - |y|^2))).

    The asinh form reads |x - y| directly (no |x|^2 + |y|^2 - 2<x,y> cancellation, no
    arcosh(1 + tiny) loss), so it keeps float32 relative accuracy at small distances; its
    gradient at x = y is 0 rather than NaN.
    """
    diff = (x - y).norm(dim=-1, keepdim=True)  # [..., 1]
    scale = (one_minus_sqnorm(x) * one_minus_sqnorm(y)).sqrt()  # [..., 1]
    d = 2.0 * torch.asinh(diff / scale)
    return d if keepdim else d.squeeze(-1)


def gyro_norm_dist(n: Tensor) -> Tensor:
    """d(x, y) = 2 artanh(n) from n = |(-x) (+) y| (seed 000 §4, docs/seed_map.md), n capped
    just below 1 so the distance stays finite. n [...] -> [...] (any shape)."""
    return 2.0 * torch.atanh(n.clamp_max(1 - torch.finfo(n.dtype).eps))


def dist0(z: Tensor, keepdim: bool = False) -> Tensor:
    """d(0, z) = 2 artanh|z| (gyro_norm_dist of (-0) (+) z = z; seed 000 §4, docs/seed_map.md).
    The one form of the distance from the origin. z [..., d] -> [...] ([..., 1] with keepdim)."""
    d = gyro_norm_dist(z.norm(dim=-1, keepdim=True))  # [..., 1]
    return d if keepdim else d.squeeze(-1)


def pairwise_dist(x: Tensor, y: Tensor) -> Tensor:
    """All-pairs geodesic distance: x [..., N, d], y [..., M, d] -> [..., N, M].

    Uses the accurate asinh form on explicit differences (memory O(N M d)); attention code
    that needs large N, M picks its own trade-off (see world_model/attention/ida.py).
    """
    return dist(x.unsqueeze(-2), y.unsqueeze(-3))  # [..., N, M]


def pairwise_t(x: Tensor, y: Tensor) -> Tensor:
    """All-pairs t = |x - y|^2 / ((1 - |x|^2)(1 - |y|^2)), d(x, y) = 2 asinh(sqrt t) (seed 000
    §4), as one matrix product of augmented coordinates, [|x|^2/a_x, 1/a_x, x/a_x] .
    [1/a_y, |y|^2/a_y, -2y/a_y] with a = 1 - |.|^2, accumulated in float64 whatever the input
    dtype and rounded once to x.dtype (in float32 the expanded form loses all relative accuracy
    at small distances; docs/seed_map.md, the inverse-distance section). May round to slightly
    below 0 at x = y: floor it where a square root follows. No N x M float64 tensor is kept for
    the backward pass. x [..., N, d], y [..., M, d] -> [..., N, M]."""
    acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype
    xa, ya = x.to(acc), y.to(acc)  # [..., N, d], [..., M, d]
    x2, y2 = sqnorm(xa), sqnorm(ya)  # [..., N, 1], [..., M, 1]
    floor = torch.finfo(x.dtype).eps  # as one_minus_sqnorm for x.dtype
    ax, ay = (1.0 - x2).clamp_min(floor), (1.0 - y2).clamp_min(floor)
    left = torch.cat([x2 / ax, 1.0 / ax, xa / ax], dim=-1)  # [..., N, d + 2]
    right = torch.cat([1.0 / ay, y2 / ay, -2.0 * ya / ay], dim=-1)  # [..., M, d + 2]
    return (left @ right.transpose(-1, -2)).to(x.dtype)  # [..., N, M]


def dist_from_t(t: Tensor) -> Tensor:
    """d = 2 asinh(sqrt t) = log1p(2t + 2 sqrt(t (1 + t))) for t >= 0 (`pairwise_t`; all terms
    positive, no cancellation; log1p and sqrt are vectorised where asinh is not: 2-7x faster at
    the same float32 accuracy). Floor t at the dtype's smallest normal number first for a finite
    gradient at t = 0 (d/dt d^2 -> 4 there). t [...] -> [...]."""
    return torch.log1p(2.0 * t + 2.0 * torch.sqrt(t * (1.0 + t)))


def expmap0(v: Tensor) -> Tensor:
    """exp_0(v) = tanh(|v|) v / |v|  (lambda(0) = 2)."""
    n = _safe_norm(v)  # [..., 1]
    return torch.tanh(n) * v / n


def logmap0(y: Tensor) -> Tensor:
    """log_0(y) = artanh(|y|) y / |y|; |y| is capped just below 1 so the result is finite.
    artanh(r) / r is read from its series 1 + r^2/3 + r^4/5 below r = 1e-3 (truncation
    < 1e-19), so it is smooth in r^2 = |y|^2: derivatives of every order are finite at y = 0
    (through |y| the second is NaN there, and the model's features (z, log_0 z) are
    differentiated twice by a kick that autograd differentiates)."""
    r2 = sqnorm(y)  # [..., 1]
    small = r2 < 1e-6
    n = torch.where(small, torch.ones_like(r2), r2).sqrt()
    ratio = torch.atanh(n.clamp_max(1 - torch.finfo(y.dtype).eps)) / n
    return torch.where(small, 1.0 + r2 * (1 / 3 + r2 / 5), ratio) * y


def logmap0_jacobian(y: Tensor) -> tuple[Tensor, Tensor]:
    """log_0 and its Jacobian through two scalars: with r = |y|, f = artanh(r) / r and
    g = f'(r) / r = (1 / (1 - r^2) - f) / r^2, log_0(y) = f y and d log_0(y) / dy = f I + g y y^T
    (symmetric). Below r = 0.05 both are read from their series in r^2,
    f = 1 + r^2/3 + r^4/5 + ... + r^10/11 and g = 2/3 + 4r^2/5 + 6r^4/7 + 8r^6/9 (g's difference
    cancels there), so f and g are smooth in r^2 = |y|^2: their derivatives of every order are
    finite at y = 0 (through |y| the first is 0 * inf = NaN there; a kick differentiated by
    autograd differentiates the features (y, log_0 y) twice). y [..., d] -> (f, g) [..., 1]."""
    r2 = sqnorm(y)  # [..., 1]
    small = r2 < 0.05**2
    r2_safe = torch.where(small, torch.ones_like(r2), r2)
    n = r2_safe.sqrt()
    n_c = n.clamp_max(1 - torch.finfo(y.dtype).eps)
    f_exact = torch.atanh(n_c) / n
    g_exact = (1.0 / (1.0 - n_c.square()) - f_exact) / r2_safe
    f_series = 1 + r2 * (1 / 3 + r2 * (1 / 5 + r2 * (1 / 7 + r2 * (1 / 9 + r2 / 11))))
    g_series = 2 / 3 + r2 * (4 / 5 + r2 * (6 / 7 + r2 * 8 / 9))
    return torch.where(small, f_series, f_exact), torch.where(small, g_series, g_exact)


def logmap0_vjp(y: Tensor, w: Tensor, jacobian: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """w^T d log_0(y) / dy = f w + g (y . w) y in closed form (logmap0_jacobian, which a caller
    that also needs log_0(y) = f y passes as `jacobian`). y, w [..., d] -> [..., d]."""
    f, g = logmap0_jacobian(y) if jacobian is None else jacobian
    return f * w + g * (y * w).sum(-1, keepdim=True) * y


def expmap(x: Tensor, v: Tensor) -> Tensor:
    """exp_x(v) = x (+) (tanh(lambda_x |v| / 2) v / |v|)  (tangent vector v at x)."""
    n = _safe_norm(v)
    second = torch.tanh(0.5 * conformal_factor(x) * n) * v / n  # [..., d]
    return mobius_add(x, second)


def logmap(x: Tensor, y: Tensor) -> Tensor:
    """log_x(y) = (2 / lambda_x) artanh(|w|) w / |w|, w = (-x) (+) y (cancellation-free form)."""
    w = gyro_difference(x, y)  # [..., d]
    n = _safe_norm(w)
    n_c = n.clamp_max(1 - torch.finfo(y.dtype).eps)
    return (2.0 / conformal_factor(x)) * torch.atanh(n_c) * w / n


def project(z: Tensor, max_norm: float) -> Tensor:
    """Radially rescale points with |z| > max_norm onto the sphere of radius max_norm
    (identity inside; differentiable; 0 < max_norm < 1)."""
    if not 0.0 < max_norm < 1.0:
        raise ValueError(f"max_norm must lie in (0, 1), got {max_norm}")
    n = _safe_norm(z)
    return z * (max_norm / n).clamp_max(1.0)


def _gyr_to(x: Tensor, y: Tensor, v: Tensor) -> Tensor:
    """gyr[y, -x] v, evaluated as gyr[y, (-x) (+) y] v (the right loop property
    gyr[a, b] = gyr[a, b (+) a]). The closed form of gyr[y, -x] cancels for nearby points near
    the boundary: its denominator 1 - 2<x,y> + |x|^2 |y|^2 = (1 - |x|^2)(1 - |y|^2) + |x - y|^2
    and its numerator are O(1) terms summing to O(1 - |x|^2) (float32 relative error of the
    transport 0.14 at |x| = 0.999, 4e8 at 1 - 1e-4; tests/geometry/test_boundary_fuzz.py). With
    (-x) (+) y from gyro_difference nothing cancels there (7e-5, 7e-4; 6e-3 at 1 - 1e-5).
    x, y, v [..., d] -> [..., d]."""
    return gyration(y, gyro_difference(x, y), v)


def parallel_transport(x: Tensor, y: Tensor, v: Tensor) -> Tensor:
    """Parallel transport of a tangent vector v at x to y along the geodesic:
    P_{x->y}(v) = (lambda_x / lambda_y) gyr[y, -x] v (gyr[y, -x] as in _gyr_to). Preserves the
    metric norm lambda |v|."""
    return (conformal_factor(x) / conformal_factor(y)) * _gyr_to(x, y, v)


def christoffel_contract(z: Tensor, v: Tensor) -> Tensor:
    """Gamma(z)[v, v]^k = Gamma^k_ij(z) v^i v^j = lambda(z) (2 (z.v) v - |v|^2 z), in O(d)
    (seed 003 Prop 19 / Def 291's closed form)."""
    zv = (z * v).sum(-1, keepdim=True)  # [..., 1]
    return conformal_factor(z) * (2 * zv * v - sqnorm(v) * z)  # [..., d]


def kinetic_energy(z: Tensor, p: Tensor) -> Tensor:
    """K(z, p) = 1/2 p^T G^-1(z) p = |p|^2 / (2 lambda(z)^2)  (position-dependent mass G)."""
    return 0.5 * sqnorm(p) * inverse_metric_factor(z)  # [..., 1]


def kinetic_energy_grad(z: Tensor, p: Tensor) -> Tensor:
    """dK/dz for K = 1/2 p^T G^-1(z) p: since d lambda / dz = lambda^2 z,
    dK/dz = -|p|^2 z / lambda(z). The kick -dK/dz is the geodesic term the seed's B step omits
    (docs/architecture.md, where the seeds are wrong)."""
    return -sqnorm(p) * z / conformal_factor(z)  # [..., d]


def transported_velocity_error(z: Tensor, p: Tensor, z_t: Tensor, p_t: Tensor) -> Tensor:
    """lambda(z*)^2 |P_{z->z*} v - v*|^2: the metric norm at z* of the error of the velocity
    v = G^-1(z) p after parallel transport to z*, against v* = G^-1(z*) p* (seed 003 Def 281,
    docs/seed_map.md). P_{z->z*} = (lambda(z) / lambda(z*)) gyr[z*, -z] is written through
    a = 1 - |z|^2 (lambda = 2 / a), so the ratio is a* / a (gyr[z*, -z] as in _gyr_to).
    z, p, z_t, p_t [..., d] -> [...]."""
    a, a_t = one_minus_sqnorm(z), one_minus_sqnorm(z_t)  # 2 / lambda
    v = p * (0.5 * a).square()  # G^-1 p
    v_t = p_t * (0.5 * a_t).square()
    dv = (a_t / a) * _gyr_to(z, z_t, v) - v_t  # [..., d]
    return (dv / (0.5 * a_t)).square().sum(-1)  # lambda(z*)^2 |dv|^2 [...]


def geodesic_drift(
    z: Tensor,
    p: Tensor,
    t: float | Tensor,
    correction: Tensor | None = None,
    max_norm: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The A step of a BAOAB scheme (seed 003 Prop 102, docs/architecture.md): free motion along
    geodesics for time t, with an optional velocity correction delta (an orthonormal-frame
    vector, added as delta / lambda(z)):

        v = G^-1(z) p,  z' = exp_z(t (v + delta / lambda(z))),  v' = P_{z->z'} v,  p' = G(z') v'

    and z' projected to |z'| <= max_norm when given. delta = 0 is the exact Hamiltonian flow of
    K = 1/2 p^T G^-1 p (geodesic_flow). The same maps as composing expmap, project,
    parallel_transport and metric_factor (the tests check it), in one pass that reads |z|^2 and
    |z'|^2 once: with a = 1 - |z|^2 and a' = 1 - |z'|^2, lambda = 2 / a, so
    P_{z->z'} v = (a' / a) gyr[z', -z] v and p' = 4 gyr[z', -z] v / (a a') (~60 small ops where
    the composition takes ~90; on CPU a rollout's cost is per op). gyr[z', -z] is
    gyr[z', (-z) (+) z'] (as in _gyr_to), and (-z) (+) z' is the step s itself (z' = z (+) s),
    or gyro_difference's form for a projected z'.
    z, p, correction [..., d] -> (z', p') [..., d].
    """
    eps = torch.finfo(z.dtype).eps
    z2 = sqnorm(z)  # [..., 1]
    one_minus = 1.0 - z2
    a = one_minus.clamp_min(eps)  # 2 / lambda(z)
    v = p * (0.5 * a).square()  # G^-1 p
    u = t * (v if correction is None else v + 0.5 * a * correction)  # tangent step at z
    n = _safe_norm(u)
    th = torch.tanh(n / a)  # tanh(lambda |u| / 2)
    s = (th / n) * u  # exp_z(u) = z (+) s, |s| = th
    s2 = th.square()
    c = 1.0 + 2.0 * (z * s).sum(-1, keepdim=True)
    y = ((c + s2) * z + one_minus * s) / (c + z2 * s2).clamp_min(MIN_NORM)  # mobius_add(z, s)
    if max_norm is not None:
        y = y * (max_norm / _safe_norm(y)).clamp_max(1.0)
    y2 = sqnorm(y)
    a_y = (1.0 - y2).clamp_min(eps)
    if max_norm is not None:  # (-z) (+) y for the projected y (gyro_difference's form)
        delta = y - z
        d2 = sqnorm(delta)
        s = (a * delta - d2 * z) / (a * a_y + d2)
        s2 = sqnorm(s)
    # gyr[y, -z] v = gyr[y, s] v (gyration's closed form with u = y, v = s)
    cy = 1.0 + 2.0 * (y * s).sum(-1, keepdim=True)  # 1 + 2<y, s>
    yv = (y * v).sum(-1, keepdim=True)
    sv = (s * v).sum(-1, keepdim=True)
    coef_y = 2.0 * (cy * sv - yv * s2)
    coef_s = -2.0 * (sv * y2 + yv)
    gyr = v + (coef_y * y + coef_s * s) / (cy + y2 * s2).clamp_min(MIN_NORM)
    return y, gyr * (4.0 / (a * a_y))


def geodesic_flow(z: Tensor, p: Tensor, t: float | Tensor) -> tuple[Tensor, Tensor]:
    """Exact Hamiltonian flow of K(z, p) for time t (free motion along geodesics):
    v = G^-1 p, z' = exp_z(t v), v' = P_{z->z'}(v), p' = G(z') v' (geodesic_drift without a
    correction or projection).

    This is the A step of a BAOAB scheme that carries the kinetic-energy gradient of the
    position-dependent mass exactly (no -dK/dz kick is needed on top of it).
    """
    return geodesic_drift(z, p, t)
