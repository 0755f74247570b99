"""Gauge structure of seed 003 in a real representation: generators, connections, Wilson lines,
gauge transformations. Pure functions (a connection is a closure over its coefficient tensors).

Convention (seed 003 Def 279-280 with -iA written as a real skew matrix):
- Features live in R^k, the realification of C^(k/2); the unitary gauge group acts by
  orthogonal k x k matrices and the connection one-form A = A_mu dz^mu is skew-symmetric.
- Covariant derivative D_mu = d_mu + A_mu. Parallel transport along x(t) solves
  dpsi/dt = -A_mu(x) x'^mu psi, so the Wilson line from a to b is
  U(b <- a) = P exp(-int_a^b A_mu dx^mu), later segments multiplying on the left.
- A gauge transformation psi -> Omega psi acts on the *connection*:
  A_mu -> Omega A_mu Omega^T + Omega d_mu Omega^T, and then U(b <- a) -> Omega(b) U Omega(a)^T.
  (Rotating vectors without transforming A tests nothing: docs/architecture.md, "Where the
  seeds are wrong".)

A connection is passed around as ``conn(x, dx) -> A_mu(x) dx^mu``: x, dx [..., d] -> [..., k, k].
Contracting with the direction first keeps every Wilson line O(G k^2) per point instead of
materialising the [..., d, k, k] one-form.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from .su2 import (
    complex_dtype_for,
    pauli,
    quaternion_adjoint,
    quaternion_product,
    su2_exp,
    su2_exp_jacobian_vjp,
    su2_quaternion,
)

__all__ = [
    "ConnectionFn",
    "WilsonMode",
    "GaugeGenerators",
    "gell_mann",
    "realify",
    "gauge_generators",
    "affine_connection",
    "integrated_connection",
    "wilson_line",
    "wilson_line_to_origin",
    "compose_via_origin",
    "GaugeField",
    "random_gauge_field",
    "gauge_omega",
    "gauge_omega_derivative",
    "gauge_transform_connection",
    "cell_centers",
    "hierarchical_wilson_line_to_origin",
    "CoefficientFn",
    "GaugeGroup",
    "affine_connection_coefficients",
    "affine_integral",
    "line_from_integral",
    "group_exp",
    "group_exp_vjp",
    "wilson_line_in_group",
    "affine_wilson_line_to_origin",
    "WILSON_MODES",
    "structure_constants",
    "bracket",
    "affine_endpoint_coefficients",
    "affine_segment_exponents",
    "affine_segment_exponents_vjp",
    "segmented_group_line",
    "segmented_group_line_vjp",
]

CoefficientFn = Callable[[Tensor, Tensor], Tensor]  # (x, dx) [..., d] -> coefficients [..., G]

ConnectionFn = Callable[[Tensor, Tensor], Tensor]
WilsonMode = Literal["first_order", "exp", "path_ordered", "magnus4"]
WILSON_MODES: tuple[str, ...] = ("first_order", "exp", "path_ordered", "magnus4")

# fourth-order Magnus step (Blanes, Casas, Oteo & Ros 2009, eq. 4.2; two-point Gauss-Legendre):
# Omega = (A_1 + A_2) h / 2 + (sqrt 3 / 12) h^2 [A_2, A_1] at t_{1,2} = (1/2 -+ sqrt 3 / 6) h
_MAGNUS_NODES = (0.5 - math.sqrt(3.0) / 6.0, 0.5 + math.sqrt(3.0) / 6.0)
_MAGNUS_BRACKET = math.sqrt(3.0) / 12.0


# --------------------------------------------------------------------------- generators


def gell_mann(n: int, dtype: torch.dtype = torch.complex128) -> Tensor:
    """Generalised Gell-Mann matrices of SU(n): [n^2 - 1, n, n] Hermitian, traceless,
    Tr(l_a l_b) = 2 delta_ab (n = 2 gives the Pauli matrices up to order, n = 1 gives none)."""
    mats = []
    for j in range(n):
        for k in range(j + 1, n):
            s = torch.zeros(n, n, dtype=dtype)
            s[j, k] = s[k, j] = 1
            a = torch.zeros(n, n, dtype=dtype)
            a[j, k], a[k, j] = -1j, 1j
            mats += [s, a]
    for l in range(1, n):
        diag = torch.zeros(n, dtype=dtype)
        diag[:l] = 1
        diag[l] = -l
        mats.append(torch.diag(diag) * np.sqrt(2.0 / (l * (l + 1))))
    return torch.stack(mats) if mats else torch.zeros(0, n, n, dtype=dtype)


def realify(m: Tensor) -> Tensor:
    """Complex [..., n, n] acting on C^n -> real [..., 2n, 2n] acting on (Re psi, Im psi):
    [[Re M, -Im M], [Im M, Re M]]. A Lie-algebra homomorphism; unitary -> orthogonal,
    anti-Hermitian -> skew-symmetric."""
    re, im = m.real, m.imag
    top = torch.cat([re, -im], dim=-1)
    bottom = torch.cat([im, re], dim=-1)
    return torch.cat([top, bottom], dim=-2)


@dataclasses.dataclass(frozen=True)
class GaugeGenerators:
    """Real skew generators of G = SU(N_f)_C x SU(2)_L x U(1)_Y on R^k (seed 003 Def 279).

    R^k is the realification of C^(k/2) = C^(N_f) (colour) (x) C^2 (doublet) (x) C^m (channels);
    the three factors act on different tensor factors, so they commute with each other.
    """

    binding: Tensor  # [N_f^2 - 1, k, k]  realified -i lambda_a / 2   (SU(N_f)_C, coupling g_s)
    error: Tensor  # [3, k, k]           realified -i sigma_b / 2    (SU(2)_L, coupling g_2)
    opportunity: Tensor  # [1, k, k]     realified -i Y / 2          (U(1)_Y, coupling g_1)

    def stacked(self, g_s: float, g_2: float, g_1: float) -> Tensor:
        """All generators with their couplings folded in: [G, k, k], G = N_f^2 - 1 + 3 + 1."""
        return torch.cat([g_s * self.binding, g_2 * self.error, g_1 * self.opportunity], dim=0)

    @property
    def dim(self) -> int:
        return self.binding.shape[-1]


def gauge_generators(
    k: int, n_colors: int = 2, hypercharge: float = 1.0, dtype: torch.dtype = torch.float32
) -> GaugeGenerators:
    """Generators of SU(n_colors) x SU(2) x U(1) acting on R^k; needs k divisible by 4 n_colors."""
    if n_colors < 1 or k % (4 * n_colors) != 0:
        raise ValueError(f"k={k} must be a positive multiple of 4 * n_colors = {4 * n_colors}")
    m = k // (4 * n_colors)
    cdt = complex_dtype_for(dtype)
    eye_c, eye_2, eye_m = (torch.eye(s, dtype=cdt) for s in (n_colors, 2, m))

    def lift(colour: Tensor, doublet: Tensor) -> Tensor:  # [n_c, n_c], [2, 2] -> [k, k] real
        return realify(-0.5j * torch.kron(torch.kron(colour, doublet), eye_m)).to(dtype)

    binding = [lift(lam, eye_2) for lam in gell_mann(n_colors, cdt)]
    error = [lift(eye_c, sig) for sig in pauli(cdt)]
    opportunity = [lift(hypercharge * eye_c, eye_2)]
    empty = torch.zeros(0, k, k, dtype=dtype)
    return GaugeGenerators(
        binding=torch.stack(binding) if binding else empty,
        error=torch.stack(error),
        opportunity=torch.stack(opportunity),
    )


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


# --------------------------------------------------------------------------- gauge transformations


@dataclasses.dataclass(frozen=True)
class GaugeField:
    """A smooth orthogonal field Omega(z) = prod_j exp(phi_j(z) X_j) (j = 0 .. J-1, left to
    right) with phi_j(z) = a_j . z + b_j sin(w_j . z + c_j). Its derivative is closed-form."""

    X: Tensor  # [J, k, k] skew (combinations of gauge generators: Omega stays in the group)
    a: Tensor  # [J, d]
    b: Tensor  # [J]
    w: Tensor  # [J, d]
    c: Tensor  # [J]


def random_gauge_field(
    generators: Tensor,
    d: int,
    n_factors: int = 3,
    scale: float = 1.0,
    generator: torch.Generator | None = None,
) -> GaugeField:
    """A random smooth gauge transformation built from `generators` [G, k, k]."""
    dtype = generators.dtype
    g = generators.shape[0]

    def rnd(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    mix = rnd(n_factors, g)
    x = torch.einsum("jg,gkl->jkl", mix, generators)
    x = x / x.flatten(1).norm(dim=-1).clamp_min(1e-12)[:, None, None]
    return GaugeField(
        X=x,
        a=scale * rnd(n_factors, d),
        b=scale * rnd(n_factors),
        w=3.0 * rnd(n_factors, d),
        c=rnd(n_factors),
    )


def _phi_and_dphi(field: GaugeField, z: Tensor, dz: Tensor | None):
    arg = torch.einsum("...d,jd->...j", z, field.w) + field.c  # [..., J]
    phi = torch.einsum("...d,jd->...j", z, field.a) + field.b * torch.sin(arg)  # [..., J]
    if dz is None:
        return phi, None
    dphi = torch.einsum("...d,jd->...j", dz, field.a) + field.b * torch.cos(arg) * torch.einsum(
        "...d,jd->...j", dz, field.w
    )
    return phi, dphi


def gauge_omega(field: GaugeField, z: Tensor) -> Tensor:
    """Omega(z): z [..., d] -> [..., k, k] orthogonal."""
    phi, _ = _phi_and_dphi(field, z, None)
    facs = torch.linalg.matrix_exp(phi[..., None, None] * field.X)  # [..., J, k, k]
    out = facs[..., 0, :, :]
    for j in range(1, facs.shape[-3]):
        out = out @ facs[..., j, :, :]
    return out


def gauge_omega_derivative(field: GaugeField, z: Tensor, dz: Tensor) -> Tensor:
    """Directional derivative (dz . d) Omega(z) by the product rule over the factors:
    sum_j E_0..E_{j-1} (dphi_j X_j E_j) E_{j+1}..E_{J-1}. z, dz [..., d] -> [..., k, k]."""
    phi, dphi = _phi_and_dphi(field, z, dz)
    facs = torch.linalg.matrix_exp(phi[..., None, None] * field.X)  # [..., J, k, k]
    n = facs.shape[-3]
    eye = torch.eye(facs.shape[-1], dtype=z.dtype, device=z.device).expand_as(facs[..., 0, :, :])
    prefix = [eye]
    for j in range(n - 1):
        prefix.append(prefix[-1] @ facs[..., j, :, :])
    out = torch.zeros_like(eye)
    suffix = eye
    for j in reversed(range(n)):
        d_fac = dphi[..., j, None, None] * (field.X[j] @ facs[..., j, :, :])
        out = out + prefix[j] @ d_fac @ suffix
        suffix = facs[..., j, :, :] @ suffix
    return out


def gauge_transform_connection(conn: ConnectionFn, field: GaugeField) -> ConnectionFn:
    """A'_mu = Omega A_mu Omega^T + Omega d_mu Omega^T, contracted with dx (see module doc)."""

    def transformed(x: Tensor, dx: Tensor) -> Tensor:
        om = gauge_omega(field, x)
        d_om = gauge_omega_derivative(field, x, dx)
        return om @ conn(x, dx) @ om.transpose(-1, -2) + om @ d_om.transpose(-1, -2)

    return transformed


