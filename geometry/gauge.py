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

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from .su2 import complex_dtype_for, pauli, su2_exp, su2_exp_jacobian_vjp, su2_quaternion

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
]

CoefficientFn = Callable[[Tensor, Tensor], Tensor]  # (x, dx) [..., d] -> coefficients [..., G]

ConnectionFn = Callable[[Tensor, Tensor], Tensor]
WilsonMode = Literal["first_order", "exp", "path_ordered"]


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


@dataclass(frozen=True)
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


def _ordered_product(pieces: Tensor) -> Tensor:
    """pieces[S-1] @ ... @ pieces[0]: later pieces on the left. [S, ..., n, n] -> [..., n, n]."""
    u = pieces[0]
    for s in range(1, pieces.shape[0]):
        u = pieces[s] @ u
    return u


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
    a, b [..., d] -> [..., k, k].
    """
    if mode == "first_order" or mode == "exp":
        h = integrated_connection(conn, a, b)
        if mode == "exp":
            return torch.linalg.matrix_exp(h)
        return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h
    if mode != "path_ordered":
        raise ValueError(f"unknown Wilson-line mode {mode!r}")
    return _ordered_product(torch.linalg.matrix_exp(_segment_increments(conn, a, b, segments)))


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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    q = su2_quaternion(_factor_angles(group, h))  # [..., F, 4]
    phi = (0.5 * group.g_1 * group.hypercharge) * h[..., -1:]  # [..., 1]
    coeff = torch.cat([torch.cos(phi), torch.sin(phi)], dim=-1)  # [..., 2]
    for f in range(q.shape[-2] - 1, -1, -1):  # products, first factor outermost
        coeff = (q[..., f, :, None] * coeff.unsqueeze(-2)).flatten(-2)
    r = group.dim
    return (coeff @ _group_exp_basis(group, h.dtype, h.device)).unflatten(-1, (r, r))


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


def wilson_line_in_group(
    group: GaugeGroup,
    coefficients: CoefficientFn,
    a: Tensor,
    b: Tensor,
    mode: WilsonMode = "path_ordered",
    segments: int = 8,
) -> Tensor:
    """The Wilson line U(b <- a) of :func:`wilson_line`, for a connection given by its
    coefficients on `group`'s generators, with every exponential in closed form (GaugeGroup).
    Same modes, same quadrature (Gauss-Legendre for the integrated connection, midpoints for the
    path-ordered pieces), same result. a, b [..., d] -> [..., r, r]."""
    if mode == "first_order" or mode == "exp":
        return line_from_integral(group, _path_integral(coefficients, a, b, 3), mode)
    if mode != "path_ordered":
        raise ValueError(f"unknown Wilson-line mode {mode!r}")
    u_c, u_2, phase = _factor_elements(group, _segment_increments(coefficients, a, b, segments))
    # ordered products per factor; the abelian phases just multiply
    prod_c = None if u_c is None else _ordered_product(u_c)
    return _assemble(prod_c, _ordered_product(u_2), phase.prod(dim=0))


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


def affine_integral(c0: Tensor, c1: Tensor, z: Tensor) -> Tensor:
    """The affine connection (c0 [d, G], c1 [d, d, G]) integrated along x(t) = (1 - t) z, exact:
    h_g = sum_mu c0[mu, g] z^mu + 1/2 sum_{mu nu} c1[mu, nu, g] z^mu z^nu. z [..., d] -> [..., G]
    (as matrix products: a three-operand einsum costs several times more at small sizes)."""
    d, n_gen = c0.shape
    zz = (z.unsqueeze(-1) * z.unsqueeze(-2)).flatten(-2)  # [..., d^2]
    return z @ c0 + 0.5 * zz @ c1.reshape(d * d, n_gen)


def affine_wilson_line_to_origin(
    group: GaugeGroup,
    c0: Tensor,
    c1: Tensor,
    z: Tensor,
    mode: WilsonMode = "path_ordered",
    segments: int = 8,
) -> Tensor:
    """U_{z->0} for the affine connection (c0, c1) on `group` (the covariant head's case).
    Along x(t) = (1 - t) z the integrated coefficients are exact in closed form
    (:func:`affine_integral`), so first order and exp need no quadrature; path-ordered lines are
    :func:`wilson_line_in_group`'s. z [..., d] -> [..., r, r]."""
    if mode == "path_ordered":
        return wilson_line_in_group(
            group, affine_connection_coefficients(c0, c1), z, torch.zeros_like(z), mode, segments
        )
    return line_from_integral(group, affine_integral(c0, c1, z), mode)
