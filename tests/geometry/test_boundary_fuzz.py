"""Boundary fuzz of every public function of geometry/: float32 points with |z| up to 1 - 1e-5
(docs/architecture.md, "Numerics"), tangent vectors from 1e-8 to 1e4 and exactly 0, through each
function; every output and every gradient (w.r.t. the inputs and the parameters a function
takes) must be finite, and a function that clamps to a max_norm must keep its documented
contract. Hypothesis draws the small cases here (derandomised: tests/conftest.py);
benchmarks/boundary_sweep.py runs the same table over 10^6 seeded inputs.

One row of CASES per function (or per mode of one): `fn(leaves)` calls it on the drawn inputs
and returns its outputs, each with the sample axis first; `covers` names the public functions
it drives; `test_every_public_function_has_a_row` fails when a function is added to a module's
__all__ without one. The rows, the draws and the evaluation are shared with
tests/world_model/test_attention_boundary_fuzz.py and the sweep.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

import geometry
from geometry import (
    doublet,
    gauge_transforms,
    group_exponential,
    langevin,
    lie_algebra,
    potentials,
    quantize,
    screening,
    sphere,
    su2,
    wilson_lines,
)
from geometry import poincare as P

F32 = torch.float32
D = 4  # ball dimension of the draws (also the size of a quaternion: su2's 4-vectors)
R_MAX = 1 - 1e-5  # the bound every geometry function supports (docs/architecture.md)
LOG_SIZE = (-8.0, 4.0)  # tangent vectors and positive scales: |v| = 10^t, t in this range
BATCH = 3  # samples per Hypothesis example (the sweep draws 10^4 per batch)


# =========================================================================== inputs


@dataclass
class Draw:
    """One batch of B samples, float32: points x, y, c [B, D] in the ball, their unit directions
    ux, uy [B, D] (those of x and y), tangent vectors v, w [B, D] (any size, 0 included) and
    positive scales s [B]."""

    x: Tensor
    y: Tensor
    c: Tensor
    ux: Tensor
    uy: Tensor
    v: Tensor
    w: Tensor
    s: Tensor

    @property
    def size(self) -> int:
        return self.x.shape[0]


POINT_FIELDS = ("x", "y", "c")


def make_draw(
    gaps: Tensor,
    directions: Tensor,
    log_sizes: Tensor,
    tangent_dirs: Tensor,
    zero: Tensor,
    align: Tensor,
) -> Draw:
    """A Draw from its float64 ingredients: gaps u [3, B] (|z| = 1 - 10^-u), directions
    [3, B, D] (x, y, c; not normalised), log_sizes t [3, B] (|v|, |w| = 10^t, s = 10^t),
    tangent_dirs [2, B, D], zero [2, B] bool (v or w exactly 0) and align [2, B] (y's and v's
    direction: 0 their own, 1 x's, 2 minus x's: nearby, equal and antipodal points, radial
    tangents). Built in float64, rounded once to float32."""
    unit = directions / directions.norm(dim=-1, keepdim=True)  # [3, B, D]
    t_unit = tangent_dirs / tangent_dirs.norm(dim=-1, keepdim=True)  # [2, B, D]
    sign = torch.tensor([0.0, 1.0, -1.0], dtype=unit.dtype)[align].unsqueeze(-1)  # [2, B, 1]
    unit[1] = torch.where(align[0, :, None] > 0, sign[0] * unit[0], unit[1])
    t_unit[0] = torch.where(align[1, :, None] > 0, sign[1] * unit[0], t_unit[0])
    radius = (1.0 - 10.0 ** (-gaps)).unsqueeze(-1)  # [3, B, 1]
    x, y, c = (radius * unit).to(F32)
    size = (10.0 ** log_sizes[:2]).unsqueeze(-1) * ~zero.unsqueeze(-1)  # [2, B, 1]
    v, w = (size * t_unit).to(F32)
    return Draw(x, y, c, unit[0].to(F32), unit[1].to(F32), v, w, (10.0 ** log_sizes[2]).to(F32))


def random_draw(n: int, generator: torch.Generator, max_gap: float = 5.0) -> Draw:
    """n seeded samples: u uniform in [0, max_gap] (|z| up to 1 - 10^-max_gap), log-sizes
    uniform in LOG_SIZE, Gaussian directions, of which y's and v's are x's for 10% of the
    samples and minus x's for 5%; 1% of the samples at each end of both ranges (|z| = 0 and
    1 - 10^-max_gap, |v| = 10^4) and 1% of the tangent vectors exactly 0."""

    def rand(*shape: int) -> Tensor:
        return torch.rand(*shape, generator=generator, dtype=torch.float64)

    gaps = max_gap * rand(3, n)
    lo, hi = LOG_SIZE
    log_sizes = lo + (hi - lo) * rand(3, n)
    edge = max(n // 100, 1)
    gaps[:, :edge], gaps[:, edge : 2 * edge] = 0.0, max_gap
    log_sizes[:, 2 * edge : 3 * edge] = hi
    zero = torch.zeros(2, n, dtype=torch.bool)
    zero[:, 3 * edge : 4 * edge] = True
    u = rand(2, n)
    align = (u < 0.1).long() + 2 * ((u >= 0.1) & (u < 0.15)).long()  # [2, n]
    directions = torch.randn(3, n, D, generator=generator, dtype=torch.float64)
    tangent_dirs = torch.randn(2, n, D, generator=generator, dtype=torch.float64)
    return make_draw(gaps, directions, log_sizes, tangent_dirs, zero, align)


@st.composite
def draws(draw, batch: int = BATCH, max_gap: float = 5.0) -> Draw:
    """Hypothesis' Draw of `batch` samples: gaps in [0, max_gap] (the ends included by
    Hypothesis' own boundary choices), log-sizes in LOG_SIZE, tangent vectors exactly 0 and
    aligned directions when drawn so; the directions themselves from a drawn seed (Gaussian)."""

    def many(strategy, rows: int) -> Tensor:
        values = draw(st.lists(strategy, min_size=rows * batch, max_size=rows * batch))
        return torch.tensor(values).view(rows, batch)

    gaps = many(st.floats(0.0, max_gap), 3).double()
    log_sizes = many(st.floats(*LOG_SIZE), 3).double()
    zero = many(st.booleans(), 2)
    align = many(st.sampled_from([0, 1, 2]), 2)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    directions = torch.randn(3, batch, D, generator=g, dtype=torch.float64)
    tangent_dirs = torch.randn(2, batch, D, generator=g, dtype=torch.float64)
    return make_draw(gaps, directions, log_sizes, tangent_dirs, zero, align)


class Leaves:
    """A Draw's tensors as autograd leaves, and the fixed (seeded) parameters and maps a case
    creates: every evaluation of a case sees the same parameters."""

    def __init__(self, draw: Draw):
        for f in fields(Draw):
            setattr(self, f.name, getattr(draw, f.name).detach().clone().requires_grad_(True))
        self.size = draw.size
        self.params: list[Tensor] = []
        self._generator = torch.Generator().manual_seed(0)
        self._lifts: dict[int, Tensor] = {}

    def leaves(self) -> dict[str, Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(Draw)}

    def randn(self, *shape: int) -> Tensor:
        return torch.randn(*shape, generator=self._generator, dtype=torch.float64).to(F32)

    def param(self, *shape: int, scale: float = 1.0) -> Tensor:
        """A seeded parameter leaf (its gradient is checked too)."""
        t = (scale * self.randn(*shape)).requires_grad_(True)
        self.params.append(t)
        return t

    def lift(self, t: Tensor, n: int) -> Tensor:
        """t [B, D] -> [B, n] by a fixed matrix with unit rows: keeps t's size (large, tiny or
        exactly 0) for inputs of another length (gauge coefficients, fields, features)."""
        if n not in self._lifts:
            m = self.randn(D, n)
            self._lifts[n] = m / m.norm(dim=-1, keepdim=True)
        return t @ self._lifts[n]


Outputs = Tensor | Sequence[Tensor]


@dataclass(frozen=True)
class Case:
    """One row: `fn(leaves)` -> outputs (each [B, ...], the sample axis first); `covers`: the
    public functions it drives ('module.name'); `contract(leaves, outputs)` -> [B] bool, the
    documented contract holds (e.g. |z'| <= max_norm); `allow_inf`: +inf is a documented value
    (never NaN or -inf)."""

    name: str
    fn: Callable[[Leaves], Outputs]
    covers: tuple[str, ...]
    contract: Callable[[Leaves, tuple[Tensor, ...]], Tensor] | None = None
    allow_inf: bool = False


class Flags(NamedTuple):
    """Per sample [B] bool: a non-finite output, a non-finite gradient, a broken contract; and
    the largest |z| among the points the case read."""

    values: Tensor
    grads: Tensor
    contract: Tensor
    max_norm: float


def _flatten(out) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    return [t for o in out for t in _flatten(o)]


def _real(t: Tensor) -> Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _per_sample(t: Tensor, n: int) -> Tensor:
    """[B, ...] bool -> [B]: any over the trailing dims."""
    return t.reshape(n, -1).any(-1) if t.numel() else torch.zeros(n, dtype=torch.bool)


def evaluate(case: Case, draw: Draw) -> Flags:
    """Run one case on one draw: flags per sample. Gradients are those of <outputs, seeded
    random cotangents> w.r.t. every leaf and every parameter the case registered
    (Leaves.params); a parameter's gradient is shared by the batch, so a non-finite one flags
    every sample."""
    leaves = Leaves(draw)
    outs = tuple(_flatten(case.fn(leaves)))
    n = leaves.size
    bad_values = torch.zeros(n, dtype=torch.bool)
    for o in outs:
        if o.dtype.is_floating_point or o.is_complex():
            r = _real(o).detach()
            bad = torch.isnan(r) | (r == -math.inf) if case.allow_inf else ~torch.isfinite(r)
            bad_values |= _per_sample(bad, n)
    bad_grads = torch.zeros(n, dtype=torch.bool)
    diff = [_real(o) for o in outs if o.requires_grad]
    named = leaves.leaves()
    targets = [*named.values(), *leaves.params]
    if diff:
        g = torch.Generator().manual_seed(1)
        cots = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in diff]
        grads = torch.autograd.grad(diff, targets, cots, allow_unused=True)
        for grad in grads[: len(named)]:
            if grad is not None:
                bad_grads |= _per_sample(~torch.isfinite(grad), n)
        if any(gr is not None and not torch.isfinite(gr).all() for gr in grads[len(named) :]):
            bad_grads[:] = True
        used = [name for name, gr in zip(named, grads, strict=False) if gr is not None]
    else:
        used = list(POINT_FIELDS)
    points = [named[p].detach() for p in POINT_FIELDS if p in used] or [named["x"].detach()]
    max_norm = max(float(p.norm(dim=-1).max()) for p in points)
    broken = torch.zeros(n, dtype=torch.bool)
    if case.contract is not None:
        broken = ~case.contract(leaves, outs)
    return Flags(bad_values, bad_grads, broken, max_norm)


def failures(case: Case, flags: Flags, draw: Draw) -> str:
    """The failing samples, for an assertion message."""
    bad = flags.values | flags.grads | flags.contract
    rows = bad.nonzero().flatten().tolist()
    norms = {p: getattr(draw, p).norm(dim=-1) for p in POINT_FIELDS}
    lines = [
        f"{case.name}: sample {i}: values {bool(flags.values[i])}, grads {bool(flags.grads[i])}, "
        f"contract {bool(flags.contract[i])}; |x| {norms['x'][i]:.8f} |y| {norms['y'][i]:.8f} "
        f"|c| {norms['c'][i]:.8f} |v| {draw.v[i].norm():.3g} |w| {draw.w[i].norm():.3g} "
        f"s {draw.s[i]:.3g}"
        for i in rows[:5]
    ]
    return "\n".join(lines)


# =========================================================================== the rows

GROUP = lie_algebra.GaugeGroup(n_colors=2, g_s=1.0, g_2=0.5, g_1=0.3)  # r = 8, G = 7
GROUP3 = lie_algebra.GaugeGroup(n_colors=3, g_s=1.0, g_2=0.5, g_1=0.3)  # the matrix-exp branch
N_COLORS, K_FIELD = 2, 16  # doublet layout: C^2 (x) C^2 (x) C^2, realified
SEGMENTS = 4
GENERIC_SEGMENTS = 2  # the matrix-exponential paths (node 67's): a few x the closed forms' cost
SIGMA = 1.0  # string tension of the screening rows that take a float


def norm_at_most(bound: float, which: int = 0):
    """Contract: |outputs[which]| <= bound (to float32 rounding), per sample."""

    def holds(_leaves: Leaves, outs: tuple[Tensor, ...]) -> Tensor:
        o = outs[which].detach()
        norms = o.norm(dim=-1).reshape(o.shape[0], -1)  # [B, ...]
        return norms.max(-1).values <= bound * (1 + 4 * torch.finfo(o.dtype).eps)

    return holds


def _two_by_two(t: Tensor) -> Tensor:
    """[..., 4] -> [..., 2, 2]."""
    return t.unflatten(-1, (2, 2))


def _connection(i: Leaves, group: lie_algebra.GaugeGroup = GROUP):
    gens = group.generators(F32)
    c0 = i.param(D, gens.shape[0], scale=0.5)
    c1 = i.param(D, D, gens.shape[0], scale=0.5)
    return wilson_lines.affine_connection(gens, c0, c1), c0, c1


def _coeffs(i: Leaves, group: lie_algebra.GaugeGroup = GROUP) -> tuple[Tensor, Tensor]:
    n = group.n_generators
    return i.param(D, n, scale=0.5), i.param(D, D, n, scale=0.5)


def _pieces(i: Leaves, mode: str) -> tuple[Tensor, Tensor, Tensor]:
    """(p, q, pieces [S, B, G]) of U_{x->0} for the affine connection."""
    c0, c1 = _coeffs(i)
    p, q = wilson_lines.affine_endpoint_coefficients(c0, c1, i.x)
    return p, q, wilson_lines.affine_segment_exponents(GROUP, p, q, mode, SEGMENTS)


def _field(i: Leaves):
    gens = GROUP.generators(F32)
    return gauge_transforms.random_gauge_field(
        gens, D, 2, generator=torch.Generator().manual_seed(3)
    )


def _projector(i: Leaves) -> Tensor:
    proj, _ = su2.chiral_projector(i.lift(i.v, 3))
    return proj


def _wells(i: Leaves):
    m = min(3, i.size)
    depths = torch.tensor([1.0, -0.5, 2.0][:m]).requires_grad_(True)
    widths = torch.tensor([0.1, 0.5, 2.0][:m]).requires_grad_(True)
    i.params += [depths, widths]
    return i.c[:m], depths, widths


def _patches(i: Leaves):
    """The memory's potential at x over entries (y, c, x) per sample, one of them the query
    itself, with the tangent draws as their forces and a learned-looking tension."""
    keys = torch.stack([i.y, i.c, i.x], dim=1)  # [B, 3, D]
    slopes = torch.stack([i.v, i.w, i.v - i.w], dim=1)  # [B, 3, D]
    tension = torch.tensor(0.3).requires_grad_(True)
    i.params.append(tension)
    mask = torch.ones(keys.shape[:2], dtype=torch.bool)
    return potentials.inverse_distance_patches(i.x, keys, slopes, mask, 1e-3, tension=tension)


def _boris(i: Leaves):
    """A pure-curl kick at x of the momentum v (any size), the 2-form built from the unit
    directions (F = 4 (ux uy^T - uy ux^T): a learned curl's F is bounded by its weights; the SPD
    solve squares |A|, geometry.langevin.boris_rotation), rotating p by O(1) near the origin."""
    ux, uy = i.ux, i.uy
    form = 4.0 * (ux.unsqueeze(-1) * uy.unsqueeze(-2) - uy.unsqueeze(-1) * ux.unsqueeze(-2))
    return langevin.boris_rotation(i.x, i.v, form, 0.5)


def _reach_contract(i: Leaves, outs: tuple[Tensor, ...]) -> Tensor:
    """proxy_geodesic_reach: a finite reach >= 0, or +inf (the ray leaves the ball first)."""
    r = outs[0].detach()
    return (r >= 0) | (r == math.inf)


def _codes_roundtrip(i: Leaves) -> tuple[Tensor, ...]:
    codes = torch.cat(
        [
            quantize.quantize_radius(i.x.detach().norm(dim=-1, keepdim=True), 6),
            quantize.quantize_direction(i.ux.detach(), 4, "zero", 1.0),
        ],
        dim=-1,
    )  # [B, 1 + D]
    widths = torch.tensor([6] + [4] * D)
    data = quantize.pack_bits(codes, widths)
    return codes, quantize.unpack_bits(data, widths, codes.shape[0])


def _roundtrip_contract(_i: Leaves, outs: tuple[Tensor, ...]) -> Tensor:
    return (outs[0] == outs[1]).all(-1)


def _lines_via_origin(i: Leaves) -> Tensor:
    conn = _connection(i)[0]
    u_x, u_y = (wilson_lines.wilson_line_to_origin(conn, z, "exp") for z in (i.x, i.y))
    return wilson_lines.compose_via_origin(u_x, u_y)


def _pair_products(i: Leaves) -> tuple[Tensor, Tensor]:
    """A shared bank (Bc = 1) and per-sample banks of two entries."""
    q, k = i.lift(i.v, 8), i.lift(i.w, 8)  # [B, 8]
    shared = doublet.pair_products(q[None], k[None, :3])[0]  # [B, 3]
    own = doublet.pair_products(q[:, None], torch.stack([k, q], 1))  # [B, 1, 2]
    return shared, own


def _pair_mixture(i: Leaves) -> Tensor:
    weights = torch.softmax(i.lift(i.v, 2), -1)[:, None]  # [B, 1, 2]
    return doublet.pair_mixture(weights, torch.stack([i.lift(i.w, 8), i.lift(i.v, 8)], 1))


def _weighted_area_grad(i: Leaves) -> tuple[Tensor, Tensor]:
    """A shared bank of three entries and per-sample banks of two."""
    shared = screening.weighted_string_area_grad(i.x, i.y[None, :3], i.lift(i.v, 3))
    own = screening.weighted_string_area_grad(i.x, torch.stack([i.y, i.c], 1), i.lift(i.w, 2))
    return shared, own


def _segment_vjp(i: Leaves) -> tuple[Tensor, Tensor]:
    p, q, _ = _pieces(i, "magnus4")
    grad = i.lift(i.w, 7).expand(SEGMENTS, -1, -1)  # [S, B, G]
    return wilson_lines.affine_segment_exponents_vjp(GROUP, p, q, "magnus4", SEGMENTS, grad)


def _segmented_line(i: Leaves) -> tuple[Tensor, Tensor]:
    line, prefixes = wilson_lines.segmented_group_line(GROUP, _pieces(i, "magnus4")[2])
    return line, prefixes.movedim(0, 1)


def _segmented_line_vjp(i: Leaves) -> Tensor:
    pieces = _pieces(i, "magnus4")[2]
    _, prefixes = wilson_lines.segmented_group_line(GROUP, pieces)
    return wilson_lines.segmented_group_line_vjp(GROUP, pieces, prefixes, i.lift(i.w, 7)).movedim(
        0, 1
    )


def _group_line(i: Leaves, mode: str, group: lie_algebra.GaugeGroup = GROUP) -> Tensor:
    """N_f = 3 takes the matrix-exponential factors (GENERIC_SEGMENTS pieces)."""
    coefficients = wilson_lines.affine_connection_coefficients(*_coeffs(i, group))
    segments = SEGMENTS if group.n_colors <= 2 else GENERIC_SEGMENTS
    return wilson_lines.wilson_line_in_group(group, coefficients, i.x, i.y, mode, segments)


def _chiral_gate(i: Leaves) -> Tensor:
    strength = i.param(1, scale=0.0) + 0.7
    return doublet.chiral_gate(i.lift(i.w, K_FIELD), _projector(i), N_COLORS, strength)


def _chiral_gate_vjp(i: Leaves) -> tuple[Tensor, Tensor]:
    out, a = i.lift(i.w, K_FIELD), i.lift(i.v, K_FIELD)
    return doublet.chiral_gate_vjp(out, _projector(i), N_COLORS, 0.7, a)


def _ou(i: Leaves) -> Tensor:
    c1, c2 = langevin.ou_coefficients(i.s[..., None], 0.1, 0.5)
    return langevin.ou_step(i.x, i.v, c1, c2, i.w)


def _baoab_step(i: Leaves, drift: str) -> tuple[Tensor, Tensor]:
    force = potentials.confining_force
    return langevin.baoab_step(i.x, i.v, force, 0.1, 0.5, 0.5, i.w, drift)


def _baoab_substeps(i: Leaves) -> tuple[Tensor, Tensor]:
    force, gen = potentials.confining_force, torch.Generator().manual_seed(2)
    return langevin.baoab_substeps(i.x, i.v, force, 0.1, 3, 0.5, 0.5, gen)


def _radius_codes(i: Leaves) -> Tensor:
    codes = quantize.quantize_radius(i.x.norm(dim=-1), 6)
    return quantize.dequantize_radius(codes, 6, F32)


def _direction_codes(i: Leaves, grid: str) -> Tensor:
    codes = quantize.quantize_direction(i.ux, 4, grid, 0.8)
    return quantize.dequantize_direction(codes, 4, grid, F32)


def _cases() -> list[Case]:
    def c(name, fn, *covers, contract=None, allow_inf=False):
        """A row; `covers` default to the row's name (poincare's functions unqualified)."""
        full = tuple(n if "." in n else f"poincare.{n}" for n in (covers or (name,)))
        return Case(name, fn, full, contract, allow_inf)

    poincare_rows = [
        c("sqnorm", lambda i: P.sqnorm(i.x)),
        c("one_minus_sqnorm", lambda i: P.one_minus_sqnorm(i.x)),
        c("conformal_factor", lambda i: P.conformal_factor(i.x)),
        c("metric_factor", lambda i: P.metric_factor(i.x)),
        c("inverse_metric_factor", lambda i: P.inverse_metric_factor(i.x)),
        c("metric_temperature", lambda i: P.metric_temperature(i.x, 16)),
        c("mobius_add", lambda i: P.mobius_add(i.x, i.y)),
        c("gyro_difference", lambda i: P.gyro_difference(i.x, i.y)),
        c("gyration", lambda i: P.gyration(i.x, i.y, i.v)),
        c("gyro_norm_dist", lambda i: P.gyro_norm_dist(i.x.norm(dim=-1))),
        c("dist", lambda i: P.dist(i.x, i.y)),
        c("dist(x, x)", lambda i: P.dist(i.x, i.x), "dist"),
        c("dist0", lambda i: P.dist0(i.x)),
        c("pairwise_dist", lambda i: P.pairwise_dist(i.x, i.y[:3])),
        c("expmap0", lambda i: P.expmap0(i.v), contract=norm_at_most(1.0)),
        c("logmap0", lambda i: P.logmap0(i.x)),
        c("logmap0_jacobian", lambda i: P.logmap0_jacobian(i.x)),
        c("logmap0_vjp", lambda i: P.logmap0_vjp(i.x, i.v)),
        c("expmap", lambda i: P.expmap(i.x, i.v)),
        c("logmap", lambda i: P.logmap(i.x, i.y)),
        c("logmap(x, x)", lambda i: P.logmap(i.x, i.x), "logmap"),
        c("project", lambda i: P.project(i.v, R_MAX), contract=norm_at_most(R_MAX)),
        c("parallel_transport", lambda i: P.parallel_transport(i.x, i.y, i.v)),
        c("christoffel_contract", lambda i: P.christoffel_contract(i.x, i.v)),
        c("kinetic_energy", lambda i: P.kinetic_energy(i.x, i.v)),
        c("kinetic_energy_grad", lambda i: P.kinetic_energy_grad(i.x, i.v)),
        c(
            "transported_velocity_error",
            lambda i: P.transported_velocity_error(i.x, i.v, i.y, i.w),
        ),
        c(
            "geodesic_drift",
            lambda i: P.geodesic_drift(i.x, i.v, 0.5, i.w, R_MAX),
            contract=norm_at_most(R_MAX),
        ),
        c("geodesic_flow", lambda i: P.geodesic_flow(i.x, i.v, 0.5)),
    ]
    sphere_rows = [
        c("sphere.normalize", lambda i: sphere.normalize(i.v)),
        c("sphere.dist", lambda i: sphere.dist(i.ux, i.uy)),
        c(
            "sphere.dist(u, +-u)",
            lambda i: (sphere.dist(i.ux, i.ux), sphere.dist(i.ux, -i.ux)),
            "sphere.dist",
        ),
        c("sphere.pairwise_dist", lambda i: sphere.pairwise_dist(i.ux, i.uy[:3])),
        c("sphere.ball_to_sphere_norm", lambda i: sphere.ball_to_sphere_norm(i.x)),
        c(
            "sphere.ball_to_sphere_stereographic",
            lambda i: sphere.ball_to_sphere_stereographic(i.x),
            contract=norm_at_most(1.0),
        ),
    ]
    su2_rows = [
        c("su2.su2_exp", lambda i: su2.su2_exp(i.lift(i.v, 3))),
        c("su2.su2_element", lambda i: su2.su2_element(i.lift(i.v, 3))),
        c("su2.su2_quaternion", lambda i: su2.su2_quaternion(i.lift(i.v, 3))),
        c(
            "su2.su2_exp_jacobian_vjp",
            lambda i: su2.su2_exp_jacobian_vjp(i.lift(i.v, 3), i.lift(i.w, 3)),
        ),
        c("su2.quaternion_product", lambda i: su2.quaternion_product(i.v, i.w)),
        c("su2.quaternion_adjoint", lambda i: su2.quaternion_adjoint(i.v)),
        c(
            "su2.adjoint_rotation",
            lambda i: su2.adjoint_rotation(su2.su2_exp(i.lift(i.v, 3))),
        ),
        c("su2.chiral_projector", lambda i: su2.chiral_projector(i.lift(i.v, 3))[0]),
        c(
            "su2.commitment_strength",
            lambda i: su2.commitment_strength(_two_by_two(i.lift(i.w, 4)), _projector(i)),
        ),
    ]
    gauge_rows = [
        c(
            "lie_algebra.realify",
            lambda i: lie_algebra.realify(_two_by_two(torch.complex(i.v, i.w))),
        ),
        c("wilson_lines.affine_connection", lambda i: _connection(i)[0](i.x, i.v)),
        c(
            "wilson_lines.integrated_connection",
            lambda i: wilson_lines.integrated_connection(_connection(i)[0], i.x, i.y),
        ),
        *(
            c(
                f"wilson_lines.wilson_line[{mode}]",
                lambda i, mode=mode: wilson_lines.wilson_line(
                    _connection(i)[0], i.x, i.y, mode, GENERIC_SEGMENTS
                ),
                "wilson_lines.wilson_line",
            )
            for mode in wilson_lines.WILSON_MODES
        ),
        c(
            "wilson_lines.compose_via_origin",
            _lines_via_origin,
            "wilson_lines.wilson_line_to_origin",
            "wilson_lines.compose_via_origin",
        ),
        c(
            "gauge_transforms.gauge_omega",
            lambda i: gauge_transforms.gauge_omega(_field(i), i.x),
            "gauge_transforms.random_gauge_field",
            "gauge_transforms.gauge_omega",
        ),
        c(
            "gauge_transforms.gauge_omega_derivative",
            lambda i: gauge_transforms.gauge_omega_derivative(_field(i), i.x, i.v),
        ),
        c(
            "gauge_transforms.gauge_transform_connection",
            lambda i: gauge_transforms.gauge_transform_connection(_connection(i)[0], _field(i))(
                i.x, i.v
            ),
        ),
        c(
            "wilson_lines.cell_centers",
            lambda i: wilson_lines.cell_centers(i.x, 3),
            contract=lambda i, o: (o[0].abs() <= 1).all(-1),
        ),
        c(
            "wilson_lines.hierarchical_wilson_line_to_origin",
            lambda i: wilson_lines.hierarchical_wilson_line_to_origin(
                _connection(i)[0], i.x, 2, GENERIC_SEGMENTS
            ),
        ),
        c(
            "wilson_lines.affine_connection_coefficients",
            lambda i: wilson_lines.affine_connection_coefficients(*_coeffs(i))(i.x, i.v),
        ),
        c("wilson_lines.affine_integral", lambda i: wilson_lines.affine_integral(*_coeffs(i), i.x)),
        *(
            c(
                f"wilson_lines.line_from_integral[{mode}]",
                lambda i, mode=mode: wilson_lines.line_from_integral(GROUP, i.lift(i.v, 7), mode),
                "wilson_lines.line_from_integral",
            )
            for mode in ("exp", "first_order")
        ),
        c(
            "group_exponential.group_exp",
            lambda i: group_exponential.group_exp(GROUP, i.lift(i.v, 7)),
        ),
        c(
            "group_exponential.group_exp[N_f=3]",
            lambda i: group_exponential.group_exp(GROUP3, i.lift(i.v, 12)),
            "group_exponential.group_exp",
        ),
        c(
            "group_exponential.group_exp_vjp",
            lambda i: group_exponential.group_exp_vjp(GROUP, i.lift(i.v, 7), i.lift(i.w, 7)),
        ),
        c(
            "lie_algebra.bracket",
            lambda i: lie_algebra.bracket(GROUP, i.lift(i.v, 7), i.lift(i.w, 7)),
        ),
        *(
            c(
                f"wilson_lines.wilson_line_in_group[{mode}]",
                lambda i, mode=mode: _group_line(i, mode),
                "wilson_lines.wilson_line_in_group",
            )
            for mode in wilson_lines.WILSON_MODES
        ),
        c(
            "wilson_lines.wilson_line_in_group[N_f=3]",
            lambda i: _group_line(i, "magnus4", GROUP3),
            "wilson_lines.wilson_line_in_group",
        ),
        *(
            c(
                f"wilson_lines.affine_wilson_line_to_origin[{mode}]",
                lambda i, mode=mode: wilson_lines.affine_wilson_line_to_origin(
                    GROUP, *_coeffs(i), i.x, mode, SEGMENTS
                ),
                "wilson_lines.affine_wilson_line_to_origin",
            )
            for mode in wilson_lines.WILSON_MODES
        ),
        c(
            "wilson_lines.affine_endpoint_coefficients",
            lambda i: wilson_lines.affine_endpoint_coefficients(*_coeffs(i), i.x),
        ),
        *(
            c(
                f"wilson_lines.affine_segment_exponents[{mode}]",
                lambda i, mode=mode: _pieces(i, mode)[2].movedim(0, 1),
                "wilson_lines.affine_segment_exponents",
            )
            for mode in ("exp", "path_ordered", "magnus4")
        ),
        c("wilson_lines.affine_segment_exponents_vjp", _segment_vjp),
        c("wilson_lines.segmented_group_line", _segmented_line),
        c("wilson_lines.segmented_group_line_vjp", _segmented_line_vjp),
    ]
    doublet_rows = [
        c("doublet.bilinear", lambda i: doublet.bilinear(i.param(5, D, D), i.x, i.v)),
        c(
            "doublet.low_rank_bilinear",
            lambda i: doublet.low_rank_bilinear(i.param(2, 5, D), i.param(2, 5, D), i.x, i.v),
        ),
        c(
            "doublet.apply_in_channels",
            lambda i: doublet.apply_in_channels(
                group_exponential.group_exp(GROUP, i.lift(i.v, 7)), i.lift(i.w, K_FIELD)
            ),
        ),
        c("doublet.pair_products", _pair_products),
        c("doublet.pair_mixture", _pair_mixture),
        c(
            "doublet.masked_softmax",
            lambda i: doublet.masked_softmax(i.lift(i.v, 5), i.lift(i.w, 5).detach() > 0),
        ),
        c(
            "doublet.doublet_to_realified",
            lambda i: doublet.doublet_to_realified(
                doublet.realified_to_doublet(i.lift(i.v, K_FIELD), N_COLORS)
            ),
            "doublet.realified_to_doublet",
            "doublet.doublet_to_realified",
        ),
        c(
            "doublet.chiral_operator",
            lambda i: doublet.chiral_operator(_projector(i), N_COLORS, K_FIELD, F32),
        ),
        c("doublet.chiral_gate", _chiral_gate),
        c("doublet.chiral_gate_vjp", _chiral_gate_vjp),
    ]
    screening_rows = [
        c("screening.string_area", lambda i: screening.string_area(i.x, i.y)),
        c(
            "screening.pairwise_string_area",
            lambda i: screening.pairwise_string_area(i.x, i.y[:3]),
        ),
        c("screening.weighted_string_area_grad", _weighted_area_grad),
        c("screening.geodesic_string_area", lambda i: screening.geodesic_string_area(i.x, i.y)),
        c(
            "screening.pairwise_geodesic_string_area",
            lambda i: screening.pairwise_geodesic_string_area(i.x, i.y[:3]),
        ),
        c(
            "screening.screening_factor",
            lambda i: screening.screening_factor(screening.string_area(i.x, i.y), i.s),
        ),
        c("screening.confinement_radius", lambda i: screening.confinement_radius(i.s)),
        c(
            "screening.proxy_euclidean_reach",
            lambda i: screening.proxy_euclidean_reach(i.x, SIGMA),
        ),
        c(
            "screening.proxy_geodesic_reach",
            lambda i: screening.proxy_geodesic_reach(i.x, i.s[..., None] * i.uy, SIGMA),
            contract=_reach_contract,
            allow_inf=True,
        ),
        c("screening.soft_mask_width", lambda i: screening.soft_mask_width(i.x, SIGMA)),
    ]
    potential_rows = [
        c("potentials.confining_potential", lambda i: potentials.confining_potential(i.x)),
        c("potentials.confining_force", lambda i: potentials.confining_force(i.x)),
        c("potentials.gaussian_wells", lambda i: potentials.gaussian_wells(i.x, *_wells(i))),
        c("potentials.inverse_distance_patches", _patches),
    ]
    langevin_rows = [
        c("langevin.ou_step", _ou, "langevin.ou_coefficients", "langevin.ou_step"),
        c("langevin.boris_rotation", _boris),
        *(
            c(
                f"langevin.drift_step[{drift}]",
                lambda i, drift=drift: langevin.drift_step(i.x, i.v, 0.5, drift),
                "langevin.drift_step",
            )
            for drift in ("geodesic", "none")
        ),
        *(
            c(
                f"langevin.baoab_step[{drift}]",
                lambda i, drift=drift: _baoab_step(i, drift),
                "langevin.baoab",
                "langevin.baoab_step",
                contract=norm_at_most(R_MAX),
            )
            for drift in ("geodesic", "kick", "none", "doubled")
        ),
        c(
            "langevin.baoab_substeps",
            _baoab_substeps,
            "langevin.baoab_rollout",
            "langevin.baoab_substeps",
            contract=norm_at_most(R_MAX),
        ),
        c(
            "langevin.hamiltonian",
            lambda i: langevin.hamiltonian(i.x, i.v, potentials.confining_potential),
        ),
    ]
    quantize_rows = [
        c(
            "quantize.radius",
            _radius_codes,
            "quantize.quantize_radius",
            "quantize.dequantize_radius",
            contract=lambda i, o: (o[0] > 0) & (o[0] < 1),
        ),
        *(
            c(
                f"quantize.direction[{grid}]",
                lambda i, grid=grid: _direction_codes(i, grid),
                "quantize.quantize_direction",
                "quantize.dequantize_direction",
                contract=norm_at_most(1.0),
            )
            for grid in quantize.DIRECTION_GRIDS
        ),
        c(
            "quantize.pack_bits",
            _codes_roundtrip,
            "quantize.pack_bits",
            "quantize.unpack_bits",
            contract=_roundtrip_contract,
        ),
        c(
            "quantize.reconstruction_bound",
            lambda i: quantize.reconstruction_bound(i.x, 4, 6, "zero", 0.8),
        ),
    ]
    return [
        *poincare_rows,
        *sphere_rows,
        *su2_rows,
        *gauge_rows,
        *doublet_rows,
        *screening_rows,
        *potential_rows,
        *langevin_rows,
        *quantize_rows,
    ]


CASES = _cases()

# public functions with no tensor input to fuzz (constants of a configuration)
NO_TENSOR_INPUT = {
    "lie_algebra.gell_mann",
    "lie_algebra.gauge_generators",
    "lie_algebra.structure_constants",
    "su2.complex_dtype_for",
    "su2.pauli",
    "quantize.direction_step",
    "quantize.seed_reconstruction_bound",
    "tables.constant_table",  # a decorator: takes a table builder, not a tensor
}


def public_functions() -> set[str]:
    """'module.name' for every function in a geometry module's __all__."""
    out = set()
    for module_name in geometry.__all__:
        module = getattr(geometry, module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or isinstance(obj, functools._lru_cache_wrapper):
                out.add(f"{module_name}.{name}")
    return out


# =========================================================================== tests


def test_every_public_function_has_a_row():
    covered = {name for case in CASES for name in case.covers}
    public = public_functions()
    assert covered <= public, covered - public  # a row names a real public function
    assert public - NO_TENSOR_INPUT <= covered, sorted(public - NO_TENSOR_INPUT - covered)
    assert len({case.name for case in CASES}) == len(CASES)


def test_the_draws_reach_the_bound_and_both_sizes():
    """The fuzz reaches what it claims: |z| = 1 - 1e-5 (and 0), |v| from 1e-8 to 1e4, and 0."""
    d = random_draw(1000, torch.Generator().manual_seed(0))
    norms = torch.stack([d.x, d.y, d.c]).norm(dim=-1)
    assert norms.max() >= R_MAX - 1e-6 and norms.max() < 1.0 and norms.min() == 0.0
    sizes = torch.stack([d.v, d.w]).norm(dim=-1)
    assert sizes.max() >= 0.99e4 and (sizes == 0).any() and sizes[sizes > 0].min() < 1e-7
    assert (d.s > 0).all()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@settings(max_examples=8, deadline=None)
@given(draw=draws())
def test_finite_values_and_gradients_up_to_the_boundary(case, draw):
    flags = evaluate(case, draw)
    assert not (flags.values | flags.grads | flags.contract).any(), failures(case, flags, draw)


NOT_PER_SAMPLE = {
    **dict.fromkeys(
        ["pairwise_dist", "sphere.pairwise_dist", "screening.pairwise_string_area",
         "screening.pairwise_geodesic_string_area"],
        "all pairs of the samples with three of them",
    ),
    **dict.fromkeys(
        ["potentials.gaussian_wells", "screening.weighted_string_area_grad",
         "potentials.inverse_distance_patches", "doublet.pair_products", "doublet.pair_mixture"],
        "banks or centres built from the samples (z [B, d] against banks [B or 1, C, d])",
    ),
    **dict.fromkeys(
        ["wilson_lines.affine_segment_exponents[exp]",
         "wilson_lines.affine_segment_exponents[path_ordered]",
         "wilson_lines.affine_segment_exponents[magnus4]",
         "wilson_lines.affine_segment_exponents_vjp", "wilson_lines.segmented_group_line",
         "wilson_lines.segmented_group_line_vjp"],
        "pieces [S, ..., G]: the sample axis second (test_wilson_lines runs a [2, 3] batch)",
    ),
    "quantize.pack_bits": "codes [n, m] by contract: one stream of rows",
}  # fmt: skip
"""Rows whose outputs are not one per sample of a [..., d] batch, and why."""


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.name not in NOT_PER_SAMPLE], ids=lambda case: case.name
)
def test_leading_dims_are_a_batch(case):
    """Each row on the draws shaped [2, 3, ...] gives, sample by sample, its outputs and the
    gradients of <outputs, cotangents> of the same draws as a batch [6, ...]: the functions
    documented for [..., d] reduce, concatenate and broadcast over their own trailing dims only
    (mutation testing found dim=1 written for dim=-1 invisible to [B, d] inputs)."""
    assert set(NOT_PER_SAMPLE) <= {c.name for c in CASES}
    draw = random_draw(6, torch.Generator().manual_seed(3), max_gap=2.0)
    shaped = Draw(**{f.name: getattr(draw, f.name).unflatten(0, (2, 3)) for f in fields(Draw)})
    results = []
    for d in (draw, shaped):
        leaves = Leaves(d)
        outs = _flatten(case.fn(leaves))
        diff = [_real(o) for o in outs if o.requires_grad]
        g = torch.Generator().manual_seed(1)
        cots = [torch.randn(o.numel(), generator=g, dtype=torch.float64) for o in diff]
        cots = [c.view(o.shape).to(o.dtype) for c, o in zip(cots, diff, strict=True)]
        targets = [*leaves.leaves().values(), *leaves.params]
        grads = torch.autograd.grad(diff, targets, cots, allow_unused=True) if diff else ()
        results.append(([o.detach() for o in outs], [g for g in grads if g is not None]))
    (flat, flat_grads), (batched, batched_grads) = results
    assert [o.shape[:2] for o in batched] == [(2, 3)] * len(batched)
    for want, got in zip(flat + flat_grads, batched + batched_grads, strict=True):
        got = _real(got).reshape(_real(want).shape)
        scale = float(_real(want).abs().nan_to_num(posinf=0.0).max()) if want.numel() else 0.0
        tol = 1e-5 * max(scale, 1.0) if want.is_floating_point() or want.is_complex() else 0
        torch.testing.assert_close(got, _real(want), rtol=1e-4, atol=tol, equal_nan=True)


