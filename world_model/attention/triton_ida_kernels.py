"""Triton kernels of the fused inverse-distance attention (seed 000 §2.1, Def 5.1) and their
launchers. The autograd.Function and the dispatch live in world_model/attention/triton_ida.py;
this module imports triton at its top and is imported only where the kernel is about to run.

Per pair (i, j) of a query block and a key block, all in the compute dtype (float32; float64
under the interpreter only):

    sq_ij    = |q_i - k_j|^2                   (FORM, below)
    t_ij     = sq_ij iq_i ik_j                 (Poincare; iq = 1 / (1 - |q|^2))
    d2_ij    = (2 asinh sqrt t_ij)^2           (Poincare) or sq_ij (Euclidean)
    logit_ij = -log(d2_ij + eps) + log m_j     (m: per-key masses, 0 = not attended)
    W_ij     = exp(logit_ij - lse_i),          lse_i = log sum_j exp(logit_ij)

FORM of sq: 0 "difference", coordinate by coordinate from q_i - k_j (full relative accuracy
at small distances, CUDA cores); 1 "expanded", |q|^2 + |k|^2 - 2 q.k with tl.dot (tensor
cores at PREC = "tf32" / "tf32x3"; its error is eps_dot (|q|^2 + |k|^2), so it loses all
relative accuracy below that); 2 "corrected", the expanded form, with every tile that holds
a pair closer than NEAR (|q|^2 + |k|^2) recomputed by differences.

Forward (one program per query block): the online softmax of FlashAttention-2 over key
blocks; writes out and the row log-sum lse (+inf for a row with no attended key: out = 0).
Backward (FlashAttention-2's recomputation from lse, no N x M tensor): with
dS = W (dO.v_j - delta_i), delta_i = dO_i.out_i, and h = dL/dsq_ij
    dq_i = 2 sum_j h_ij (q_i - k_j),  dk_j = -2 sum_i h_ij (q_i - k_j),  dv_j = sum_i W_ij dO_i
    dm_j = sum_i exp(-log(d2_ij + eps) - lse_i) (dO_i.v_j - delta_i)  (finite at m_j = 0)
    Poincare: dL/dt = g r(t), r = d(d2)/dt, h = dL/dt iq ik; diq_i = sum_j dL/dt sq ik_j
in two kernels, one per query block (dq, diq) and one per key block (dk, dv, dm, dik), so no
atomics. The gradient through iq = 1 / (1 - |q|^2) itself is left to PyTorch's autograd.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

FORMS = {"difference": 0, "expanded": 1, "corrected": 2}
PRECISIONS = ("ieee", "tf32x3", "tf32")
# Below these t the Poincare d2 and its slope use their series (no log(1 + x) rounding):
# three terms, truncation 4 t^3 / 35 relative (1.1e-7 at t = 1e-2, 1e-16 at t = 1e-5).
_SERIES_T = {"float32": 1e-2, "float64": 1e-5}


@triton.jit
def _load_rows(ptr, rows, row_ok, cols, n_cols, ACC: tl.constexpr):
    """Tile [R, C] of a contiguous [N, n_cols] matrix (zeros outside), in ACC."""
    ok = row_ok[:, None] & (cols < n_cols)[None, :]
    return tl.load(ptr + rows[:, None] * n_cols + cols[None, :], mask=ok, other=0.0).to(ACC)


@triton.jit
def _load_keys(ptr, idx, ok, other, ACC: tl.constexpr):
    """A vector [R] of per-query or per-key entries (other outside), in ACC."""
    return tl.load(ptr + idx, mask=ok, other=other).to(ACC)


@triton.jit
def _differences_sq(q_rows, k_rows, row_ok, col_ok, dim, ACC: tl.constexpr,
                    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """|q_i - k_j|^2 [BQ, BK] accumulated coordinate by coordinate from explicit differences."""
    sq = tl.zeros([BLOCK_Q, BLOCK_K], ACC)
    for c in range(0, dim):
        qc = tl.load(q_rows + c, mask=row_ok, other=0.0).to(ACC)  # [BQ]
        kc = tl.load(k_rows + c, mask=col_ok, other=0.0).to(ACC)  # [BK]
        diff = qc[:, None] - kc[None, :]
        sq += diff * diff
    return sq


@triton.jit
def _tile_sq(q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, NEAR,
             FORM: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
             BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """(sq [BQ, BK], exact): the squared Euclidean distances of the tile in the chosen FORM,
    and whether they came from differences (then the backward contracts by differences too)."""
    if FORM == 0:
        sq = _differences_sq(q_rows, k_rows, row_ok, col_ok, dim, ACC, BLOCK_Q, BLOCK_K)
        exact = True
    else:
        q2 = tl.sum(q_tile * q_tile, axis=1)  # [BQ]
        k2 = tl.sum(k_tile * k_tile, axis=1)  # [BK]
        qk = tl.dot(q_tile, tl.trans(k_tile), input_precision=PREC)  # [BQ, BK]
        scale = q2[:, None] + k2[None, :]
        sq = tl.maximum(scale - 2.0 * qk, 0.0)
        exact = False
        if FORM == 2:  # a near pair in the tile: redo the tile by differences
            near = (sq < NEAR * scale) & row_ok[:, None] & col_ok[None, :]
            if tl.max(tl.max(near.to(tl.int32), axis=1), axis=0) > 0:
                sq = _differences_sq(q_rows, k_rows, row_ok, col_ok, dim, ACC, BLOCK_Q, BLOCK_K)
                exact = True
    return sq, exact


@triton.jit
def _geodesic_sq(sq, iq, ik, SERIES_T, POINCARE: tl.constexpr):
    """(t, d2): Poincare t = sq iq ik and d2 = (2 asinh sqrt t)^2, the square of
    log(1 + 2t + 2 sqrt(t (1 + t))) (series 4t - 4t^2/3 + 32t^3/45 below SERIES_T); Euclidean
    (sq, sq)."""
    if POINCARE:
        t = sq * iq[:, None] * ik[None, :]
        dist = tl.log(1.0 + 2.0 * t + 2.0 * tl.sqrt(t) * tl.sqrt(1.0 + t))
        series = 4.0 * t * (1.0 - t * (1.0 / 3.0 - t * (8.0 / 45.0)))
        d2 = tl.where(t < SERIES_T, series, dist * dist)
    else:
        t = sq
        d2 = sq
    return t, d2


@triton.jit
def _geodesic_slope(t, d2, SERIES_T):
    """d(d2)/dt = 2 d / sqrt(t (1 + t)) (-> 4 at t = 0; series 4 - 8t/3 + 32t^2/15)."""
    series = 4.0 - t * (8.0 / 3.0 - t * (32.0 / 15.0))
    exact = 2.0 * tl.sqrt(d2) / (tl.sqrt(t) * tl.sqrt(1.0 + t))  # t >= SERIES_T > 0 where used
    return tl.where(t < SERIES_T, series, exact)


@triton.jit
def _logits(d2, mass, col_ok, eps, HAS_MASS: tl.constexpr):
    """(logit0, logit): -log(d2 + eps) and it plus log m_j, -inf outside the keys."""
    logit0 = -tl.log(d2 + eps)
    logit = logit0
    if HAS_MASS:
        logit = logit0 + tl.log(mass)[None, :]  # log 0 = -inf: not attended
    return logit0, tl.where(col_ok[None, :], logit, float("-inf"))


@triton.jit
def _dot_pull(acc, h, own_tile, other_tile, PREC: tl.constexpr):
    """acc + 2 sum_j h_ij (own_i - other_j) = acc + 2 (h 1) own - 2 h other, on tl.dot."""
    h_other = tl.dot(h, other_tile, input_precision=PREC)  # [R, BD]
    return acc + 2.0 * (tl.sum(h, axis=1)[:, None] * own_tile - h_other)


@triton.jit
def _pull_rows(acc, h, q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, exact,
               PREC: tl.constexpr, BLOCK_D: tl.constexpr, BY_DIFF: tl.constexpr):  # fmt: skip
    """acc [BQ, BD] + 2 sum_j h_ij (q_i - k_j): coordinate by coordinate from differences
    (BY_DIFF, on tiles whose distances came from differences), else on tl.dot."""
    if BY_DIFF:
        if exact:
            dcols = tl.arange(0, BLOCK_D)
            for c in range(0, dim):
                qc = tl.load(q_rows + c, mask=row_ok, other=0.0).to(acc.dtype)  # [BQ]
                kc = tl.load(k_rows + c, mask=col_ok, other=0.0).to(acc.dtype)  # [BK]
                col = tl.sum(h * (qc[:, None] - kc[None, :]), axis=1)  # [BQ]
                acc += tl.where(dcols[None, :] == c, 2.0 * col[:, None], 0.0)
        else:
            acc = _dot_pull(acc, h, q_tile, k_tile, PREC)
    else:
        acc = _dot_pull(acc, h, q_tile, k_tile, PREC)
    return acc


@triton.jit
def _pull_cols(acc, h, q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, exact,
               PREC: tl.constexpr, BLOCK_D: tl.constexpr, BY_DIFF: tl.constexpr):  # fmt: skip
    """acc [BK, BD] + 2 sum_i h_ij (k_j - q_i), as :func:`_pull_rows` for the keys."""
    if BY_DIFF:
        if exact:
            dcols = tl.arange(0, BLOCK_D)
            for c in range(0, dim):
                qc = tl.load(q_rows + c, mask=row_ok, other=0.0).to(acc.dtype)  # [BQ]
                kc = tl.load(k_rows + c, mask=col_ok, other=0.0).to(acc.dtype)  # [BK]
                col = tl.sum(h * (kc[None, :] - qc[:, None]), axis=0)  # [BK]
                acc += tl.where(dcols[None, :] == c, 2.0 * col[:, None], 0.0)
        else:
            acc = _dot_pull(acc, tl.trans(h), k_tile, q_tile, PREC)
    else:
        acc = _dot_pull(acc, tl.trans(h), k_tile, q_tile, PREC)
    return acc


@triton.jit
def _ida_forward(
    q_ptr, k_ptr, v_ptr, iq_ptr, ik_ptr, mass_ptr, out_ptr, lse_ptr,
    n_q, n_k, dim, dim_v, eps, near, series_t,
    POINCARE: tl.constexpr, HAS_MASS: tl.constexpr, FORM: tl.constexpr, PREC: tl.constexpr,
    ACC: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """Program (query block, batch): out [BQ, dv] and lse [BQ] by the online softmax."""
    pid, b = tl.program_id(0), tl.program_id(1)
    q_ptr += b * n_q * dim
    k_ptr += b * n_k * dim
    v_ptr += b * n_k * dim_v
    rows = pid * BLOCK_Q + tl.arange(0, BLOCK_Q)  # [BQ]
    row_ok = rows < n_q
    dcols, vcols = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q_rows = q_ptr + rows * dim  # [BQ] row pointers
    q_tile = _load_rows(q_ptr, rows, row_ok, dcols, dim, ACC)  # [BQ, BD] (FORM 1, 2)
    iq = _load_keys(iq_ptr + b * n_q, rows, row_ok, 1.0, ACC) if POINCARE else 1.0
    m_i = tl.full([BLOCK_Q], float("-inf"), ACC)  # running row maximum of the logits
    l_i = tl.zeros([BLOCK_Q], ACC)  # running row sum of exp(logit - m_i)
    acc = tl.zeros([BLOCK_Q, BLOCK_DV], ACC)
    for start in range(0, n_k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)  # [BK]
        col_ok = cols < n_k
        k_tile = _load_rows(k_ptr, cols, col_ok, dcols, dim, ACC)  # [BK, BD]
        sq, exact = _tile_sq(q_rows, k_ptr + cols * dim, q_tile, k_tile, row_ok, col_ok, dim,
                             near, FORM, PREC, ACC, BLOCK_Q, BLOCK_K)  # fmt: skip
        ik = _load_keys(ik_ptr + b * n_k, cols, col_ok, 1.0, ACC) if POINCARE else 1.0
        t, d2 = _geodesic_sq(sq, iq, ik, series_t, POINCARE)
        mass = _load_keys(mass_ptr + b * n_k, cols, col_ok, 0.0, ACC) if HAS_MASS else 1.0
        logit0, logit = _logits(d2, mass, col_ok, eps, HAS_MASS)  # [BQ, BK]
        m_new = tl.maximum(m_i, tl.max(logit, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key attended yet: no nan
        p = tl.exp(logit - m_safe[:, None])  # [BQ, BK]
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_tile = _load_rows(v_ptr, cols, col_ok, vcols, dim_v, ACC)  # [BK, BDV]
        acc = acc * alpha[:, None] + tl.dot(p, v_tile, input_precision=PREC)
        m_i = m_new
    attended = l_i > 0.0
    out = tl.where(attended[:, None], acc / tl.where(attended, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(attended, m_i + tl.log(tl.where(attended, l_i, 1.0)), float("inf"))
    o_ptrs = out_ptr + b * n_q * dim_v + rows[:, None] * dim_v + vcols[None, :]
    o_ok = row_ok[:, None] & (vcols < dim_v)[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=o_ok)
    tl.store(lse_ptr + b * n_q + rows, lse, mask=row_ok)


@triton.jit
def _ida_backward_q(
    q_ptr, k_ptr, v_ptr, iq_ptr, ik_ptr, mass_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, diq_ptr,
    n_q, n_k, dim, dim_v, eps, near, series_t,
    POINCARE: tl.constexpr, HAS_MASS: tl.constexpr, FORM: tl.constexpr, PREC: tl.constexpr,
    ACC: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, BY_DIFF: tl.constexpr,
):  # fmt: skip
    """Program (query block, batch): dq [BQ, d] and diq [BQ], streaming the key blocks."""
    pid, b = tl.program_id(0), tl.program_id(1)
    q_ptr += b * n_q * dim
    k_ptr += b * n_k * dim
    v_ptr += b * n_k * dim_v
    rows = pid * BLOCK_Q + tl.arange(0, BLOCK_Q)  # [BQ]
    row_ok = rows < n_q
    dcols, vcols = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q_rows = q_ptr + rows * dim
    q_tile = _load_rows(q_ptr, rows, row_ok, dcols, dim, ACC)  # [BQ, BD]
    do_tile = _load_rows(do_ptr + b * n_q * dim_v, rows, row_ok, vcols, dim_v, ACC)  # [BQ, BDV]
    lse = tl.load(lse_ptr + b * n_q + rows, mask=row_ok, other=float("inf"))  # [BQ]
    delta = tl.load(delta_ptr + b * n_q + rows, mask=row_ok, other=0.0)  # [BQ]
    iq = _load_keys(iq_ptr + b * n_q, rows, row_ok, 1.0, ACC) if POINCARE else 1.0
    dq = tl.zeros([BLOCK_Q, BLOCK_D], ACC)
    diq = tl.zeros([BLOCK_Q], ACC)
    for start in range(0, n_k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)  # [BK]
        col_ok = cols < n_k
        k_rows = k_ptr + cols * dim
        k_tile = _load_rows(k_ptr, cols, col_ok, dcols, dim, ACC)  # [BK, BD]
        v_tile = _load_rows(v_ptr, cols, col_ok, vcols, dim_v, ACC)  # [BK, BDV]
        sq, exact = _tile_sq(q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, near,
                             FORM, PREC, ACC, BLOCK_Q, BLOCK_K)  # fmt: skip
        ik = _load_keys(ik_ptr + b * n_k, cols, col_ok, 1.0, ACC) if POINCARE else 1.0
        t, d2 = _geodesic_sq(sq, iq, ik, series_t, POINCARE)
        mass = _load_keys(mass_ptr + b * n_k, cols, col_ok, 0.0, ACC) if HAS_MASS else 1.0
        logit0, logit = _logits(d2, mass, col_ok, eps, HAS_MASS)
        w = tl.exp(logit - lse[:, None])  # [BQ, BK] the weights, recomputed
        dp = tl.dot(do_tile, tl.trans(v_tile), input_precision=PREC)  # [BQ, BK] dO_i . v_j
        g = -(w * (dp - delta[:, None])) / (d2 + eps)  # dL/d(d2)
        if POINCARE:
            g_t = g * _geodesic_slope(t, d2, series_t)  # dL/dt
            diq += tl.sum(g_t * sq * ik[None, :], axis=1)
            h = g_t * iq[:, None] * ik[None, :]  # dL/dsq
        else:
            h = g
        dq = _pull_rows(dq, h, q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, exact,
                        PREC, BLOCK_D, BY_DIFF)  # fmt: skip
    ok = row_ok[:, None] & (dcols < dim)[None, :]
    dq_ptrs = dq_ptr + b * n_q * dim + rows[:, None] * dim + dcols[None, :]
    tl.store(dq_ptrs, dq.to(dq_ptr.dtype.element_ty), mask=ok)
    if POINCARE:
        tl.store(diq_ptr + b * n_q + rows, diq, mask=row_ok)


@triton.jit
def _ida_backward_kv(
    q_ptr, k_ptr, v_ptr, iq_ptr, ik_ptr, mass_ptr, do_ptr, lse_ptr, delta_ptr,
    dk_ptr, dv_ptr, dmass_ptr, dik_ptr,
    n_q, n_k, dim, dim_v, eps, near, series_t,
    POINCARE: tl.constexpr, HAS_MASS: tl.constexpr, FORM: tl.constexpr, PREC: tl.constexpr,
    ACC: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, BY_DIFF: tl.constexpr,
):  # fmt: skip
    """Program (key block, batch): dk [BK, d], dv [BK, dv], dm [BK], dik [BK], streaming the
    query blocks."""
    pid, b = tl.program_id(0), tl.program_id(1)
    q_ptr += b * n_q * dim
    k_ptr += b * n_k * dim
    v_ptr += b * n_k * dim_v
    do_ptr += b * n_q * dim_v
    cols = pid * BLOCK_K + tl.arange(0, BLOCK_K)  # [BK]
    col_ok = cols < n_k
    dcols, vcols = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    k_rows = k_ptr + cols * dim
    k_tile = _load_rows(k_ptr, cols, col_ok, dcols, dim, ACC)  # [BK, BD]
    v_tile = _load_rows(v_ptr, cols, col_ok, vcols, dim_v, ACC)  # [BK, BDV]
    ik = _load_keys(ik_ptr + b * n_k, cols, col_ok, 1.0, ACC) if POINCARE else 1.0
    mass = _load_keys(mass_ptr + b * n_k, cols, col_ok, 0.0, ACC) if HAS_MASS else 1.0
    dk = tl.zeros([BLOCK_K, BLOCK_D], ACC)
    dv = tl.zeros([BLOCK_K, BLOCK_DV], ACC)
    dmass = tl.zeros([BLOCK_K], ACC)
    dik = tl.zeros([BLOCK_K], ACC)
    for start in range(0, n_q, BLOCK_Q):
        rows = start + tl.arange(0, BLOCK_Q)  # [BQ]
        row_ok = rows < n_q
        q_rows = q_ptr + rows * dim
        q_tile = _load_rows(q_ptr, rows, row_ok, dcols, dim, ACC)  # [BQ, BD]
        do_tile = _load_rows(do_ptr, rows, row_ok, vcols, dim_v, ACC)  # [BQ, BDV]
        lse = tl.load(lse_ptr + b * n_q + rows, mask=row_ok, other=float("inf"))  # [BQ]
        delta = tl.load(delta_ptr + b * n_q + rows, mask=row_ok, other=0.0)  # [BQ]
        iq = _load_keys(iq_ptr + b * n_q, rows, row_ok, 1.0, ACC) if POINCARE else 1.0
        sq, exact = _tile_sq(q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, near,
                             FORM, PREC, ACC, BLOCK_Q, BLOCK_K)  # fmt: skip
        t, d2 = _geodesic_sq(sq, iq, ik, series_t, POINCARE)
        logit0, logit = _logits(d2, mass, col_ok, eps, HAS_MASS)
        w = tl.exp(logit - lse[:, None])  # [BQ, BK]; 0 on padded rows (lse = inf)
        dv += tl.dot(tl.trans(w), do_tile, input_precision=PREC)  # [BK, BDV]
        dp = tl.dot(do_tile, tl.trans(v_tile), input_precision=PREC) - delta[:, None]  # [BQ, BK]
        if HAS_MASS:  # d logit / d m_j = 1 / m_j, folded in: finite at m_j = 0
            dmass += tl.sum(tl.exp(logit0 - lse[:, None]) * dp, axis=0)
        g = -(w * dp) / (d2 + eps)  # dL/d(d2)
        if POINCARE:
            g_t = g * _geodesic_slope(t, d2, series_t)  # dL/dt
            dik += tl.sum(g_t * sq * iq[:, None], axis=0)
            h = g_t * iq[:, None] * ik[None, :]  # dL/dsq
        else:
            h = g
        dk = _pull_cols(dk, h, q_rows, k_rows, q_tile, k_tile, row_ok, col_ok, dim, exact,
                        PREC, BLOCK_D, BY_DIFF)  # fmt: skip
    dk_ptrs = dk_ptr + b * n_k * dim + cols[:, None] * dim + dcols[None, :]
    dk_ok = col_ok[:, None] & (dcols < dim)[None, :]
    tl.store(dk_ptrs, dk.to(dk_ptr.dtype.element_ty), mask=dk_ok)
    dv_ptrs = dv_ptr + b * n_k * dim_v + cols[:, None] * dim_v + vcols[None, :]
    dv_ok = col_ok[:, None] & (vcols < dim_v)[None, :]
    tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=dv_ok)
    if HAS_MASS:
        tl.store(dmass_ptr + b * n_k + cols, dmass, mask=col_ok)
    if POINCARE:
        tl.store(dik_ptr + b * n_k + cols, dik, mask=col_ok)


@triton.jit
def _pair_sq(q_ptr, k_ptr, out_ptr, n_q, n_k, dim, near,
             FORM: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr, BLOCK_Q: tl.constexpr,
             BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Program (query block, key block): the kernel's |q_i - k_j|^2 tile, for measurement."""
    rows = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok, col_ok = rows < n_q, cols < n_k
    dcols = tl.arange(0, BLOCK_D)
    q_tile = _load_rows(q_ptr, rows, row_ok, dcols, dim, ACC)
    k_tile = _load_rows(k_ptr, cols, col_ok, dcols, dim, ACC)
    sq, exact = _tile_sq(q_ptr + rows * dim, k_ptr + cols * dim, q_tile, k_tile, row_ok, col_ok,
                         dim, near, FORM, PREC, ACC, BLOCK_Q, BLOCK_K)  # fmt: skip
    ok = row_ok[:, None] & col_ok[None, :]
    tl.store(out_ptr + rows[:, None] * n_k + cols[None, :], sq, mask=ok)


