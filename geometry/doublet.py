"""The realified field layout of seed 003's covariant head, as pure functions on tensors.

A gauge field psi [..., k] is the realification (Re psi, Im psi) of psi in
C^{N_f} (x) C^2 (x) C^m (geometry.lie_algebra's layout, k = 4 N_f m): C^{N_f} the colour slot,
C^2 the SU(2)_L doublet slot (Def 284), C^m the channels. This module holds what acts on that
layout:

- the doublet view and its inverse (:func:`realified_to_doublet`, :func:`doublet_to_realified`);
- a group element given in the minimal representation R^{4 N_f}, applied channel by channel
  (:func:`apply_in_channels`);
- the chiral gate of Defs 284-285, Psi -> Psi + kappa (c^ Pi Psi - Psi), in real arithmetic
  (:func:`chiral_operator`, :func:`chiral_gate`, :func:`chiral_gate_vjp`);
- the contractions the head's fields go through: Def 283 / 291's bilinear query terms
  (:func:`bilinear`, :func:`low_rank_bilinear`), scores and mixtures against a bank shared by
  the batch or per sample (:func:`pair_products`, :func:`pair_mixture`), the masked softmax.

docs/seed_map.md, section "Covariant attention head, screening, diagnostics 67-70", maps each
function to the seed definition it implements and the test that checks it.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from .lie_algebra import realify
from .tables import constant_table

__all__ = [
    "bilinear",
    "low_rank_bilinear",
    "apply_in_channels",
    "pair_products",
    "pair_mixture",
    "masked_softmax",
    "realified_to_doublet",
    "doublet_to_realified",
    "chiral_operator",
    "chiral_gate",
    "chiral_gate_vjp",
]


# =========================================================================== contractions


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
    C^{N_f} (x) C^2 (x) C^m (d_k = r m, geometry.lie_algebra's layout). In that layout
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
    no allowed entry gives weights 0, never NaN. [..., N]."""
    if mask is None:
        return torch.softmax(logits, dim=-1)
    filled = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return torch.softmax(filled, dim=-1) * mask


# =========================================================================== doublets


def realified_to_doublet(x: Tensor, n_colors: int) -> Tensor:
    """x [..., k] = (Re psi, Im psi) with psi in C^{N_f} (x) C^2 (x) C^m
    (geometry.lie_algebra's layout) -> psi [..., N_f, 2, m] complex; the SU(2)_L generators act
    on the middle (doublet) axis (seed 003 Def 284)."""
    half = x.shape[-1] // 2
    psi = torch.complex(x[..., :half], x[..., half:])
    return psi.reshape(*x.shape[:-1], n_colors, 2, -1)


def doublet_to_realified(psi: Tensor) -> Tensor:
    """Inverse of :func:`realified_to_doublet`: [..., N_f, 2, m] complex -> [..., k] real."""
    flat = psi.reshape(*psi.shape[:-3], -1)
    return torch.cat([flat.real, flat.imag], dim=-1)


@constant_table
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
        real4 = realify(unit)  # [4, 4] on (Re u1, Re u2, Im u1, Im u2)
        for r4, c4 in itertools.product(range(4), range(4)):
            basis[row, col, part, flat[:, r4], flat[:, c4]] = real4[r4, c4]
    groups = torch.zeros(k, n_colors * m, dtype=torch.float64)
    groups[flat.permute(1, 0, 2).reshape(4, -1), torch.arange(n_colors * m)] = 1.0
    return basis.reshape(8, k * k).to(device, dtype), groups.to(device, dtype)


def chiral_operator(proj: Tensor, n_colors: int, k: int, dtype: torch.dtype) -> Tensor:
    """Pi acting on every doublet of the flat layout, as one real matrix (seed 003 Def 285's
    projector on the C^2 slot): proj [..., 2, 2] complex -> [..., k, k] (the realification
    [[Re Pi, -Im Pi], [Im Pi, Re Pi]] placed on each (colour, channel) doublet; symmetric,
    idempotent; 0 for a degenerate Pi)."""
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
    """<a, chiral_gate(out)> and its gradient in `out`, in closed form and real arithmetic
    (seed 003 Defs 284-285).

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
