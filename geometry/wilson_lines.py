"""Connections and Wilson lines of seed 003 (Def 280, Prop 97, Def 282, Def 290, Engineering
proxy 3): a connection from coefficients (affine_connection), the Wilson line along a straight
path in four modes (wilson_line), lines to the origin and their composition, hierarchical lines
over a grid of cells, and the closed-form lines in the group for a connection given by its
coefficients on the generators (wilson_line_in_group; for the affine connection without any
quadrature, affine_wilson_line_to_origin, with the pieces' exponents, the segmented line and
the VJPs the covariant head's closed-form potential gradient uses). Pure functions.

Convention (seed 003 Def 280 with -iA written as a real skew matrix, geometry.lie_algebra):
- The connection one-form A = A_mu dz^mu is skew-symmetric; covariant derivative
  D_mu = d_mu + A_mu. Parallel transport along x(t) solves dpsi/dt = -A_mu(x) x'^mu psi, so the
  Wilson line from a to b is U(b <- a) = P exp(-int_a^b A_mu dx^mu), later segments multiplying
  on the left.
- A connection is passed around as ``conn(x, dx) -> A_mu(x) dx^mu``: x, dx [..., d] ->
  [..., k, k], a closure over its coefficient tensors. Contracting with the direction first
  keeps every Wilson line O(G k^2) per point instead of materialising the [..., d, k, k]
  one-form.

Gauge transformations acting on a connection: geometry.gauge_transforms.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from .group_exponential import (
    _assemble,
    _factor_angles,
    _factor_elements,
    _phase,
    _quaternion_element,
    group_exp,
    group_exp_vjp,
)
from .lie_algebra import GaugeGroup, _bracket_vjp, bracket
from .su2 import quaternion_adjoint, quaternion_product, su2_quaternion

__all__ = [
    "ConnectionFn",
    "CoefficientFn",
    "WilsonMode",
    "WILSON_MODES",
    "affine_connection",
    "integrated_connection",
    "wilson_line",
    "wilson_line_to_origin",
    "compose_via_origin",
    "cell_centers",
    "hierarchical_wilson_line_to_origin",
    "affine_connection_coefficients",
    "wilson_line_in_group",
    "segmented_group_line",
    "segmented_group_line_vjp",
    "line_from_integral",
    "affine_endpoint_coefficients",
    "affine_integral",
    "affine_segment_exponents",
    "affine_segment_exponents_vjp",
    "affine_wilson_line_to_origin",
]
CoefficientFn = Callable[[Tensor, Tensor], Tensor]  # (x, dx) [..., d] -> coefficients [..., G]

ConnectionFn = Callable[[Tensor, Tensor], Tensor]
WilsonMode = Literal["first_order", "exp", "path_ordered", "magnus4"]
WILSON_MODES: tuple[str, ...] = typing.get_args(WilsonMode)

# fourth-order Magnus step (Blanes, Casas, Oteo & Ros 2009, eq. 4.2; two-point Gauss-Legendre):
# Omega = (A_1 + A_2) h / 2 + (sqrt 3 / 12) h^2 [A_2, A_1] at t_{1,2} = (1/2 -+ sqrt 3 / 6) h
_MAGNUS_NODES = (0.5 - math.sqrt(3.0) / 6.0, 0.5 + math.sqrt(3.0) / 6.0)
_MAGNUS_BRACKET = math.sqrt(3.0) / 12.0


# --------------------------------------------------------------------------- connections


def affine_connection(generators: Tensor, c0: Tensor, c1: Tensor) -> ConnectionFn:
    """A_mu(x) = sum_g (c0[mu, g] + sum_nu c1[mu, nu, g] x^nu) T_g  ("a connection from
    coefficients"). generators [G, k, k] (couplings folded in), c0 [d, G], c1 [d, d, G].
    Affine coefficients make the field strength non-zero and non-abelian in general."""

    def conn(x: Tensor, dx: Tensor) -> Tensor:
        coeff = c0 + torch.einsum("...n,mng->...mg", x, c1)  # [..., d, G]
        along = torch.einsum("...mg,...m->...g", coeff, dx)  # [..., G]
        return torch.einsum("...g,gij->...ij", along, generators)  # [..., k, k]

    return conn


_GAUSS_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights on [0, 1]."""
    if n not in _GAUSS_CACHE:
        x, w = np.polynomial.legendre.leggauss(n)
        _GAUSS_CACHE[n] = (0.5 * (x + 1.0), 0.5 * w)
    return _GAUSS_CACHE[n]


def _path_integral(fn: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor, n_quad: int):
    """-int_0^1 fn(a + t (b - a), b - a) dt by n_quad-point Gauss-Legendre (exact for
    integrands polynomial of degree < 2 n_quad in t)."""
    nodes, weights = _gauss_legendre(n_quad)
    step = b - a
    out = 0.0
    for t, w in zip(nodes, weights, strict=True):
        out = out - float(w) * fn(a + float(t) * step, step)
    return out


def _segment_increments(
    fn: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor, segments: int
):
    """The path-ordered pieces' exponents -fn(mid_s, (b - a) / S) at the S segment midpoints
    (midpoint rule: error O(S^-3) per piece, O(S^-2) in all): [S, ...]."""
    if segments < 1:
        raise ValueError("segments must be >= 1")
    ts = torch.linspace(0.0, 1.0, segments + 1, dtype=a.dtype, device=a.device)
    step = b - a
    mids = a.unsqueeze(0) + (0.5 * (ts[1:] + ts[:-1])).view(-1, *([1] * a.dim())) * step
    return -fn(mids, (step / segments).expand_as(mids))


def _magnus4_increments(
    fn: Callable[[Tensor, Tensor], Tensor],
    a: Tensor,
    b: Tensor,
    segments: int,
    commutator: Callable[[Tensor, Tensor], Tensor],
):
    """The pieces' fourth-order Magnus exponents (A_1 + A_2) / 2 + (sqrt 3 / 12) [A_2, A_1],
    A_i = -fn(x(t_i), (b - a) / S) at each segment's two Gauss points (local error O(S^-5),
    O(S^-4) in all; exact for a constant connection): [S, ...]."""
    if segments < 1:
        raise ValueError("segments must be >= 1")
    step = b - a
    starts = torch.arange(segments, dtype=a.dtype, device=a.device) / segments  # [S]
    shape = (-1, *([1] * a.dim()))
    a1, a2 = (
        -fn(x, (step / segments).expand_as(x))
        for x in (
            a.unsqueeze(0) + (starts + c / segments).view(shape) * step for c in _MAGNUS_NODES
        )
    )
    return 0.5 * (a1 + a2) + _MAGNUS_BRACKET * commutator(a2, a1)


def _matrix_commutator(x: Tensor, y: Tensor) -> Tensor:
    return x @ y - y @ x


def _ordered_product(pieces: Tensor, mul: Callable[[Tensor, Tensor], Tensor] = torch.matmul):
    """pieces[S-1] @ ... @ pieces[0]: later pieces on the left. [S, ..., n, n] -> [..., n, n]
    (or any associative `mul`, e.g. unit quaternions [S, ..., 4] -> [..., 4]). As a tree,
    neighbours multiplied in one batched product per level: ceil(log2 S) products instead of
    S - 1 (on CPU the cost of these small products is per call)."""
    while pieces.shape[0] > 1:
        odd = pieces[-1:] if pieces.shape[0] % 2 else None
        even = pieces[: pieces.shape[0] - (odd is not None)]
        pieces = mul(even[1::2], even[0::2])
        if odd is not None:
            pieces = torch.cat([pieces, odd])
    return pieces[0]


def _prefix_products(pieces: Tensor, mul: Callable[[Tensor, Tensor], Tensor] = torch.matmul):
    """The inclusive scan P_s = pieces[s] @ ... @ pieces[0] (or `mul`), [S, ...] -> [S, ...]
    (Hillis-Steele: ceil(log2 S) batched products)."""
    offset = 1
    while offset < pieces.shape[0]:
        pieces = torch.cat([pieces[:offset], mul(pieces[offset:], pieces[:-offset])])
        offset *= 2
    return pieces


def integrated_connection(conn: ConnectionFn, a: Tensor, b: Tensor, n_quad: int = 3) -> Tensor:
    """H = -int_0^1 A_mu(a + t (b - a)) (b - a)^mu dt along the straight path a -> b, by
    n_quad-point Gauss-Legendre (exact for connections polynomial of degree < 2 n_quad in x).
    a, b [..., d] -> [..., k, k]."""
    return _path_integral(conn, a, b, n_quad)


def wilson_line(
    conn: ConnectionFn, a: Tensor, b: Tensor, mode: WilsonMode = "path_ordered", segments: int = 8
) -> Tensor:
    """U(b <- a) = P exp(-int_a^b A) along the straight path (seed 003 Def 280, Prop 97, Def 290).

    - "first_order":  I + H                      (Prop 97; not orthogonal, errs as O(|b - a|^2))
    - "exp":          matrix_exp(H)              (orthogonal; exact iff the A(x) . (b - a) along
                                                  the path commute, e.g. a constant connection)
    - "path_ordered": prod_s matrix_exp(H_s) over `segments` equal pieces, later on the left
                      (orthogonal; converges to the true transport as O(segments^-2))
    - "magnus4":      prod_s matrix_exp(Omega_s), Omega_s the fourth-order Magnus exponent of
                      piece s (orthogonal; O(segments^-4); exact for a constant connection)
    a, b [..., d] -> [..., k, k].
    """
    if mode == "first_order" or mode == "exp":
        h = integrated_connection(conn, a, b)
        if mode == "exp":
            return torch.linalg.matrix_exp(h)
        return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h
    if mode == "path_ordered":
        pieces = _segment_increments(conn, a, b, segments)
    elif mode == "magnus4":
        pieces = _magnus4_increments(conn, a, b, segments, _matrix_commutator)
    else:
        raise ValueError(f"unknown Wilson-line mode {mode!r}")
    return _ordered_product(torch.linalg.matrix_exp(pieces))


def wilson_line_to_origin(
    conn: ConnectionFn, z: Tensor, mode: WilsonMode = "path_ordered", segments: int = 8
) -> Tensor:
    """U_{z->0} = U(0 <- z) along the straight path (seed 003 Def 282).
    z [..., d] -> [..., k, k]."""
    return wilson_line(conn, z, torch.zeros_like(z), mode=mode, segments=segments)


def compose_via_origin(u_z_to_0: Tensor, u_zp_to_0: Tensor) -> Tensor:
    """U(z <- z') = U_{z->0}^T U_{z'->0}: transport z' -> 0 -> z (seed 003 §Engineering proxy 3).
    Exact for orthogonal lines; O(N) lines to the origin replace O(N^2) pairwise ones."""
    return u_z_to_0.transpose(-1, -2) @ u_zp_to_0


# --------------------------------------------------------------------------- hierarchical cells


def cell_centers(z: Tensor, level: int) -> Tensor:
    """Centre of z's cell in the grid of 2^level cells per axis over [-1, 1]^d
    (seed 003 Def 290: level-l cells of diameter ~ 2^-l). z [..., d] -> [..., d]."""
    width = 2.0 / (2**level)
    idx = torch.floor((z.detach() + 1.0) / width).clamp(0, 2**level - 1)
    return (idx + 0.5) * width - 1.0


def hierarchical_wilson_line_to_origin(
    conn: ConnectionFn, z: Tensor, level: int, segments: int
) -> Tensor:
    """U_{z->0} ~ U_{c->0} (I + H(z -> c)) with c the cell centre of z (seed 003 Def 290).

    Path-ordered lines are computed once per occupied cell and shared; the short hop inside the
    cell is first order. The path z -> c -> 0 is not the straight one, so the result differs
    from the straight-path line by the holonomy of that thin triangle (O(|F| 2^-level |z|)), but
    it transforms covariantly all the same: only its first-order hop breaks gauge invariance.
    """
    centres = cell_centers(z, level)  # [..., d]
    flat = centres.reshape(-1, z.shape[-1])
    uniq, inverse = torch.unique(flat, dim=0, return_inverse=True)
    u_cells = wilson_line_to_origin(conn, uniq, mode="path_ordered", segments=segments)
    u_c = u_cells[inverse].reshape(*z.shape[:-1], *u_cells.shape[-2:])
    u_local = wilson_line(conn, z, centres, mode="first_order")
    return u_c @ u_local


# --------------------------------------------------------------------------- closed-form lines


def affine_connection_coefficients(c0: Tensor, c1: Tensor) -> CoefficientFn:
    """Coefficients of :func:`affine_connection`: (A_mu(x) dx^mu)_g = sum_mu (c0[mu, g] +
    sum_nu c1[mu, nu, g] x^nu) dx^mu. c0 [d, G], c1 [d, d, G]; x, dx [..., d] -> [..., G]."""

    def coefficients(x: Tensor, dx: Tensor) -> Tensor:
        coeff = c0 + torch.einsum("...n,mng->...mg", x, c1)  # [..., d, G]
        return torch.einsum("...mg,...m->...g", coeff, dx)

    return coefficients


def wilson_line_in_group(
    group: GaugeGroup,
    coefficients: CoefficientFn,
    a: Tensor,
    b: Tensor,
    mode: WilsonMode,
    segments: int,
) -> Tensor:
    """The Wilson line U(b <- a) of :func:`wilson_line`, for a connection given by its
    coefficients on `group`'s generators, with every exponential in closed form (GaugeGroup)
    and Magnus commutators as :func:`bracket`. Same modes, same quadrature (Gauss-Legendre for
    the integrated connection, midpoints for the path-ordered pieces, two Gauss points for
    Magnus), same result. a, b [..., d] -> [..., r, r]."""
    if mode == "first_order" or mode == "exp":
        return line_from_integral(group, _path_integral(coefficients, a, b, 3), mode)
    if mode == "path_ordered":
        pieces = _segment_increments(coefficients, a, b, segments)
    elif mode == "magnus4":
        pieces = _magnus4_increments(
            coefficients, a, b, segments, functools.partial(bracket, group)
        )
    else:
        raise ValueError(f"unknown Wilson-line mode {mode!r}")
    return _ordered_group_product(group, pieces)


def _ordered_group_product(group: GaugeGroup, pieces: Tensor) -> Tensor:
    """prod_s exp(sum_g pieces[s, ..., g] T_g), later pieces on the left: [S, ..., G] ->
    [..., r, r]. Per factor: N_f <= 2 multiplies unit quaternions (a tree of batched products)
    and sums the abelian phases, then assembles one line; N_f > 2 multiplies the factors'
    matrices."""
    if group.n_colors > 2:
        u_c, u_2, phase = _factor_elements(group, pieces)
        return _assemble(_ordered_product(u_c), _ordered_product(u_2), phase.prod(dim=0))
    quaternions = su2_quaternion(_factor_angles(group, pieces))  # [S, ..., F, 4]
    total = _ordered_product(quaternions, quaternion_product)
    return _quaternion_element(group, total, _phase(group, pieces).sum(0))


def segmented_group_line(group: GaugeGroup, pieces: Tensor) -> tuple[Tensor, Tensor]:
    """U = E_S .. E_1, E_s = exp(sum_g pieces[s - 1, ..., g] T_g), with what its gradient
    needs (:func:`segmented_group_line_vjp`): pieces [S, ..., G] -> (U [..., r, r], the
    exclusive prefix quaternions Q_0 = 1, Q_s = quaternion of E_s .. E_1 for s < S,
    [S, ..., F, 4]). N_f <= 2."""
    if group.n_colors > 2:
        raise ValueError(f"segmented_group_line has a closed form for N_f <= 2, got {group}")
    scan = _prefix_products(su2_quaternion(_factor_angles(group, pieces)), quaternion_product)
    line = _quaternion_element(group, scan[-1], _phase(group, pieces).sum(0))
    one = torch.zeros_like(scan[:1])
    one[..., 0] = 1.0
    return line, torch.cat([one, scan[:-1]])


def segmented_group_line_vjp(
    group: GaugeGroup, pieces: Tensor, prefixes: Tensor, e0: Tensor
) -> Tensor:
    """The gradient in pieces [S, ..., G] of <kappa, U psi> (U = segmented_group_line), given
    e0_g = <U^T kappa, T_g psi> [..., G]. With P_s = E_s .. E_1 and y = U^T kappa,
    dU = sum_s E_S .. E_{s+1} dE_s P_{s-1} and dE_s = E_s sum_g' M_s[g', g] T_g' dpieces_g, so
    the gradient in piece s is M_s^T e_s with e_s,g = <P_{s-1} y, T_g P_{s-1} psi> =
    sum_b Ad[g, b] e0_b: P^T T_g P = sum_b Ad[g, b] T_b is the adjoint action of the prefix, a
    3 x 3 rotation per SU(2)-type factor (geometry.su2.quaternion_adjoint) and 1 on U(1). So
    the segments cost 3-vectors, not r x r matrices."""
    n = group.n_colors
    k = n * n - 1 + 3  # the SU(2)-type components, then U(1)
    rot = quaternion_adjoint(prefixes)  # [S, ..., F, 3, 3]
    blocks = (rot @ e0[..., :k].unflatten(-1, (-1, 3)).unsqueeze(-1)).squeeze(-1)  # [S,..,F,3]
    e = torch.cat([blocks.flatten(-2), e0[..., k:].expand(*blocks.shape[:-2], -1)], dim=-1)
    return group_exp_vjp(group, pieces, e)


def _first_order_line(group: GaugeGroup, h: Tensor) -> Tensor:
    """I + sum_g h_g T_g (Prop 97's first-order line): h [..., G] -> [..., r, r]."""
    gens = group.generators(h.dtype).to(h.device)
    eye = torch.eye(group.dim, dtype=h.dtype, device=h.device)
    return eye + torch.einsum("...g,gij->...ij", h, gens)


def line_from_integral(group: GaugeGroup, h: Tensor, mode: WilsonMode) -> Tensor:
    """The exp or first-order line from the integrated connection h [..., G] -> [..., r, r]."""
    if mode == "exp":
        return group_exp(group, h)
    if mode != "first_order":
        raise ValueError(f"unknown Wilson-line mode {mode!r} (exp or first_order)")
    return _first_order_line(group, h)


def affine_endpoint_coefficients(c0: Tensor, c1: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
    """Along x(t) = (1 - t) z the affine connection (c0 [d, G], c1 [d, d, G]) is linear in t:
    -(A_mu(x) x'^mu)_g = p_g + (1 - t) q_g with p = z . c0 and q_g = sum_{mu nu} c1[mu, nu, g]
    z^mu z^nu. z [..., d] -> (p, q) [..., G] each (as matrix products: a three-operand einsum
    costs several times more at small sizes)."""
    d, n_gen = c0.shape
    zz = (z.unsqueeze(-1) * z.unsqueeze(-2)).flatten(-2)  # [..., d^2]
    return z @ c0, zz @ c1.reshape(d * d, n_gen)


def affine_integral(c0: Tensor, c1: Tensor, z: Tensor) -> Tensor:
    """The affine connection integrated along x(t) = (1 - t) z, exact: h = p + q / 2
    (:func:`affine_endpoint_coefficients`). z [..., d] -> [..., G]."""
    p, q = affine_endpoint_coefficients(c0, c1, z)
    return p + 0.5 * q


def _segment_weights(mode: WilsonMode, segments: int, like: Tensor) -> tuple[Tensor, float]:
    """(1 - t_mid,s) / S for each piece [S] and the Magnus bracket's weight (0 but for magnus4)."""
    n = 1 if mode == "exp" else segments
    mids = (torch.arange(n, dtype=like.dtype, device=like.device) + 0.5) / n
    return (1.0 - mids) / n, (1.0 / (12.0 * n**3) if mode == "magnus4" else 0.0)


def affine_segment_exponents(
    group: GaugeGroup, p: Tensor, q: Tensor, mode: WilsonMode, segments: int
) -> Tensor:
    """The pieces' exponents of U_{z->0} for the affine connection, in closed form from
    (p, q) [..., G] (:func:`affine_endpoint_coefficients`): [S, ..., G] (S = 1 for exp).
    With b(t) = p + (1 - t) q linear in t, piece s has the exact integral (p + (1 - t_s) q) / S
    at its midpoint t_s (path_ordered's midpoint rule is exact here), and Magnus-4's bracket
    (sqrt 3 / 12) [b(t_2), b(t_1)] / S^2 = [p, q] / (12 S^3), the same for every piece."""
    if mode not in ("exp", "path_ordered", "magnus4"):
        raise ValueError(f"affine_segment_exponents takes exp, path_ordered or magnus4: {mode!r}")
    weights, w_bracket = _segment_weights(mode, segments, p)
    shape = (-1, *([1] * p.dim()))
    pieces = p / weights.numel() + weights.view(shape) * q  # [S, ..., G]
    if w_bracket:
        pieces = pieces + w_bracket * bracket(group, p, q)
    return pieces


def affine_segment_exponents_vjp(
    group: GaugeGroup, p: Tensor, q: Tensor, mode: WilsonMode, segments: int, grad: Tensor
) -> tuple[Tensor, Tensor]:
    """Gradients in p and q of <grad, affine_segment_exponents(...)>: grad [S, ..., G] ->
    ([..., G], [..., G])."""
    weights, w_bracket = _segment_weights(mode, segments, p)
    shape = (-1, *([1] * p.dim()))
    total = grad.sum(0)  # [..., G]
    grad_p = total / weights.numel()
    grad_q = (weights.view(shape) * grad).sum(0)
    if w_bracket:
        bp, bq = _bracket_vjp(group, p, q, total)
        grad_p, grad_q = grad_p + w_bracket * bp, grad_q + w_bracket * bq
    return grad_p, grad_q


def affine_wilson_line_to_origin(
    group: GaugeGroup,
    c0: Tensor,
    c1: Tensor,
    z: Tensor,
    mode: WilsonMode,
    segments: int,
) -> Tensor:
    """U_{z->0} for the affine connection (c0, c1) on `group` (the covariant head's case), with
    no quadrature: the integrated connection (first order, exp) and the pieces' exponents
    (path_ordered, magnus4) are exact polynomials in z (:func:`affine_segment_exponents`).
    z [..., d] -> [..., r, r]."""
    if mode == "first_order":
        return line_from_integral(group, affine_integral(c0, c1, z), mode)
    p, q = affine_endpoint_coefficients(c0, c1, z)
    pieces = affine_segment_exponents(group, p, q, mode, segments)
    if mode == "exp":
        return group_exp(group, pieces[0])
    return _ordered_group_product(group, pieces)