# =========================================================================== what the fuzz found


def _sphere(n: int, radius: float, seed: int) -> Tensor:
    """n float64 points with |z| = radius, Gaussian directions: [n, D]."""
    u = torch.randn(n, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return radius * u / u.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("radius, bound", [(0.999, 1e-3), (1 - 1e-4, 1e-2), (1 - 1e-5, 5e-2)])
def test_float32_flow_and_transport_keep_the_metric_norm_near_the_boundary(radius, bound):
    """In float32 the geodesic flow conserves |p| / lambda (K = |p|^2 / (2 lambda^2)) and parallel
    transport preserves lambda |v|, for a step or a pair of nearby points near the boundary.
    gyr[y, -x]'s closed form cancels there (geometry/poincare.py, _gyr_to): before it was
    evaluated as gyr[y, (-x) (+) y] the errors were 0.12 at |z| = 0.999 and 4e8 at 1 - 1e-4,
    and Langevin steps from 1 - 1e-5 reached inf within two steps; now 7e-5, 8e-4, 7e-3."""
    n = 512
    z = _sphere(n, radius, 0).float()
    lam = P.conformal_factor(z.double())  # [n, 1]
    metric_size = 10 ** (-3 * torch.rand(n, 1, generator=torch.Generator().manual_seed(1)))
    p = (metric_size * _sphere(n, 1.0, 2) * lam).float()  # |p| / lambda in [1e-3, 1]
    z1, p1 = P.geodesic_flow(z, p, 0.5)

    def metric_norm(point: Tensor, covector: Tensor) -> Tensor:
        return covector.double().norm(dim=-1) / P.conformal_factor(point.double()).squeeze(-1)

    assert ((metric_norm(z1, p1) / metric_norm(z, p) - 1).abs() < bound).all()
    step = 1e-2 * _sphere(n, 1.0, 3) / lam  # metric length 1e-2
    y = P.project(P.expmap(z.double(), step), radius).float()
    v = _sphere(n, 1.0, 4).float()
    moved = P.conformal_factor(y.double()) * P.parallel_transport(z, y, v).double()
    assert ((moved.norm(dim=-1) / (lam * v.double()).norm(dim=-1) - 1).abs() < bound).all()


@pytest.mark.parametrize("radius, bound", [(0.999, 2e-3), (1 - 1e-4, 2e-2), (1 - 1e-5, 0.1)])
def test_float32_projected_drift_matches_float64_near_the_boundary(radius, bound):
    """geodesic_drift with a correction and the projection (the model's A step) against itself
    in float64 on the same float32 inputs: relative error of p' (before the fix: 0.11 at
    |z| = 0.999, 4e8 at 1 - 1e-4; now 1.5e-4, 1.4e-3, 1.7e-2 at 1 - 1e-5)."""
    n = 512
    z = _sphere(n, radius, 5).float()
    size = 10 ** (-3 * torch.rand(n, 1, generator=torch.Generator().manual_seed(6)))
    p = (size * _sphere(n, 1.0, 7) * P.conformal_factor(z.double())).float()
    w = (size * _sphere(n, 1.0, 8)).float()
    _, ref = P.geodesic_drift(z.double(), p.double(), 0.5, w.double(), radius)
    _, got = P.geodesic_drift(z, p, 0.5, w, radius)
    assert ((got.double() - ref).norm(dim=-1) / ref.norm(dim=-1)).max() < bound


def test_langevin_steps_from_the_boundary_stay_finite():
    """Fifty geodesic BAOAB steps from |z| = 1 - 1e-5 at rest, float32: finite and inside
    max_norm (before the drift's fix |p| reached inf after two)."""
    z = _sphere(64, R_MAX, 9).float()
    p = torch.zeros_like(z)
    gen = torch.Generator().manual_seed(10)
    z, p = langevin.baoab_substeps(z, p, potentials.confining_force, 0.1, 50, 0.5, 0.5, gen)
    assert torch.isfinite(z).all() and torch.isfinite(p).all()
    assert (z.norm(dim=-1) <= R_MAX * (1 + 4 * torch.finfo(F32).eps)).all()


E3 = torch.tensor([[0.3, -1.2, 0.7]], dtype=torch.float64)  # a fixed cotangent / vector
ORIGIN = [  # (name, f: [1, d] -> [1, k], d, differentiated twice by the model)
    ("logmap0", P.logmap0, D, True),
    ("logmap0_jacobian", lambda y: torch.cat(P.logmap0_jacobian(y), -1), D, True),
    ("logmap0_vjp", lambda y: P.logmap0_vjp(y, E3.repeat(1, 2)[:, :D].to(y.dtype)), D, False),
    ("su2_quaternion", su2.su2_quaternion, 3, True),
    ("su2_exp", lambda t: torch.view_as_real(su2.su2_exp(t)).flatten(-3), 3, True),
    ("su2_exp_jacobian_vjp", lambda t: su2.su2_exp_jacobian_vjp(t, E3.to(t.dtype)), 3, False),
]


@pytest.mark.parametrize("name, fn, d, twice", ORIGIN, ids=[o[0] for o in ORIGIN])
def test_derivatives_at_the_origin_are_finite_and_right(name, fn, d, twice):
    """At exactly 0, the first derivative (and the second, for what the model differentiates
    twice: a kick taken by autograd) equals central differences, in float64, and is finite in
    float32. Through |x| they were NaN at 0 (0 * inf): logmap0_jacobian's and
    su2_exp_jacobian_vjp's first derivatives, the second derivatives of logmap0 and
    su2_quaternion."""
    g = torch.Generator().manual_seed(11)
    c = torch.randn(1, fn(torch.zeros(1, d, dtype=torch.float64)).shape[-1], generator=g)
    u = torch.randn(1, d, generator=g, dtype=torch.float64)
    c = c.double()

    def grad(x: Tensor, create_graph: bool = False) -> Tensor:
        """d<c, fn(x)>/dx; x a leaf that requires grad for a second derivative."""
        x = x if x.requires_grad else x.clone().requires_grad_(True)
        (out,) = torch.autograd.grad((c.to(x.dtype) * fn(x)).sum(), x, create_graph=create_graph)
        return out

    h = 1e-5
    zero = torch.zeros(1, d, dtype=torch.float64)
    fd = ((c * fn(h * u)).sum() - (c * fn(-h * u)).sum()) / (2 * h)
    torch.testing.assert_close((grad(zero) * u).sum(), fd, rtol=1e-6, atol=1e-9)
    assert torch.isfinite(grad(zero.float())).all()
    if twice:
        x = zero.clone().requires_grad_(True)
        (hvp,) = torch.autograd.grad((grad(x, create_graph=True) * u).sum(), x)
        fd2 = (grad(h * u) - grad(-h * u)) / (2 * h)
        torch.testing.assert_close(hvp, fd2, rtol=1e-5, atol=1e-8)
        xf = zero.float().requires_grad_(True)
        (hvp32,) = torch.autograd.grad((grad(xf, create_graph=True) * u.float()).sum(), xf)
        assert torch.isfinite(hvp32).all()


def test_normalize_of_zero_is_zero_with_zero_derivatives():
    """sphere.normalize(0) = 0 and its first and second derivatives there are 0 (they were
    1 / MIN_NORM = 1e15 and NaN: the KRR kernel's normalised queries, differentiated twice by
    an autograd kick, made the model's parameter gradients NaN at z = 0)."""
    x = torch.zeros(2, D)
    x[1, 0] = 2.0  # a zero row beside a nonzero one: each row is judged on its own
    x.requires_grad_(True)
    out = sphere.normalize(x)[:1]
    (g,) = torch.autograd.grad((out * torch.arange(D)).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.square().sum() + g.sum(), x, allow_unused=True)
    assert (out == 0).all() and (g == 0).all() and (h is None or (h == 0).all())
    y = torch.tensor([[3.0, 4.0, 0.0, 0.0]])
    torch.testing.assert_close(sphere.normalize(y), y / 5)