# --------------------------------------------------------------------------- launchers

# The kernels are interpreted when TRITON_INTERPRET=1 was set as this module was imported;
# Triton's own builtins (tl.max, ...) when triton was first imported. They must agree.
INTERPRETED = isinstance(_ida_forward, InterpretedFunction)
MODES_AGREE = INTERPRETED == isinstance(tl.max, InterpretedFunction)


def _block(n: int) -> int:
    """Padded width of a feature dim: a power of two >= 16 (tl.dot's smallest)."""
    return max(16, triton.next_power_of_2(n))


def _meta(q, config, poincare: bool, has_mass: bool) -> dict:
    """The constexprs and launch options shared by the three kernels."""
    f64 = q.dtype == torch.float64
    return dict(
        POINCARE=poincare, HAS_MASS=has_mass, FORM=FORMS[config.form], PREC=config.precision,
        ACC=tl.float64 if f64 else tl.float32, BLOCK_Q=config.block_q, BLOCK_K=config.block_k,
        num_warps=config.num_warps,
    )  # fmt: skip


def _scalars(config, eps: float, f64: bool) -> tuple[float, float, float]:
    return float(eps), float(config.near), _SERIES_T["float64" if f64 else "float32"]


def forward(q, k, v, iq, ik, mass, eps: float, config) -> tuple[torch.Tensor, torch.Tensor]:
    """out [B, Nq, dv] (q's dtype) and lse [B, Nq] (compute dtype) from contiguous q [B, Nq, d],
    k [B, Nk, d], v [B, Nk, dv], iq [B, Nq] / ik [B, Nk] (Poincare) or None, mass [B, Nk] or
    None."""
    b, n_q, dim = q.shape
    n_k, dim_v = k.shape[1], v.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty(b, n_q, dim_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, n_q, dtype=acc, device=q.device)
    dummy = lse.new_empty(1)
    meta = _meta(q, config, iq is not None, mass is not None)
    _ida_forward[(triton.cdiv(n_q, config.block_q), b)](
        q, k, v, dummy if iq is None else iq, dummy if ik is None else ik,
        dummy if mass is None else mass, out, lse,
        n_q, n_k, dim, dim_v, *_scalars(config, eps, acc == torch.float64),
        BLOCK_D=_block(dim), BLOCK_DV=_block(dim_v), **meta,
    )  # fmt: skip
    return out, lse


