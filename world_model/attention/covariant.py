"""One covariant cross-attention head (seed 003 Defs 280-286, 291; Thms 98, 99, 101, 102).

For a query at z in the Poincare ball and context entries at z':

    psi_Q(z)  = W_Q x + W_Qz z + W_Qv x_v + W_QGamma(z, z) [+ W_Qzv(z, v)]   Def 283 / 291
    psi_K(z') = W_K x_K(z'),   psi_V(z') = W_V x_V(z')                        fields, local frame
    Q~ = U_{z->0} psi_Q,  K~ = U_{z'->0} psi_K,  V~ = U_{z'->0} psi_V         Def 282 (Wilson lines)
    s(z, z')  = <Q~, K~>                                                      Thm 98 (real rep.)
    l(z, z')  = s / tau(z),   tau(z) = sqrt(d_k) / lambda(z)                  Thm 99
    alpha     = softmax_z'( l - sigma(level(z)) A(z, z') [z' colour-charged] )  Def 286
    out       = W_O chiral( sum_z' alpha V~ )                                 Defs 284-285

- Representation: R^{d_k} is the realification of C^{N_f} (x) C^2 (x) C^m and the gauge group
  acts on C^{N_f} (x) C^2 only, so every line is U (x) I_m with U acting on R^r, r = 4 N_f
  (geometry.gauge.gauge_generators(r, N_f)). The head computes the lines in that minimal
  representation and applies them channel by channel (:func:`apply_in_channels`): the same
  transport as the d_k x d_k lines, with matrix exponentials (d_k / r)^3 times cheaper.
- Wilson lines: one U_{z->0} per context entry (in :meth:`CovariantAttention.prepare`, reused for
  keys and values and cached across queries) and one per query; never one per (query, key) pair:
  <U_z psi, U_z' phi> = psi^T U_z^T U_z' phi is the pairwise transport composed via the origin.
- Screening is applied as the log-space identity
  alpha S / sum(alpha S) = softmax(l - sigma A) for S = exp(-sigma A): the same weights as Def 286's
  multiply-then-renormalise, without underflow when every entry is screened hard.
- Chirality: the output is read as a doublet over the C^2 slot of that same layout, projected
  with Pi = (I + n.sigma)/2 (complex Pauli matrices, geometry.su2), n = P grad V, gated by the
  normalised commitment c^ = Psi^dag Pi Psi / |Psi|^2, and mixed in with strength kappa:
  Psi + kappa (c^ Pi Psi - Psi).

The degenerate limit (all couplings 0, temperature "constant", W_Qz = W_QGamma = 0, sigma = 0,
kappa = 0) is standard attention W_O softmax(QK^T / sqrt(d_k)) V through this same code path.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

import torch
from torch import Tensor, nn

from geometry import gauge, poincare, screening, su2

from . import ida, krr
from .context import MACRO_LEVEL, ContextBank
from .krr_solver import cholesky_spd_solve

__all__ = [
    "ChristoffelMode",
    "TemperatureMode",
    "AreaProxy",
    "FieldMap",
    "bilinear",
    "low_rank_bilinear",
    "apply_in_channels",
    "masked_softmax",
    "realified_to_doublet",
    "doublet_to_realified",
    "chiral_operator",
    "chiral_gate",
    "chiral_gate_vjp",
    "pair_products",
    "pair_mixture",
    "CovariantAttentionConfig",
    "CovariantQueries",
    "PreparedContext",
    "AttentionRecord",
    "CovariantAttention",
]

ChristoffelMode = Literal["full", "factorized", "poincare"]
AttentionKernel = Literal["softmax", "inverse_distance", "krr"]
TemperatureMode = Literal["metric", "calibrated", "constant"]
AreaProxy = Literal["conformal", "geodesic"]
FieldMap = Callable[[Tensor, Tensor], Tensor]  # (positions [..., d], fields [..., k]) -> [..., k]

_WILSON_MODES = ("first_order", "exp", "path_ordered")
_CHRISTOFFEL_MODES = ("full", "factorized", "poincare")
_TEMPERATURE_MODES = ("metric", "calibrated", "constant")
_AREA_PROXIES = ("conformal", "geodesic")
_KERNELS = ("softmax", "inverse_distance", "krr")


# =========================================================================== pure functions


def bilinear(weight: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """W(a, b)^c = sum_ij W^{c, ij} a^i b^j  (seed 003 Def 283's bilinear contraction).
    weight [k, d, e], a [..., d], b [..., e] -> [..., k]."""
    return torch.einsum("cij,...i,...j->...c", weight, a, b)


def low_rank_bilinear(u: Tensor, v: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """sum_r (U_r a)_c (V_r b)_c  (seed 003 Def 291, factorized quadratic query), O(R k d).
    u, v [R, k, d], a, b [..., d] -> [..., k]."""
    r, k, _ = u.shape
    ua = (a @ u.reshape(r * k, -1).T).unflatten(-1, (r, k))  # [..., R, k]
    vb = (b @ v.reshape(r * k, -1).T).unflatten(-1, (r, k))  # [..., R, k]
    return (ua * vb).sum(-2)


def apply_in_channels(u: Tensor, psi: Tensor) -> Tensor:
    """(U (x) I_m) psi: a gauge-group element U [..., r, r] given in the minimal representation
    R^r = realified C^{N_f} (x) C^2, acting on psi [..., d_k] in the realification of
    C^{N_f} (x) C^2 (x) C^m (d_k = r m, geometry.gauge's layout). In that layout
    psi.reshape(..., r, m) has one realified copy of C^{N_f} (x) C^2 per column, so the action is
    one [r, r] x [r, m] product. Returns [..., d_k]."""
    r = u.shape[-1]
    cols = psi.reshape(*psi.shape[:-1], r, psi.shape[-1] // r)  # [..., r, m]
    return (u @ cols).reshape(psi.shape)


def _broadcast_products(needs_grad: bool) -> bool:
    """Per-batch banks: whether to contract by a broadcast product and sum instead of a batched
    matrix product. A batched product with a unit dimension is fast forward but its backward
    runs as more such products, ~2-3x slower on CPU than the broadcast form's (measured at
    [128, 68, 16] banks); without a backward pass the batched product wins."""
    return needs_grad and torch.is_grad_enabled()


def pair_products(q: Tensor, bank: Tensor) -> Tensor:
    """<q_bi, bank_bj> for every query and entry: q [B, Q, k], bank [Bc, N, k] (Bc = 1: shared)
    -> [B, Q, N]."""
    if bank.shape[0] == 1:
        return q @ bank[0].mT
    if q.shape[1] == 1 and _broadcast_products(q.requires_grad or bank.requires_grad):
        return (q * bank).sum(-1).unsqueeze(1)
    return q @ bank.mT


def pair_mixture(w: Tensor, bank: Tensor) -> Tensor:
    """sum_j w_bij bank_bj: w [B, Q, N], bank [Bc, N, k] (Bc = 1: shared) -> [B, Q, k]."""
    if bank.shape[0] == 1:
        return w @ bank[0]
    if w.shape[1] == 1 and _broadcast_products(w.requires_grad or bank.requires_grad):
        return (w.mT * bank).sum(-2, keepdim=True)
    return w @ bank


def masked_softmax(logits: Tensor, mask: Tensor | None) -> Tensor:
    """softmax over the last dim restricted to `mask` (True = allowed, broadcastable); a row with
    no allowed entry gives weights 0, never NaN (world_model/attention/base.py). [..., N]."""
    if mask is None:
        return torch.softmax(logits, dim=-1)
    filled = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return torch.softmax(filled, dim=-1) * mask


def realified_to_doublet(x: Tensor, n_colors: int) -> Tensor:
    """x [..., k] = (Re psi, Im psi) with psi in C^{N_f} (x) C^2 (x) C^m (geometry.gauge's layout)
    -> psi [..., N_f, 2, m] complex; the SU(2)_L generators act on the middle (doublet) axis."""
    half = x.shape[-1] // 2
    psi = torch.complex(x[..., :half], x[..., half:])
    return psi.reshape(*x.shape[:-1], n_colors, 2, -1)


def doublet_to_realified(psi: Tensor) -> Tensor:
    """Inverse of :func:`realified_to_doublet`: [..., N_f, 2, m] complex -> [..., k] real."""
    flat = psi.reshape(*psi.shape[:-3], -1)
    return torch.cat([flat.real, flat.imag], dim=-1)


@functools.lru_cache(maxsize=32)
def _doublet_layout(
    n_colors: int, k: int, dtype: torch.dtype, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Where the real doublets sit in the flat layout x [..., k] = (Re psi, Im psi), psi in
    C^{N_f} (x) C^2 (x) C^m: per (colour c, channel j) the 4-vector v = (Re u1, Re u2, Im u1,
    Im u2) of its doublet u. Returns (basis [8, k * k], groups [k, N_f m]): a 2 x 2 complex Pi
    acting on every doublet is the flat real k x k operator view_as_real(Pi).flatten() @ basis
    (its realification [[Re Pi, -Im Pi], [Im Pi, Re Pi]] placed on each doublet is linear in
    (Re Pi, Im Pi)), and x^2 @ groups sums each doublet's |v|^2. Built once per (N_f, k,
    dtype, device); read only."""
    m = k // (4 * n_colors)
    c, a, j = torch.meshgrid(
        torch.arange(n_colors), torch.arange(4), torch.arange(m), indexing="ij"
    )  # [N_f, 4, m] each
    flat = (a >= 2) * (k // 2) + c * 2 * m + (a % 2) * m + j  # index of v_a of (c, j) in x
    basis = torch.zeros(2, 2, 2, k, k, dtype=torch.float64)  # (row, column, re / im) of Pi
    for row, col, part in itertools.product(range(2), range(2), range(2)):
        unit = torch.zeros(2, 2, dtype=torch.complex128)
        unit[row, col] = 1j if part else 1.0
        real4 = gauge.realify(unit)  # [4, 4] on (Re u1, Re u2, Im u1, Im u2)
        for r4, c4 in itertools.product(range(4), range(4)):
            basis[row, col, part, flat[:, r4], flat[:, c4]] = real4[r4, c4]
    groups = torch.zeros(k, n_colors * m, dtype=torch.float64)
    groups[flat.permute(1, 0, 2).reshape(4, -1), torch.arange(n_colors * m)] = 1.0
    return basis.reshape(8, k * k).to(device, dtype), groups.to(device, dtype)


def chiral_operator(proj: Tensor, n_colors: int, k: int, dtype: torch.dtype) -> Tensor:
    """Pi acting on every doublet of the flat layout, as one real matrix: proj [..., 2, 2]
    complex -> [..., k, k] (the realification [[Re Pi, -Im Pi], [Im Pi, Re Pi]] placed on each
    (colour, channel) doublet; symmetric, idempotent; 0 for a degenerate Pi)."""
    basis, _ = _doublet_layout(n_colors, k, dtype, proj.device)
    parts = torch.view_as_real(proj).flatten(-3).to(dtype)  # [..., 8]
    return (parts @ basis).unflatten(-1, (k, k))


def _apply_operator(op: Tensor, x: Tensor) -> Tensor:
    """op x for op [..., k, k] broadcastable to x [..., k] (one shared operator: one product;
    per-sample operators while training: a broadcast product, see _broadcast_products)."""
    if op.shape[:-2].numel() == 1:
        return x @ op.reshape(op.shape[-2:]).mT
    if _broadcast_products(op.requires_grad or x.requires_grad):
        return (op * x.unsqueeze(-2)).sum(-1)
    return (op @ x.unsqueeze(-1)).squeeze(-1)


def chiral_gate(
    out: Tensor,
    proj: Tensor,
    n_colors: int,
    strength: Tensor | float,
    operator: Tensor | None = None,
) -> Tensor:
    """Psi -> Psi + kappa (c^ Pi Psi - Psi) on the doublet slot  (seed 003 Defs 284-285).

    c^ = Psi^dag Pi Psi / |Psi|^2 per (colour, channel) is the commitment strength of Def 285
    (gauge invariant by Thm 101) normalised to [0, 1]. kappa = 0 is the identity; kappa = 1
    replaces the doublet by its gated committed part; a degenerate direction (Pi = 0,
    geometry.su2) gives (1 - kappa) Psi: no commitment where the value gradient is flat.
    Computed in real arithmetic on the flat layout: Pi as one real k x k operator P
    (:func:`chiral_operator`), so c^ = v^T P v / |v|^2 per doublet v (complex tensors, and
    doublet reshapes, cost several times the ops on CPU; the tests compare with the complex
    form). out [..., k] real, proj [..., 2, 2] complex -> [..., k] real; `operator`: proj's flat
    operator when already built (a rollout builds it once).
    """
    _, pv, _, gate = _gate_terms(out, proj, n_colors, operator)
    return out + strength * (gate * pv - out)


def _gate_terms(
    out: Tensor, proj: Tensor, n_colors: int, operator: Tensor | None = None
) -> tuple[Tensor, ...]:
    """The chiral gate's pieces on the flat layout: the operator P [..., k, k], P out, the
    per-doublet |v|^2 + eps [..., N_f m] and the commitment g = v^T P v / (|v|^2 + eps) spread
    back over each doublet's entries [..., k], in [0, 1]."""
    k = out.shape[-1]
    op = chiral_operator(proj, n_colors, k, out.dtype) if operator is None else operator
    _, groups = _doublet_layout(n_colors, k, out.dtype, out.device)
    pv = _apply_operator(op, out)
    norm2 = out.square() @ groups + torch.finfo(out.dtype).eps
    return op, pv, norm2, ((out * pv) @ groups / norm2) @ groups.T


def chiral_gate_vjp(
    out: Tensor,
    proj: Tensor,
    n_colors: int,
    strength: Tensor | float,
    a: Tensor,
    operator: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """<a, chiral_gate(out)> and its gradient in `out`, in closed form and real arithmetic.

    Per (colour, channel) the doublet u in C^2 is the real 4-vector v = (Re u, Im u) and
    Pi acts as its realification P (symmetric, P^2 = P; 0 when degenerate). With
    g = v^T P v / (|v|^2 + eps) the gate is v -> (1 - k) v + k g P v, so
    <a, gate(v)> = (1 - k) a.v + k g a^T P v and
    grad_v = (1 - k) a + k (g P a + 2 (a^T P v) (P v - g v) / (|v|^2 + eps)).
    out [B, k], proj [Bp, 2, 2] complex (Bp = 1 or B), a [k] or [B, k] ->
    ([B, 1], [B, k]); `operator` as in :func:`chiral_gate`. Checked against autograd through
    the complex form of the gate."""
    op, pv, norm2, gate = _gate_terms(out, proj, n_colors, operator)
    _, groups = _doublet_layout(n_colors, out.shape[-1], out.dtype, out.device)
    pa = _apply_operator(op, a)
    a_pv = a * pv  # [B, k]: summed per doublet below
    value = (1 - strength) * (a * out) + strength * gate * a_pv
    scaled = ((a_pv @ groups) / norm2) @ groups.T  # (a^T P v) / (|v|^2 + eps), per entry
    grad = (1 - strength) * a + strength * (gate * pa + 2 * scaled * (pv - gate * out))
    return value.sum(-1, keepdim=True), grad


# =========================================================================== configuration


@dataclass
class CovariantAttentionConfig:
    """One covariant attention head. Dimensions:

    d: ball dimension of positions; d_query / d_key / d_value: feature sizes of the query and
    of the bank's key / value features; d_out: output size; d_k: size of the gauge fields
    Q, K, V (R^{d_k} = realification of C^{n_colors} (x) C^2 (x) C^m, so d_k % (4 n_colors) == 0).
    """

    d: int
    d_query: int
    d_key: int
    d_value: int
    d_out: int
    d_k: int = 32
    n_colors: int = 2
    g_s: float = 1.0  # SU(N_f)_C coupling (Def 279)
    g_2: float = 0.5  # SU(2)_L coupling
    g_1: float = 0.3  # U(1)_Y coupling
    hypercharge: float = 1.0
    connection_init_std: float = 0.1  # std of the learned connection coefficients c0, c1
    wilson: gauge.WilsonMode = "path_ordered"
    segments: int = 32  # path-ordered pieces (error O(segments^-2); node 67 < 1e-3 needs ~32)
    temperature: TemperatureMode = "metric"  # metric: tau = sqrt(d_k)/lambda (Thm 99)
    christoffel: ChristoffelMode = "poincare"  # quadratic query term (Def 283 / 291 / Prop 99)
    rank: int = 3  # R of the factorized quadratic terms (Def 291)
    d_velocity_features: int = 0  # F of the velocity features x_v (0: no W_Qv term)
    position_velocity: bool = False  # the optional W_Qzv(z, v) term
    query_velocity: bool = True  # queries carry a velocity v (Gamma(z)[v, v] term of 'poincare')
    # how the transported fields become weights (all with the (out, weights) call shape):
    # softmax(<Q~, K~> / tau(z)) (seed 003), inverse distance (d_H(z, z')^2 + eps)^-1 (seed 000
    # HIDA, on the positions), or kernel ridge regression K_qk (K_kk + lam I)^-1 (seed 001)
    kernel: AttentionKernel = "softmax"
    ida_eps: float = 0.01  # eps of the inverse-distance kernel
    krr_kernel: str = "exp"  # exp, rbf, linear or cosine (seed 001 §1) on Q~, K~
    krr_lambda: float = 1.0  # initial ridge lam = softplus(raw) + 1e-4
    n_levels: int = 2  # L + 1 hierarchy levels: 0 = macro ... L = texture
    string_tension: tuple[float, ...] = (1.0, 0.01)  # initial sigma(l), l = 0 .. L (Prop 100)
    area: AreaProxy = "conformal"  # conformal: Def 286's lambda(z)^2|z-z'|^2/2; geodesic: d_G^2/2
    query_level: int = 0  # default level of this head's queries (kick heads 0, drift heads L)
    chirality: float = 1.0  # initial kappa (0: the chiral gate is the identity)

    def __post_init__(self) -> None:
        for name in ("d", "d_query", "d_key", "d_value", "d_out", "d_k", "n_colors", "segments"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"CovariantAttentionConfig.{name} must be an int >= 1, got {value}"
                )
        if self.d_k % (4 * self.n_colors):
            raise ValueError(
                f"CovariantAttentionConfig.d_k = {self.d_k} must be a multiple of "
                f"4 * n_colors = {4 * self.n_colors} (C^n_colors (x) C^2 (x) C^m, realified)"
            )
        if self.wilson not in _WILSON_MODES:
            raise ValueError(f"CovariantAttentionConfig.wilson must be one of {_WILSON_MODES}")
        if self.temperature not in _TEMPERATURE_MODES:
            raise ValueError(
                f"CovariantAttentionConfig.temperature must be one of {_TEMPERATURE_MODES}"
            )
        if self.christoffel not in _CHRISTOFFEL_MODES:
            raise ValueError(
                f"CovariantAttentionConfig.christoffel must be one of {_CHRISTOFFEL_MODES}"
            )
        if self.kernel not in _KERNELS:
            raise ValueError(f"CovariantAttentionConfig.kernel must be one of {_KERNELS}")
        if self.krr_kernel not in krr.KERNELS:
            raise ValueError(f"CovariantAttentionConfig.krr_kernel must be one of {krr.KERNELS}")
        if not (self.ida_eps > 0 and self.krr_lambda > 1e-4):
            raise ValueError("CovariantAttentionConfig needs ida_eps > 0 and krr_lambda > 1e-4")
        if self.area not in _AREA_PROXIES:
            raise ValueError(f"CovariantAttentionConfig.area must be one of {_AREA_PROXIES}")
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"CovariantAttentionConfig.rank must be an int >= 1, got {self.rank}")
        if not isinstance(self.d_velocity_features, int) or self.d_velocity_features < 0:
            raise ValueError("CovariantAttentionConfig.d_velocity_features must be an int >= 0")
        if not isinstance(self.n_levels, int) or self.n_levels < 1:
            raise ValueError("CovariantAttentionConfig.n_levels must be an int >= 1")
        self.string_tension = tuple(float(s) for s in self.string_tension)
        if len(self.string_tension) != self.n_levels:
            raise ValueError(
                f"CovariantAttentionConfig.string_tension needs one sigma per level "
                f"({self.n_levels}), got {len(self.string_tension)}"
            )
        if not all(math.isfinite(s) and s >= 0 for s in self.string_tension):
            raise ValueError("CovariantAttentionConfig.string_tension must be finite and >= 0")
        if not 0 <= self.query_level < self.n_levels:
            raise ValueError(
                f"CovariantAttentionConfig.query_level must lie in [0, {self.n_levels - 1}]"
            )
        for name in ("g_s", "g_2", "g_1", "hypercharge", "chirality", "connection_init_std"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"CovariantAttentionConfig.{name} must be finite")
        if self.connection_init_std < 0:
            raise ValueError("CovariantAttentionConfig.connection_init_std must be >= 0")


# =========================================================================== data records


@dataclass
class CovariantQueries:
    """Queries of a covariant head; either one per batch element ([B, ...]) or several
    ([B, Q, ...]); the output follows the same layout.

    positions:         [B, (Q,) d] points in the ball
    features:          [B, (Q,) d_query]
    velocity:          [B, (Q,) d] tangent velocity v = G^-1 p (Gamma(z)[v, v], W_Qzv terms)
    velocity_features: [B, (Q,) d_velocity_features] x_v = phi_v(v) (W_Qv term)
    value_grad:        [B, (Q,) d] grad V at z: drives the chiral projector (none: no gate)
    levels:            [B, (Q,)] integer query level (none: the head's config.query_level)
    chiral:            (Pi, degenerate) = head.chiral_projector(value_grad), or with Pi's flat
                       operator (Pi, degenerate, operator) = head.chiral_inputs(value_grad),
                       precomputed, with
                       leading dims broadcastable to [B, (Q,)]: a caller whose value gradient
                       is fixed over many calls (a rollout) computes it once; it replaces
                       value_grad (none: computed from value_grad when given)
    """

    positions: Tensor
    features: Tensor
    velocity: Tensor | None = None
    velocity_features: Tensor | None = None
    value_grad: Tensor | None = None
    levels: Tensor | None = None
    chiral: tuple[Tensor, ...] | None = None

    def __post_init__(self) -> None:
        p = self.positions
        if p.dim() not in (2, 3):
            raise ValueError(
                f"CovariantQueries.positions must be [B, d] or [B, Q, d], got {tuple(p.shape)}"
            )
        lead = tuple(p.shape[:-1])
        for name in ("features", "velocity", "velocity_features", "value_grad"):
            t = getattr(self, name)
            if t is None:
                continue
            if t.dim() != p.dim() or tuple(t.shape[:-1]) != lead:
                raise ValueError(
                    f"CovariantQueries.{name} must have leading shape {lead}, got {tuple(t.shape)}"
                )
            if t.dtype != p.dtype:
                raise ValueError(f"CovariantQueries.{name} has dtype {t.dtype}, not {p.dtype}")
        if self.levels is not None and (
            tuple(self.levels.shape) != lead
            or self.levels.dtype.is_floating_point
            or self.levels.dtype == torch.bool
        ):
            raise ValueError(
                f"CovariantQueries.levels must be an integer tensor of shape {lead}, "
                f"got {self.levels.dtype} {tuple(self.levels.shape)}"
            )
        for name in ("velocity", "value_grad"):
            t = getattr(self, name)
            if t is not None and t.shape[-1] != p.shape[-1]:
                raise ValueError(f"CovariantQueries.{name} must have last dim d = {p.shape[-1]}")
        max_norm = float(p.detach().norm(dim=-1).max())  # NaN fails the test below too
        if not max_norm < 1.0:
            raise ValueError(
                "CovariantQueries.positions must be finite points inside the unit ball "
                f"(max |z| = {max_norm:.6g})"
            )

    @classmethod
    def unchecked(cls, **values: Tensor | tuple[Tensor, ...] | None) -> CovariantQueries:
        """Queries from code that guarantees what __post_init__ checks (shapes, dtypes, points
        inside the ball: a model's own states), without the checks: their max |z| read costs
        a few ops and a host sync on every call of a rollout's inner loop."""
        queries = cls.__new__(cls)
        for f in fields(cls):
            setattr(queries, f.name, values.pop(f.name, f.default))
        if values:
            raise TypeError(f"unknown CovariantQueries fields {sorted(values)}")
        return queries

    @property
    def single(self) -> bool:
        """True for one query per batch element ([B, d])."""
        return self.positions.dim() == 2

    def multi(self) -> CovariantQueries:
        """The same queries in the [B, Q, ...] layout (Q = 1 for single queries)."""
        if not self.single:
            return self

        def unsq(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.unsqueeze(1)

        tensors = {f.name: unsq(getattr(self, f.name)) for f in fields(self) if f.name != "chiral"}
        chiral = None
        if self.chiral is not None:  # (Pi [.., 2, 2], degenerate [..], operator [.., k, k]):
            proj, degenerate, *operator = self.chiral  # the query axis before the matrices'
            chiral = (
                proj.unsqueeze(-3),
                degenerate.unsqueeze(-1),
                *(o.unsqueeze(-3) for o in operator),
            )
        return CovariantQueries.unchecked(**tensors, chiral=chiral)  # checked when built

    def projector(self, head: CovariantAttention) -> tuple[Tensor, ...] | None:
        """(Pi, degenerate[, operator]) for `head`: the precomputed tuple, else from value_grad,
        else None."""
        if self.chiral is not None:
            return self.chiral
        if self.value_grad is None:
            return None
        return head.chiral_projector(self.value_grad)


@dataclass
class PreparedContext:
    """A context bank transported to the origin once (seed 003 Def 282; Engineering proxy 3):
    reusable for every query while the bank and the head's parameters are unchanged (a plan).

    positions [Bc, N, d], levels [Bc, N], mask [Bc, N] | None; key_fields [Bc, N, d_k] (local
    frame, for re-scoring under another connection); keys, values [Bc, N, d_k] at the origin;
    lines [Bc, N, r, r] = U_{z'->0} in the minimal representation (r = 4 n_colors; it acts on
    the d_k-dim fields as U (x) I_m). Bc = 1: shared by every query of the batch.
    A bank joined by :meth:`cat` joins key_fields, keys, values and lines from its parts on
    first read (a rollout that contracts part by part never reads them joined).
    """

    positions: Tensor
    levels: Tensor
    mask: Tensor | None
    _key_fields: Tensor | None
    _keys: Tensor | None
    _values: Tensor | None
    _lines: Tensor | None
    charged: bool = True  # any colour-charged (texture) entry: False skips area-law screening
    ridge_inverse: Tensor | None = None  # kernel "krr": (K_kk + lam I)^-1 [Bc, N, N], once
    charged_index: Tensor | None = None  # [C] entries charged in some row (None: not yet read)
    # (keys, values) of the parts a PreparedContext.cat joined, as prepared ([1 or B, N_i, d_k],
    # in entry order): the head contracts part by part, so a shared part stays one plain matrix
    # product instead of a product with its copy expanded over the batch (None: one part)
    blocks: tuple[tuple[Tensor, Tensor], ...] | None = None
    _charged_entries: tuple[Tensor, Tensor, Tensor] | None = field(default=None, repr=False)
    _parts: tuple[PreparedContext, ...] = field(default=(), repr=False)  # set by cat

    @property
    def batch_size(self) -> int:
        return self.positions.shape[0]

    def _field(self, name: str) -> Tensor:
        value = getattr(self, "_" + name)
        if value is None:  # a joined bank: join the parts' fields now, once
            parts = [getattr(p, name) for p in self._parts]  # [1 or B, N_i, ...]
            value = torch.cat([t.expand(self.batch_size, *t.shape[1:]) for t in parts], dim=1)
            setattr(self, "_" + name, value)
        return value

    @property
    def key_fields(self) -> Tensor:
        return self._field("key_fields")

    @property
    def keys(self) -> Tensor:
        return self._field("keys")

    @property
    def values(self) -> Tensor:
        return self._field("values")

    @property
    def lines(self) -> Tensor:
        return self._field("lines")

    @staticmethod
    def cat(parts: Sequence[PreparedContext]) -> PreparedContext:
        """Join banks prepared separately (a shared B = 1 provider, e.g. prototypes, and a
        per-sample one, e.g. a trajectory window) along the entry axis, broadcasting B = 1 parts
        (as ContextBank.cat): each entry keeps the one Wilson line it was prepared with. Not for
        the KRR kernel, whose ridge system couples all entries (prepare the joined bank)."""
        if any(p.ridge_inverse is not None for p in parts):
            raise ValueError("PreparedContext.cat: KRR banks must be prepared joined")
        batch = max(p.batch_size for p in parts)

        def joined(name: str) -> Tensor:
            ts = [getattr(p, name) for p in parts]
            return torch.cat([t.expand(batch, *t.shape[1:]) for t in ts], dim=1)

        masks = None
        if any(p.mask is not None for p in parts):
            masks = torch.cat(
                [
                    (
                        p.mask
                        if p.mask is not None
                        else torch.ones(
                            p.positions.shape[:2], dtype=torch.bool, device=p.positions.device
                        )
                    ).expand(batch, -1)
                    for p in parts
                ],
                dim=1,
            )
        offsets = [0]
        for p in parts:
            offsets.append(offsets[-1] + p.positions.shape[1])
        charged_index = torch.cat(
            [o + p.charged_columns() for o, p in zip(offsets[:-1], parts, strict=True)]
        )
        blocks = None  # contract part by part only where a shared part meets a per-sample one
        if len({p.batch_size for p in parts}) > 1:
            blocks = tuple(blk for p in parts for blk in (p.blocks or ((p.keys, p.values),)))
        return PreparedContext(
            positions=joined("positions"),
            levels=joined("levels"),
            mask=masks,
            _key_fields=None,
            _keys=None,
            _values=None,
            _lines=None,
            charged=any(p.charged for p in parts),
            charged_index=charged_index,
            blocks=blocks,
            _parts=tuple(parts),
        )

    def products(self, q: Tensor, values: bool = False) -> Tensor:
        """<q_bi, key_bj> (or value_bj) for every entry j: q [B, Q, d_k] -> [B, Q, N]."""
        if self.blocks is None:
            return pair_products(q, self.values if values else self.keys)
        return torch.cat([pair_products(q, blk[int(values)]) for blk in self.blocks], dim=-1)

    def mixture(self, w: Tensor, values: bool = True) -> Tensor:
        """sum_j w_bij value_bj (or key_bj): w [B, Q, N] -> [B, Q, d_k]."""
        if self.blocks is None:
            return pair_mixture(w, self.values if values else self.keys)
        sizes = [blk[0].shape[1] for blk in self.blocks]
        parts = zip(w.split(sizes, dim=-1), self.blocks, strict=True)
        return sum(pair_mixture(wp, blk[int(values)]) for wp, blk in parts)  # type: ignore[return-value]

    def charged_entries(self) -> tuple[Tensor, Tensor, Tensor]:
        """(columns [C], their positions [Bc, C, d], their levels [Bc, C]) of the entries that are
        colour-charged in some batch row, read once per prepared bank (every query of a
        rollout screens the same entries)."""
        if self._charged_entries is None:
            cols = self.charged_columns()
            self._charged_entries = (cols, self.positions[:, cols], self.levels[:, cols])
        return self._charged_entries

    def charged_columns(self) -> Tensor:
        """[C] indices of the entries that are colour-charged in some batch row: screening
        reads only these (a few texture entries among many macro prototypes)."""
        if self.charged_index is None:
            self.charged_index = _charged_columns(self.levels)
        return self.charged_index


def _charged_columns(levels: Tensor) -> Tensor:
    """levels [Bc, N] -> [C] long: the entries whose level is not macro in some row."""
    return (levels != MACRO_LEVEL).any(0).nonzero().squeeze(-1)


@dataclass
class AttentionRecord:
    """What one forward pass leaves for the diagnostics (nodes 67-70). Always [B, Q, ...]:

    weights [B, Q, N] after screening and renormalisation; scores [B, Q, N] = <Q~, K~> before
    temperature; logits [B, Q, N] = scores / tau before screening; tau, conformal [B, Q] (the
    temperature used and lambda(z)); query_levels [B, Q]; entry_levels [Bc, N]; mask [Bc, N] or
    None; projectors [B, Q, 2, 2] complex and degenerate [B, Q] bool (None without value_grad).
    """

    weights: Tensor
    scores: Tensor
    logits: Tensor
    tau: Tensor | None  # None for kernels without a temperature (inverse distance, KRR)
    conformal: Tensor
    query_levels: Tensor
    entry_levels: Tensor
    mask: Tensor | None
    projectors: Tensor | None
    degenerate: Tensor | None
    d_k: int

    def detach(self) -> AttentionRecord:
        """A copy cut from the autograd graph (safe to keep across steps)."""
        return AttentionRecord(
            **{
                f.name: getattr(self, f.name).detach()
                if isinstance(getattr(self, f.name), Tensor)
                else getattr(self, f.name)
                for f in fields(self)
            }
        )


# =========================================================================== the head


class CovariantAttention(nn.Module):
    """One covariant attention head (see the module docstring for the identities).

    Call shape: ``out, record = head(queries, context)`` with ``context`` a :class:`ContextBank`
    or the :class:`PreparedContext` from :meth:`prepare`; ``record.weights`` are the attention
    weights [B, Q, N]. ``out`` is [B, d_out] for single queries, [B, Q, d_out] otherwise.
    """

    def __init__(self, config: CovariantAttentionConfig):
        super().__init__()
        self.config = cfg = config
        d, k = cfg.d, cfg.d_k
        self.rep_dim = 4 * cfg.n_colors  # r: realified C^{n_colors} (x) C^2

        # gauge structure: generators of the minimal representation R^r (r = 4 n_colors) with
        # couplings folded in (constants of the config, kept in float64 and cast on use, so a
        # head moved to float64 gets exact generators), and the connection's learned coefficients
        gens = gauge.gauge_generators(self.rep_dim, cfg.n_colors, cfg.hypercharge, torch.float64)
        self._generators64 = gens.stacked(cfg.g_s, cfg.g_2, cfg.g_1)  # [G, r, r]
        self._generators_cache: dict[tuple, Tensor] = {}
        n_gen = self._generators64.shape[0]
        std = cfg.connection_init_std
        self.connection_c0 = nn.Parameter(std * torch.randn(d, n_gen))
        self.connection_c1 = nn.Parameter(std * torch.randn(d, d, n_gen))

        # Christoffel query (Def 283): linear terms
        self.w_q = nn.Linear(cfg.d_query, k, bias=False)
        self.w_qz = nn.Linear(d, k, bias=False)
        self.w_qv = (
            nn.Linear(cfg.d_velocity_features, k, bias=False) if cfg.d_velocity_features else None
        )
        # quadratic terms
        if cfg.christoffel == "full":
            self.w_q_gamma = nn.Parameter(torch.randn(k, d, d) / d)
            self.w_q_zv = nn.Parameter(torch.randn(k, d, d) / d) if cfg.position_velocity else None
        else:
            scale = 1.0 / math.sqrt(d)
            self.q_gamma_u = nn.Parameter(scale * torch.randn(cfg.rank, k, d))
            self.q_gamma_v = nn.Parameter(scale * torch.randn(cfg.rank, k, d))
            if cfg.position_velocity:
                self.q_zv_u = nn.Parameter(scale * torch.randn(cfg.rank, k, d))
                self.q_zv_v = nn.Parameter(scale * torch.randn(cfg.rank, k, d))
        if cfg.christoffel == "poincare" and cfg.query_velocity:  # W applied to Gamma(z)[v, v]
            self.w_q_christoffel = nn.Linear(d, k, bias=False)

        # keys, values, output
        self.w_k = nn.Linear(cfg.d_key, k, bias=False)
        self.w_v = nn.Linear(cfg.d_value, k, bias=False)
        self.w_o = nn.Linear(k, cfg.d_out, bias=False)

        # temperature calibration around tau(z) = sqrt(d_k)/lambda(z): tau * exp(a + b log(lam/2))
        if cfg.temperature == "calibrated":
            self.temperature_log_scale = nn.Parameter(torch.zeros(()))
            self.temperature_log_slope = nn.Parameter(torch.zeros(()))

        # area-law screening: sigma(l) = g(l)^2 (Thm 102: sigma proportional to g_s(l)^2)
        self.screening_coupling = nn.Parameter(torch.tensor(cfg.string_tension).sqrt())

        # kernel ridge regression: lam = softplus(raw) + 1e-4 (seed 001 §3)
        if cfg.kernel == "krr":
            self.krr_lambda_raw = nn.Parameter(
                torch.tensor(math.log(math.expm1(cfg.krr_lambda - 1e-4)))
            )

        # chirality: P : R^d -> R^3 and the mixing strength kappa (raw, so 0 is reachable)
        self.value_grad_proj = nn.Linear(d, 3, bias=False)
        self.chirality_strength = nn.Parameter(torch.tensor(float(cfg.chirality)))

    # ------------------------------------------------------------------ pieces

    @property
    def generators(self) -> Tensor:
        """The gauge generators with couplings folded in, [G, r, r], in the parameters' dtype."""
        c0 = self.connection_c0
        key = (c0.dtype, c0.device)
        if key not in self._generators_cache:
            self._generators_cache[key] = self._generators64.to(dtype=c0.dtype, device=c0.device)
        return self._generators_cache[key]

    @property
    def group(self) -> gauge.GaugeGroup:
        """The gauge group with this head's couplings (same generators as :attr:`generators`)."""
        cfg = self.config
        return gauge.GaugeGroup(cfg.n_colors, cfg.g_s, cfg.g_2, cfg.g_1, cfg.hypercharge)

    def lines_to_origin(
        self, positions: Tensor, connection: gauge.ConnectionFn | None = None
    ) -> Tensor:
        """U_{z->0} for every point (seed 003 Def 282) in the minimal representation: positions
        [..., d] -> [..., r, r]. The head's own connection goes through the closed-form group
        path (geometry.gauge.wilson_line_in_group: no matrix exponentials); another connection
        (node 67's transformed one) through the generic path. Both give the same lines."""
        cfg = self.config
        if connection is None:
            return gauge.affine_wilson_line_to_origin(
                self.group,
                self.connection_c0,
                self.connection_c1,
                positions,
                cfg.wilson,
                cfg.segments,
            )
        return gauge.wilson_line_to_origin(
            connection, positions, mode=cfg.wilson, segments=cfg.segments
        )

    def connection(self) -> gauge.ConnectionFn:
        """A(x) . dx = sum_g (c0 + c1 x) T_g (Def 280), couplings folded into T_g; in the minimal
        representation R^r (x, dx [..., d] -> [..., r, r])."""
        return gauge.affine_connection(self.generators, self.connection_c0, self.connection_c1)

    def chiral_projector(self, value_grad: Tensor) -> tuple[Tensor, Tensor]:
        """Pi = (I + n.sigma)/2 for n = P grad V (Def 285) and the degenerate flags:
        value_grad [..., d] -> ([..., 2, 2] complex, [...] bool) (geometry.su2)."""
        return su2.chiral_projector(self.value_grad_proj(value_grad))

    def chiral_inputs(self, value_grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(Pi, degenerate, Pi's flat operator [..., d_k, d_k]) for CovariantQueries.chiral: what
        a caller whose value gradient is fixed over a rollout builds once."""
        proj, degenerate = self.chiral_projector(value_grad)
        operator = chiral_operator(proj, self.config.n_colors, self.config.d_k, value_grad.dtype)
        return proj, degenerate, operator

    def string_tension(self) -> Tensor:
        """sigma(l) for l = 0 .. L: [L + 1]."""
        return self.screening_coupling.square()

    def query_field(self, queries: CovariantQueries) -> Tensor:
        """psi_Q = W_Q x + W_Qz z + W_Qv x_v + W_QGamma(z, z) + W_Qzv(z, v)  (Def 283), local frame.

        christoffel = "full": W_QGamma a [d_k, d, d] tensor; "factorized": rank-R (Def 291);
        "poincare": lambda(z) W~(z, z) (rank R, Prop 99's conformal modulation) plus
        W_Gamma Gamma(z)[v, v] with the exact O(d) contraction (Def 291's closed form; 0 without v).
        positions [..., d] -> [..., d_k].
        """
        cfg, z, v = self.config, queries.positions, queries.velocity
        q = self.w_q(queries.features) + self.w_qz(z)  # [..., d_k]
        if self.w_qv is not None:
            if queries.velocity_features is None:
                raise ValueError("this head has a W_Qv term: pass queries.velocity_features")
            q = q + self.w_qv(queries.velocity_features)
        if cfg.christoffel == "full":
            q = q + bilinear(self.w_q_gamma, z, z)
        else:
            quad = low_rank_bilinear(self.q_gamma_u, self.q_gamma_v, z, z)
            if cfg.christoffel == "poincare":
                quad = poincare.conformal_factor(z) * quad
            q = q + quad
        if v is not None:
            if not cfg.query_velocity:
                raise ValueError("this head was built with query_velocity=False: pass no velocity")
            if cfg.christoffel == "poincare":
                q = q + self.w_q_christoffel(poincare.christoffel_contract(z, v))
            if cfg.position_velocity:
                if cfg.christoffel == "full":
                    q = q + bilinear(self.w_q_zv, z, v)
                else:
                    q = q + low_rank_bilinear(self.q_zv_u, self.q_zv_v, z, v)
        return q

    def temperature(self, positions: Tensor) -> Tensor:
        """tau(z) [...] for positions [..., d]  (Thm 99: sqrt(d_k)/lambda(z))."""
        cfg = self.config
        if cfg.temperature == "constant":
            return torch.full(
                positions.shape[:-1],
                math.sqrt(cfg.d_k),
                dtype=positions.dtype,
                device=positions.device,
            )
        tau = poincare.metric_temperature(positions, cfg.d_k).squeeze(-1)  # [...]
        if cfg.temperature == "calibrated":
            log_half_lam = -torch.log(poincare.one_minus_sqnorm(positions)).squeeze(-1)
            tau = tau * torch.exp(
                self.temperature_log_scale + self.temperature_log_slope * log_half_lam
            )
        return tau

    def screening_penalty(
        self, z: Tensor, z_entries: Tensor, query_levels: Tensor, entry_levels: Tensor
    ) -> Tensor:
        """sigma(level(z)) A(z, z') on colour-charged entries (level != 0), 0 on macro ones
        (Def 286, Thm 102): subtracted from the logits. z [B, Q, d], z' [Bc, N, d] -> [B, Q, N]."""
        if self.config.area == "conformal":
            area = screening.pairwise_string_area(z, z_entries)
        else:
            area = screening.pairwise_geodesic_string_area(z, z_entries)
        sigma = self.string_tension()[query_levels]  # [B, Q]
        charged = (entry_levels != MACRO_LEVEL).unsqueeze(-2)  # [Bc, 1, N]
        return sigma.unsqueeze(-1) * area * charged

    def _key_value_fields(self, context: ContextBank) -> tuple[Tensor, Tensor]:
        return self.w_k(context.key_features), self.w_v(context.value_features)

    # ------------------------------------------------------------------ context and scores

    def prepare(
        self,
        context: ContextBank,
        connection: gauge.ConnectionFn | None = None,
        field_map: FieldMap | None = None,
        lines: Tensor | None = None,
    ) -> PreparedContext:
        """Fields of every entry, transported to the origin with one Wilson line per entry.

        `connection` replaces the head's connection and `field_map(z', psi)` acts on the local
        fields first: together they express the bank in another gauge (node 67)."""
        cfg = self.config
        if context.dim != cfg.d:
            raise ValueError(f"context positions have d = {context.dim}, the head expects {cfg.d}")
        if context.key_features.shape[-1] != cfg.d_key:
            raise ValueError(
                f"context key_features have {context.key_features.shape[-1]} features, "
                f"the head expects d_key = {cfg.d_key}"
            )
        if context.value_features.shape[-1] != cfg.d_value:
            raise ValueError(
                f"context value_features have {context.value_features.shape[-1]} features, "
                f"the head expects d_value = {cfg.d_value}"
            )
        if context.size and int(context.levels.max()) >= cfg.n_levels:
            raise ValueError(
                f"context levels must lie in [0, {cfg.n_levels - 1}] (n_levels = {cfg.n_levels})"
            )
        psi_k, psi_v = self._key_value_fields(context)  # [Bc, N, d_k] x 2
        if field_map is not None:
            psi_k, psi_v = field_map(context.positions, psi_k), field_map(context.positions, psi_v)
        if lines is None:  # given: the entries' lines of this head's connection, computed once
            lines = self.lines_to_origin(context.positions, connection)  # [Bc, N, r, r]
        keys, values = apply_in_channels(lines, psi_k), apply_in_channels(lines, psi_v)
        charged_index = _charged_columns(context.levels)
        return PreparedContext(
            positions=context.positions,
            levels=context.levels,
            mask=context.mask,
            _key_fields=psi_k,
            _keys=keys,
            _values=values,
            _lines=lines,
            charged=bool(charged_index.numel()),
            charged_index=charged_index,
            ridge_inverse=self._ridge_inverse(keys, context.mask) if cfg.kernel == "krr" else None,
        )

    def ridge_lambda(self) -> Tensor:
        return torch.nn.functional.softplus(self.krr_lambda_raw) + 1e-4

    def _ridge_inverse(self, keys: Tensor, mask: Tensor | None) -> Tensor:
        """(K_kk + lam I)^-1 over the valid entries (seed 001 §3 with the SPD correction): the
        system depends on the bank only, so it is solved once per prepared context, directly
        (Cholesky: benchmarks/krr_pcg.py measures PCG slower than Cholesky below n ~ 4096);
        masked entries are cut out (zero rows and columns of the inverse)."""
        cfg = self.config
        k_kk = krr.kernel_matrix(keys, keys, cfg.krr_kernel)  # [Bc, N, N]
        eye = torch.eye(keys.shape[-2], dtype=keys.dtype, device=keys.device)
        if mask is not None:
            keep = mask.to(keys.dtype)  # [Bc, N]
            k_kk = k_kk * keep.unsqueeze(-1) * keep.unsqueeze(-2)
        inv = cholesky_spd_solve(k_kk, eye.expand_as(k_kk), self.ridge_lambda())
        if mask is not None:
            inv = inv * keep.unsqueeze(-1) * keep.unsqueeze(-2)
        return inv

    def _transported_query(
        self,
        queries: CovariantQueries,
        connection: gauge.ConnectionFn | None = None,
        field_map: FieldMap | None = None,
        lines: Tensor | None = None,
    ) -> Tensor:
        """U_{z->0} psi_Q(z): [B, Q, d_k] (one Wilson line per query)."""
        psi_q = self.query_field(queries)
        if field_map is not None:
            psi_q = field_map(queries.positions, psi_q)
        if lines is None:
            lines = self.lines_to_origin(queries.positions, connection)
        return apply_in_channels(lines, psi_q)

    def _check_batch(self, queries: CovariantQueries, prepared: PreparedContext) -> None:
        bq, bc = queries.positions.shape[0], prepared.batch_size
        if bc not in (1, bq):
            raise ValueError(
                f"context batch size {bc} must be 1 (shared) or equal the queries' {bq}"
            )
        if queries.positions.shape[-1] != self.config.d:
            raise ValueError(
                f"queries have d = {queries.positions.shape[-1]}, the head expects {self.config.d}"
            )
        if queries.features.shape[-1] != self.config.d_query:
            raise ValueError(
                f"queries have {queries.features.shape[-1]} features, the head expects "
                f"d_query = {self.config.d_query}"
            )

    def scores(
        self,
        queries: CovariantQueries,
        context: ContextBank | PreparedContext,
        connection: gauge.ConnectionFn | None = None,
        field_map: FieldMap | None = None,
    ) -> Tensor:
        """s(z, z') = <U_{z->0} psi_Q(z), U_{z'->0} psi_K(z')>  (Thm 98): [B, Q, N].

        With `connection` / `field_map` the fields are first mapped psi -> field_map(z, psi) at
        their own points and transported with that connection (node 67's gauge check); a
        PreparedContext can only be scored as it was prepared."""
        q = queries.multi()
        if isinstance(context, PreparedContext):
            if connection is not None or field_map is not None:
                raise ValueError("re-scoring under another gauge needs the ContextBank")
            prepared = context
        else:
            prepared = self.prepare(context, connection, field_map)
        self._check_batch(q, prepared)
        q_t = self._transported_query(q, connection, field_map)
        return prepared.products(q_t)  # [B, Q, N]

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        queries: CovariantQueries,
        context: ContextBank | PreparedContext,
        query_lines: Tensor | None = None,
    ) -> tuple[Tensor, AttentionRecord]:
        """`query_lines` [B, Q, r, r] (or [B, r, r] for single queries): the queries' Wilson lines
        of this head's connection, when the caller already has them (heads that share one
        connection share the lines of a point); None computes them."""
        cfg = self.config
        q = queries.multi()
        prepared = context if isinstance(context, PreparedContext) else self.prepare(context)
        self._check_batch(q, prepared)
        z = q.positions  # [B, Q, d]
        if q.levels is not None:
            levels = q.levels  # [B, Q]
            if int(levels.min()) < 0 or int(levels.max()) >= cfg.n_levels:
                raise ValueError(f"query levels must lie in [0, {cfg.n_levels - 1}]")
        else:
            levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=z.device)

        if query_lines is not None and queries.single:
            query_lines = query_lines.unsqueeze(1)
        q_t = self._transported_query(q, lines=query_lines)  # [B, Q, d_k]
        scores = prepared.products(q_t)  # [B, Q, N]
        mask = None if prepared.mask is None else prepared.mask.unsqueeze(-2)  # [Bc, 1, N]
        tau = None
        if cfg.kernel == "krr":  # weights K_qk (K_kk + lam I)^-1: not a distribution, no screening
            k_qk = krr.kernel_matrix(q_t, prepared.keys, cfg.krr_kernel)  # [B, Q, N]
            if mask is not None:
                k_qk = k_qk * mask
            logits = scores
            weights = k_qk @ prepared.ridge_inverse  # [B, Q, N]
        else:
            if cfg.kernel == "softmax":  # Thm 99: softmax(s / tau(z))
                tau = self.temperature(z)  # [B, Q]
                logits = scores / tau.unsqueeze(-1)  # [B, Q, N]
            else:  # seed 000 HIDA: weights (d_H(z, z')^2 + eps)^-1, normalised
                sqdist = ida.squared_distance_matrix(z, prepared.positions, "poincare")
                logits = -torch.log(sqdist + cfg.ida_eps)  # [B, Q, N]
            screened = logits  # macro entries only: exempt from screening (Def 286)
            if prepared.charged:
                cols, pos_c, levels_c = prepared.charged_entries()  # screen only these
                penalty = self.screening_penalty(z, pos_c, levels, levels_c)  # [B, Q, C]
                screened = logits.index_add(-1, cols, -penalty)
            weights = masked_softmax(screened, mask)  # [B, Q, N]
        out = prepared.mixture(weights)  # [B, Q, d_k], at the origin frame

        projectors = degenerate = None
        chiral = q.projector(self)
        if chiral is not None:
            projectors, degenerate, *operator = chiral
            out = chiral_gate(out, projectors, cfg.n_colors, self.chirality_strength, *operator)
        out = self.w_o(out)  # [B, Q, d_out]

        record = AttentionRecord(
            weights=weights,
            scores=scores,
            logits=logits,
            tau=tau,
            conformal=poincare.conformal_factor(z).squeeze(-1),
            query_levels=levels,
            entry_levels=prepared.levels,
            mask=prepared.mask,
            projectors=projectors,
            degenerate=degenerate,
            d_k=cfg.d_k,
        )
        return (out.squeeze(1) if queries.single else out), record

    # ------------------------------------------------------------------ scalar potentials

    def has_closed_form_gradient(self) -> bool:
        """Whether :meth:`scalar_output_gradient` covers this head: a scalar output (d_out 1),
        the softmax kernel, metric or constant temperature, the factorized or Poincare quadratic
        query without velocity terms, exp or first-order Wilson lines with N_f <= 2, and the
        conformal area proxy. Other heads differentiate by autograd."""
        cfg = self.config
        return (
            cfg.d_out == 1
            and cfg.kernel == "softmax"
            and cfg.temperature in ("metric", "constant")
            and cfg.christoffel in ("factorized", "poincare")
            and cfg.wilson in ("exp", "first_order")
            and cfg.n_colors <= 2
            and cfg.area == "conformal"
            and cfg.d_velocity_features == 0
            and not cfg.position_velocity
        )

    def scalar_output_gradient(
        self, queries: CovariantQueries, prepared: PreparedContext
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """A scalar head read as a potential Phi(z, x) = W_O chiral(sum_j alpha_j V~_j), with its
        gradients in closed form: no backward pass through the head (its cost on CPU is per-op
        overhead, and a backward doubles the op count; a double backward in training triples
        it). With a = dPhi/d out (through the chiral gate: :func:`chiral_gate_vjp`):

            grad Phi = sum_j alpha_j (<a, V~_j> - <a, out>) grad l_j,
            grad l_j = J_{Q~}^T K~_j / tau - s_j grad tau / tau^2 - sigma [j charged] grad A_j,
            J_{Q~}^T y = J_psi^T (U^T y) + (dh/dz)^T M(h)^T e,  e_g = <U^T y, T_g psi>

        (Q~ = U(h(z)) psi(z, x), h the integrated connection, M the group exponential's
        Jacobian: geometry.gauge.group_exp_vjp). The expressions are ordinary tensor ops, so
        autograd differentiates them once more in training (parameters, and z through earlier
        steps): one backward where autograd's gradient would need a double one. Single queries
        without velocity (the kick head).

        queries: positions z [B, d], features x [B, d_query], value_grad [B, d] or chiral
        (broadcastable to [B]) | None.
        Returns (Phi [B, 1], dPhi/dz [B, d] at fixed x, dPhi/dx [B, d_query], lines [B, r, r]).
        """
        cfg = self.config
        if not self.has_closed_form_gradient():
            raise ValueError("this head's configuration has no closed-form gradient")
        if not queries.single or queries.velocity is not None:
            raise ValueError("scalar_output_gradient takes single queries without velocity")
        self._check_batch(queries, prepared)
        z, x = queries.positions, queries.features  # [B, d], [B, d_query]
        n_batch, d = z.shape
        gens = self.generators  # [G, r, r]
        r, n_gen = self.rep_dim, gens.shape[0]
        c0, c1 = self.connection_c0, self.connection_c1  # [d, G], [d, d, G]
        group = self.group
        h = gauge.affine_integral(c0, c1, z)  # [B, G]: the line's integrated connection
        lines = gauge.line_from_integral(group, h, cfg.wilson)  # [B, r, r], as lines_to_origin
        # psi = W_Q x + W_Qz z + c(z) Q(z), Q_c = sum_r (U_r z)_c (V_r z)_c, c = lambda or 1:
        # query_field without velocity terms, its factors U_r z, V_r z kept for the gradient
        rank, k = self.q_gamma_u.shape[:2]
        u_mat = self.q_gamma_u.reshape(rank * k, d)
        v_mat = self.q_gamma_v.reshape(rank * k, d)
        uz = (z @ u_mat.T).reshape(n_batch, rank, k)  # [B, R, k]
        vz = (z @ v_mat.T).reshape(n_batch, rank, k)
        quad = (uz * vz).sum(1)  # [B, k]
        one_minus = poincare.one_minus_sqnorm(z)  # [B, 1]
        lam = 2.0 / one_minus  # conformal_factor(z)
        c = lam if cfg.christoffel == "poincare" else 1.0
        psi = self.w_q(x) + self.w_qz(z) + c * quad  # [B, k]
        q_t = apply_in_channels(lines, psi)  # [B, k]

        scores = prepared.products(q_t.unsqueeze(1)).squeeze(1)  # [B, N]
        sqrt_dk = math.sqrt(cfg.d_k)
        # tau = metric_temperature(z, d_k) = sqrt(d_k) (1 - |z|^2) / 2 (Thm 99)
        tau = (0.5 * sqrt_dk) * one_minus if cfg.temperature == "metric" else None
        logits = scores / (tau if tau is not None else sqrt_dk)
        sigma_q = charged = cols = None
        if prepared.charged:  # on the charged entries only ([B, C])
            sigma_q = self.string_tension()[cfg.query_level]
            cols, pos_c, levels_c = prepared.charged_entries()  # [C], [Bc, C, d], [Bc, C]
            charged = (levels_c != MACRO_LEVEL).to(z.dtype)  # [Bc, C]
            delta2 = poincare.sqnorm(z.unsqueeze(1) - pos_c, keepdim=False)  # [B, C]
            area = 0.5 * lam.square() * delta2  # screening.string_area (Def 286)
            logits = logits.index_add(-1, cols, -(sigma_q * area * charged))
        weights = masked_softmax(logits, prepared.mask)  # [B, N]
        out = prepared.mixture(weights.unsqueeze(1)).squeeze(1)  # [B, k]

        # a = dPhi/d out: the read-out is linear without a chiral gate
        chiral = queries.projector(self)
        if chiral is None:
            phi = self.w_o(out)  # [B, 1]
            a = self.w_o.weight.expand(n_batch, -1)  # [B, k]
        else:
            phi, a = chiral_gate_vjp(
                out,
                chiral[0],
                cfg.n_colors,
                self.chirality_strength,
                self.w_o.weight[0],
                *chiral[2:],
            )
        # b_j = dPhi/d l_j = alpha_j (<a, V~_j> - <a, out>)
        a_values = prepared.products(a.unsqueeze(1), values=True).squeeze(1)  # [B, N]
        b = weights * (a_values - (out * a).sum(-1, keepdim=True))  # [B, N]

        kappa = prepared.mixture(b.unsqueeze(1), values=False).squeeze(1)  # [B, k]
        if tau is not None:  # tau = sqrt(d_k)(1 - |z|^2)/2: grad tau = -sqrt(d_k) z
            kappa = kappa / tau
            grad_z = (b * scores).sum(-1, keepdim=True) * sqrt_dk * z / tau.square()
        else:
            kappa = kappa / sqrt_dk
            grad_z = torch.zeros_like(z)
        if charged is not None:
            grad_z = grad_z - sigma_q * screening.weighted_string_area_grad(
                z, pos_c, b[:, cols] * charged, lam, delta2
            )
        # through Q~ = U psi: the transported covector y = U^T kappa
        y = apply_in_channels(lines.transpose(-1, -2), kappa)  # [B, k]
        # e_g = <kappa, dU/dh_g psi>: exp, dU/dh_g = U sum_g' M[g', g] T_g', so
        # e = M^T <U^T kappa, T psi>; first order, dU/dh_g = T_g, so e = <kappa, T psi>
        w = y if cfg.wilson == "exp" else kappa
        outer = w.reshape(n_batch, r, -1) @ psi.reshape(n_batch, r, -1).transpose(-1, -2)
        e = outer.reshape(n_batch, r * r) @ gens.reshape(n_gen, r * r).T  # [B, G]
        if cfg.wilson == "exp":
            e = gauge.group_exp_vjp(group, h, e)
        # dh_g/dz_m = c0[m, g] + 1/2 sum_n (c1[m, n, g] + c1[n, m, g]) z_n
        c1_sym = (c1 + c1.transpose(0, 1)).reshape(d, d * n_gen)  # [m, (n, g)]
        ze = (z.unsqueeze(-1) * e.unsqueeze(-2)).reshape(n_batch, d * n_gen)  # [B, (n, g)]
        grad_z = grad_z + e @ c0.T + 0.5 * ze @ c1_sym.T
        # through psi: W_Qz, the quadratic term (d lambda/dz = lambda^2 z), and W_Q x
        jq = (y.unsqueeze(1) * vz).reshape(n_batch, rank * k) @ u_mat + (
            y.unsqueeze(1) * uz
        ).reshape(n_batch, rank * k) @ v_mat  # J_Q^T y [B, d]
        grad_z = grad_z + y @ self.w_qz.weight
        if cfg.christoffel == "poincare":
            grad_z = grad_z + lam * jq + (y * quad).sum(-1, keepdim=True) * lam.square() * z
        else:
            grad_z = grad_z + jq
        grad_x = y @ self.w_q.weight  # [B, d_query]
        return phi, grad_z, grad_x, lines