# --------------------------------------------------------------------------- hierarchical cells


def cell_centers(z: Tensor, level: int) -> Tensor:
    """Centre of z's cell in the grid of 2^level cells per axis over [-1, 1]^d
    (seed 003 Def 290: level-l cells of diameter ~ 2^-l). z [..., d] -> [..., d]."""
    width = 2.0 / (2**level)
    idx = torch.floor((z.detach() + 1.0) / width).clamp(0, 2**level - 1)
    return (idx + 0.5) * width - 1.0


def hierarchical_wilson_line_to_origin(
    conn: ConnectionFn, z: Tensor, level: int, segments: int = 16
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


@dataclasses.dataclass(frozen=True)
class GaugeGroup:
    """SU(N_f)_C x SU(2)_L x U(1)_Y with its couplings, acting on the minimal representation
    R^r, r = 4 N_f (realified C^{N_f} (x) C^2): the layout and generator order of
    ``gauge_generators(r, n_colors, hypercharge).stacked(g_s, g_2, g_1)``.

    A connection given by its coefficients h_g on those generators has Wilson lines that factor
    over the three commuting factors: exp(sum_g h_g T_g) = realify(U_C (x) U_2 e^{-i phi}), with
    U_2 = exp(-i g_2 h_2 . sigma / 2) in closed form (geometry.su2.su2_exp), U_C likewise for
    N_f = 2 (its Gell-Mann matrices are the Pauli matrices) and a small N_f x N_f exponential
    otherwise, and the U(1) phase phi = g_1 Y h_1 / 2 exact. Path ordering factors the same way
    (components in commuting factors commute at every point), and the abelian phase needs no
    ordering at all.
    """

    n_colors: int
    g_s: float
    g_2: float
    g_1: float
    hypercharge: float = 1.0

    @property
    def n_generators(self) -> int:
        return self.n_colors**2 - 1 + 3 + 1

    @property
    def dim(self) -> int:
        return 4 * self.n_colors

    def generators(self, dtype: torch.dtype = torch.float64) -> Tensor:
        """The stacked generators T_g [G, r, r] with couplings folded in."""
        gens = gauge_generators(self.dim, self.n_colors, self.hypercharge, torch.float64)
        return gens.stacked(self.g_s, self.g_2, self.g_1).to(dtype)


def affine_connection_coefficients(c0: Tensor, c1: Tensor) -> CoefficientFn:
    """Coefficients of :func:`affine_connection`: (A_mu(x) dx^mu)_g = sum_mu (c0[mu, g] +
    sum_nu c1[mu, nu, g] x^nu) dx^mu. c0 [d, G], c1 [d, d, G]; x, dx [..., d] -> [..., G]."""

    def coefficients(x: Tensor, dx: Tensor) -> Tensor:
        coeff = c0 + torch.einsum("...n,mng->...mg", x, c1)  # [..., d, G]
        return torch.einsum("...mg,...m->...g", coeff, dx)

    return coefficients


def _factor_elements(group: GaugeGroup, h: Tensor) -> tuple[Tensor | None, Tensor, Tensor]:
    """exp of the algebra element sum_g h_g T_g, per factor: (U_C [..., N, N] or None for N = 1,
    U_2 [..., 2, 2], phase [...] complex). h [..., G]."""
    n = group.n_colors
    h_c, h_2, h_1 = h[..., : n * n - 1], h[..., n * n - 1 : n * n + 2], h[..., -1]
    u_2 = su2_exp(group.g_2 * h_2)
    if n == 1:
        u_c = None
    elif n == 2:  # gell_mann(2) = (sigma_1, sigma_2, sigma_3)
        u_c = su2_exp(group.g_s * h_c)
    else:
        lam = gell_mann(n, complex_dtype_for(h.dtype)).to(h.device)
        gen = torch.einsum("...a,aij->...ij", (group.g_s * h_c).to(lam.dtype), lam)
        u_c = torch.linalg.matrix_exp(-0.5j * gen)
    phi = 0.5 * group.g_1 * group.hypercharge * h_1  # [...]
    phase = torch.polar(torch.ones_like(phi), -phi)
    return u_c, u_2, phase


def _assemble(u_c: Tensor | None, u_2: Tensor, phase: Tensor) -> Tensor:
    """realify(U_C (x) U_2 phase) -> [..., r, r] real (colour index outer, doublet inner, as in
    gauge_generators)."""
    if u_c is None:
        full = u_2
    else:
        n = u_c.shape[-1]
        full = (u_c[..., :, None, :, None] * u_2[..., None, :, None, :]).reshape(
            *u_2.shape[:-2], 2 * n, 2 * n
        )
    return realify(full * phase[..., None, None])


def _factor_angles(group: GaugeGroup, x: Tensor) -> Tensor:
    """The SU(2)-type factors' rotation vectors with their couplings, stacked (colour first when
    N_f = 2): x [..., G] -> [..., F, 3], F = 1 or 2 (N_f <= 2)."""
    n = group.n_colors
    k = n * n - 1
    if n == 1:
        return (group.g_2 * x[..., :3]).unsqueeze(-2)
    return x[..., : k + 3].unflatten(-1, (2, 3)) * _factor_couplings(group, x.dtype, x.device)


@functools.lru_cache(maxsize=16)
def _factor_couplings(group: GaugeGroup, dtype: torch.dtype, device: torch.device) -> Tensor:
    """[[g_s], [g_2]]: the couplings of the two SU(2)-type factors, built once; read only."""
    return torch.tensor([[group.g_s], [group.g_2]], dtype=dtype, device=device)


@functools.lru_cache(maxsize=16)
def _group_exp_basis(group: GaugeGroup, dtype: torch.dtype, device: torch.device) -> Tensor:
    """realify(U_C (x) U_2 e^(-i phi)) is linear in each of the factors' unit quaternions q
    (U = q_0 I - i q . sigma, geometry.su2.su2_quaternion) and in (cos phi, sin phi): its
    coefficients on the products of their components, [4^F * 2, r * r] (F SU(2)-type factors,
    colour outer as in _assemble). Built once per group, dtype and device; read only."""
    sig = pauli(torch.float64)
    quaternion_basis = [torch.eye(2, dtype=sig.dtype)] + [-1j * sig[a] for a in range(3)]
    phase_basis = (1.0, -1j)  # e^(-i phi) = cos phi - i sin phi
    factors = 2 if group.n_colors == 2 else 1
    rows = []
    for combo in itertools.product(*[quaternion_basis] * factors):
        full = combo[0] if factors == 1 else torch.kron(combo[0], combo[1])
        rows += [realify(full * phase).flatten() for phase in phase_basis]
    return torch.stack(rows).to(device, dtype)


def group_exp(group: GaugeGroup, h: Tensor) -> Tensor:
    """exp(sum_g h_g T_g) in closed form (see GaugeGroup): h [..., G] -> [..., r, r] orthogonal.
    N_f <= 2: every factor is SU(2)-type, so the line is one product of its factors' unit
    quaternions and phase with a constant basis (real arithmetic, no complex tensors: a few
    dozen small ops where the complex assembly took ~80); N_f > 2 assembles the factors."""
    if group.n_colors > 2:
        return _assemble(*_factor_elements(group, h))
    return _quaternion_element(group, su2_quaternion(_factor_angles(group, h)), _phase(group, h))


def _phase(group: GaugeGroup, h: Tensor) -> Tensor:
    """The U(1) angle phi = g_1 Y h_1 / 2 of exp(sum_g h_g T_g) = ... e^(-i phi): [..., 1]."""
    return (0.5 * group.g_1 * group.hypercharge) * h[..., -1:]


def _quaternion_element(group: GaugeGroup, q: Tensor, phi: Tensor) -> Tensor:
    """realify(U_C (x) U_2 e^(-i phi)) from the factors' unit quaternions q [..., F, 4] and the
    phase phi [..., 1] (N_f <= 2): [..., r, r], linear in each (_group_exp_basis)."""
    coeff = torch.cat([torch.cos(phi), torch.sin(phi)], dim=-1)  # [..., 2]
    for f in range(q.shape[-2] - 1, -1, -1):  # products, first factor outermost
        coeff = (q[..., f, :, None] * coeff.unsqueeze(-2)).flatten(-2)
    r = group.dim
    return (coeff @ _group_exp_basis(group, q.dtype, q.device)).unflatten(-1, (r, r))


def group_exp_vjp(group: GaugeGroup, h: Tensor, e: Tensor) -> Tensor:
    """M(h)^T e, where U^-1 dU/dh_g = sum_g' M[g', g] T_g' for U = group_exp(group, h) and T_g
    the stacked generators (couplings folded in): M is block diagonal over the commuting
    factors, the SU(2)-type blocks the right Jacobians of geometry.su2.su2_exp_jacobian_vjp at
    (g_s h_C) and (g_2 h_2), 1 for U(1). So for a covector y, <y, dU/dh_g psi> summed as
    e_g' = <U^T y, T_g' psi> gives the gradient in h as M^T e. N_f <= 2 (closed form).
    h, e [..., G] -> [..., G]."""
    n = group.n_colors
    if n > 2:
        raise ValueError(f"group_exp_vjp has a closed form for N_f <= 2, got {n}")
    k = n * n - 1 + 3  # the SU(2)-type components, then U(1)
    blocks = su2_exp_jacobian_vjp(_factor_angles(group, h), e[..., :k].unflatten(-1, (-1, 3)))
    return torch.cat([blocks.flatten(-2), e[..., k:]], dim=-1)


@functools.lru_cache(maxsize=16)
def structure_constants(group: GaugeGroup, dtype: torch.dtype, device: torch.device) -> Tensor:
    """f [G, G, G] with [T_a, T_b] = sum_c f[a, b, c] T_c for the stacked generators (couplings
    folded in): block diagonal over the commuting factors, g eps_abc on an SU(2)-type block
    ([-i s_a / 2, -i s_b / 2] = eps_abc (-i s_c / 2)), g f_abc of SU(N_f) on the colour block,
    0 on U(1). Computed from the unit-coupling generators X (projection on the trace-orthogonal
    X_c), then scaled by each block's coupling (well defined at coupling 0); read only."""
    unit = dataclasses.replace(group, g_s=1.0, g_2=1.0, g_1=1.0)
    gens = unit.generators(torch.float64)  # [G, r, r]
    comm = gens.unsqueeze(1) @ gens.unsqueeze(0) - gens.unsqueeze(0) @ gens.unsqueeze(1)
    norms = torch.einsum("cij,cij->c", gens, gens)  # the Gram matrix is diagonal
    f = torch.einsum("abij,cij->abc", comm, gens) / norms
    f = torch.where(f.abs() < 1e-12, torch.zeros_like(f), f)
    n = group.n_colors
    couplings = [group.g_s] * (n * n - 1) + [group.g_2] * 3 + [group.g_1]
    return (f * torch.tensor(couplings, dtype=f.dtype)).to(device, dtype)


def bracket(group: GaugeGroup, u: Tensor, v: Tensor) -> Tensor:
    """Coefficients of [sum_a u_a T_a, sum_b v_b T_b] on the generators: u, v [..., G] ->
    [..., G] (on an SU(2)-type block, g (u x v); the U(1) component 0)."""
    f = structure_constants(group, u.dtype, u.device)
    n = f.shape[0]
    return (u.unsqueeze(-1) * v.unsqueeze(-2)).flatten(-2) @ f.reshape(n * n, n)


def _bracket_vjp(group: GaugeGroup, u: Tensor, v: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    """Gradients of <g, bracket(u, v)> in u and in v: [..., G] each."""
    f = structure_constants(group, u.dtype, u.device)
    n = f.shape[0]
    # d/du_a = sum_bc f[a, b, c] v_b g_c ; d/dv_b = sum_ac f[a, b, c] u_a g_c
    vg = (v.unsqueeze(-1) * g.unsqueeze(-2)).flatten(-2)  # [..., (b, c)]
    ug = (u.unsqueeze(-1) * g.unsqueeze(-2)).flatten(-2)  # [..., (a, c)]
    return vg @ f.reshape(n, n * n).T, ug @ f.transpose(0, 1).reshape(n, n * n).T


def wilson_line_in_group(
    group: GaugeGroup,
    coefficients: CoefficientFn,
    a: Tensor,
    b: Tensor,
    mode: WilsonMode = "path_ordered",
    segments: int = 8,
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
        prod_c = None if u_c is None else _ordered_product(u_c)
        return _assemble(prod_c, _ordered_product(u_2), phase.prod(dim=0))
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
    mode: WilsonMode = "path_ordered",
    segments: int = 8,
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