def backward(q, k, v, iq, ik, mass, d_out, lse, delta, eps: float, config):
    """(dq, dk, dv, diq, dik, dmass) of :func:`forward`'s output against d_out [B, Nq, dv];
    delta [B, Nq] = sum(d_out * out, -1). diq, dik, dmass are None where iq, mass are."""
    b, n_q, dim = q.shape
    n_k, dim_v = k.shape[1], v.shape[2]
    acc = lse.dtype
    d_out = d_out.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dummy = lse.new_empty(1)
    diq = torch.empty(b, n_q, dtype=acc, device=q.device) if iq is not None else None
    dik = torch.empty(b, n_k, dtype=acc, device=q.device) if iq is not None else None
    dmass = torch.empty(b, n_k, dtype=acc, device=q.device) if mass is not None else None
    meta = _meta(q, config, iq is not None, mass is not None)
    inputs = (
        q, k, v, dummy if iq is None else iq, dummy if ik is None else ik,
        dummy if mass is None else mass, d_out, lse, delta,
    )  # fmt: skip
    sizes = (n_q, n_k, dim, dim_v, *_scalars(config, eps, acc == torch.float64))
    blocks = dict(BLOCK_D=_block(dim), BLOCK_DV=_block(dim_v))
    blocks["BY_DIFF"] = config.contraction == "difference"
    _ida_backward_q[(triton.cdiv(n_q, config.block_q), b)](
        *inputs, dq, dummy if diq is None else diq, *sizes, **blocks, **meta
    )
    _ida_backward_kv[(triton.cdiv(n_k, config.block_k), b)](
        *inputs, dk, dv, dummy if dmass is None else dmass, dummy if dik is None else dik,
        *sizes, **blocks, **meta,
    )  # fmt: skip
    return dq, dk, dv, diq, dik, dmass


def pair_sq(q, k, config) -> torch.Tensor:
    """The kernels' |q_i - k_j|^2 [Nq, Nk] for q [Nq, d], k [Nk, d] (contiguous), in the
    config's form and precision: the distance forms measured on their own."""
    n_q, dim = q.shape
    n_k = k.shape[0]
    out = torch.empty(n_q, n_k, dtype=q.dtype, device=q.device)
    grid = (triton.cdiv(n_q, config.block_q), triton.cdiv(n_k, config.block_k))
    _pair_sq[grid](
        q, k, out, n_q, n_k, dim, float(config.near), FORM=FORMS[config.form],
        PREC=config.precision, ACC=tl.float64 if q.dtype == torch.float64 else tl.float32,
        BLOCK_Q=config.block_q, BLOCK_K=config.block_k, BLOCK_D=_block(dim),
        num_warps=config.num_warps,
    )  # fmt: skip
    return out
