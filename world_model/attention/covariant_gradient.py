"""A scalar covariant head read as a potential, with its gradient in closed form (seed 003
Def 287's kick force -grad Phi, Prop 101: keys as a gradient bank; docs/seed_map.md, section
"GeodesicCrossAttention world model", row "Def 287 step 1/5").

:func:`scalar_output_gradient` is a second forward pass of the head that carries, beside
Phi(z, x), dPhi/dz and dPhi/dx as ordinary tensor expressions, so training differentiates them
once (parameters, and z through earlier steps) where autograd's gradient would need a double
backward. :func:`has_closed_form_gradient` says which heads it covers; the others go through
autograd. tests/world_model/test_covariant.py::test_closed_form_potential_gradient_equals_autograd
checks values and double-backward parameter gradients against autograd.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from geometry import poincare, screening
from geometry.doublet import apply_in_channels, chiral_gate_vjp
from geometry.wilson_lines import (
    affine_endpoint_coefficients,
    affine_segment_exponents,
    affine_segment_exponents_vjp,
    line_from_integral,
    segmented_group_line,
    segmented_group_line_vjp,
)

from .context import MACRO_LEVEL
from .covariant_config import NO_TRANSPORT, CovariantAttentionConfig
from .covariant_types import CovariantQueries, PotentialHead, PreparedContext, check_queries

__all__ = ["has_closed_form_gradient", "scalar_output_gradient"]


def has_closed_form_gradient(cfg: CovariantAttentionConfig) -> bool:
    """Whether :func:`scalar_output_gradient` covers a head of this configuration: a scalar
    output (d_out 1), the softmax kernel (either temperature), the factorized or Poincare
    quadratic query without velocity terms, N_f <= 2 (every Wilson-line mode, "none"
    included), and the conformal area proxy (screening on or off)."""
    return (
        cfg.d_out == 1
        and cfg.options.kernel == "softmax"
        and cfg.options.christoffel in ("factorized", "poincare")
        and cfg.options.n_colors <= 2
        and cfg.options.area == "conformal"
        and cfg.d_velocity_features == 0
        and not cfg.position_velocity
    )


def scalar_output_gradient(
    head: PotentialHead, queries: CovariantQueries, prepared: PreparedContext
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A scalar head read as a potential Phi(z, x) = W_O chiral(sum_j alpha_j V~_j), with its
    gradients in closed form: no backward pass through the head (its cost on CPU is per-op
    overhead, and a backward doubles the op count; a double backward in training triples
    it). With a = dPhi/d out (through the chiral gate: geometry.doublet.chiral_gate_vjp):

        grad Phi = sum_j alpha_j (<a, V~_j> - <a, out>) grad l_j,
        grad l_j = J_{Q~}^T K~_j / tau - s_j grad tau / tau^2 - sigma [j charged] grad A_j,
        J_{Q~}^T y = J_psi^T (U^T y) + sum_s (dh_s/dz)^T M(h_s)^T e_s,
        e_s,g = <P_{s-1} U^T y, T_g P_{s-1} psi> = sum_b Ad(P_{s-1})[g, b] <U^T y, T_b psi>

    (Q~ = U(z) psi(z, x), U = E_S .. E_1 the segmented line with E_s = exp(h_s . T), h_s its
    pieces' exponents (geometry.wilson_lines.affine_segment_exponents: S = 1 and h_1 the
    integrated connection for exp), P_s = E_s .. E_1, M the group exponential's Jacobian:
    geometry.group_exponential.group_exp_vjp). Single queries without velocity (the kick head).

    queries: positions z [B, d], features x [B, d_query], value_grad [B, d] or chiral
    (broadcastable to [B]) | None.
    Returns (Phi [B, 1], dPhi/dz [B, d] at fixed x, dPhi/dx [B, d_query], lines [B, r, r]).
    """
    cfg = head.config
    if not has_closed_form_gradient(cfg):
        raise ValueError("this head's configuration has no closed-form gradient")
    if not queries.single or queries.velocity is not None:
        raise ValueError("scalar_output_gradient takes single queries without velocity")
    check_queries(cfg, queries, prepared)
    z, x = queries.positions, queries.features  # [B, d], [B, d_query]
    n_batch, d = z.shape
    c0, c1 = head.connection_c0, head.connection_c1  # [d, G], [d, d, G]
    group = head.group
    # U_{z->0} as affine_wilson_line_to_origin builds it, its pieces kept for the VJP:
    # b(t) = p + (1 - t) q along x(t) = (1 - t) z; first order I + sum_g (p + q / 2)_g T_g,
    # otherwise U = E_S .. E_1, E_s = exp(sum_g pieces[s]_g T_g) (S = 1 for exp)
    wilson, segments = cfg.options.wilson, cfg.options.segments
    transported = wilson != NO_TRANSPORT  # "none": U = I, no gradient through a line
    coefficients = pieces = prefixes = None
    if not transported:
        lines = head.lines_to_origin(z)  # [B, r, r] identities
    else:
        coefficients = p_coef, q_coef = affine_endpoint_coefficients(c0, c1, z)  # [B, G]
        if wilson == "first_order":
            lines = line_from_integral(group, p_coef + 0.5 * q_coef, wilson)  # [B, r, r]
        else:
            pieces = affine_segment_exponents(group, p_coef, q_coef, wilson, segments)
            lines, prefixes = segmented_group_line(group, pieces)  # [B, r, r], [S, B, F, 4]
    # psi = W_Q x + W_Qz z + c(z) Q(z), Q_c = sum_r (U_r z)_c (V_r z)_c, c = lambda or 1:
    # query_field without velocity terms, written out (not geometry.doublet.low_rank_bilinear)
    # to keep its factors U_r z, V_r z for the gradient
    rank, k = head.q_gamma_u.shape[:2]
    u_mat = head.q_gamma_u.reshape(rank * k, d)
    v_mat = head.q_gamma_v.reshape(rank * k, d)
    uz = (z @ u_mat.T).reshape(n_batch, rank, k)  # [B, R, k]
    vz = (z @ v_mat.T).reshape(n_batch, rank, k)
    quad = (uz * vz).sum(1)  # [B, k]
    # lambda, tau and the area A below are poincare.conformal_factor(z),
    # poincare.metric_temperature(z, d_k) and screening.string_area(z, z') written out on one
    # shared 1 - |z|^2 (and |z - z'|^2, which the area's gradient reuses). Calling the functions
    # gives the same values but recomputes 1 - |z|^2 per call, which changes the order in which
    # autograd sums the gradient in z when training differentiates these expressions (measured:
    # last-bit differences in d/dz of a loss on grad Phi), so the written-out form is kept.
    one_minus = poincare.one_minus_sqnorm(z)  # [B, 1]
    lam = 2.0 / one_minus  # poincare.conformal_factor(z)
    c = lam if cfg.options.christoffel == "poincare" else 1.0
    psi = head.w_q(x) + head.w_qz(z) + c * quad  # [B, k]
    q_t = apply_in_channels(lines, psi)  # [B, k]

    scores = prepared.products(q_t.unsqueeze(1)).squeeze(1)  # [B, N]
    sqrt_dk = math.sqrt(cfg.options.d_k)
    # tau = poincare.metric_temperature(z, d_k) = sqrt(d_k) (1 - |z|^2) / 2 (Thm 99)
    tau = (0.5 * sqrt_dk) * one_minus if cfg.options.temperature == "metric" else None
    logits = scores / (tau if tau is not None else sqrt_dk)
    sigma_q = charged = cols = None
    if prepared.charged and cfg.options.screening:  # on the charged entries only ([B, C])
        sigma_q = head.string_tension()[cfg.query_level]
        cols, pos_c, levels_c = prepared.charged_entries()  # [C], [Bc, C, d], [Bc, C]
        charged = (levels_c != MACRO_LEVEL).to(z.dtype)  # [Bc, C]
        delta2 = poincare.sqnorm(z.unsqueeze(1) - pos_c, keepdim=False)  # [B, C]
        area = 0.5 * lam.square() * delta2  # screening.string_area(z, z') (Def 286)
        logits = logits.index_add(-1, cols, -(sigma_q * area * charged))
    weights = prepared.softmax(logits)  # [B, N], with the entries' masses
    out = prepared.mixture(weights.unsqueeze(1)).squeeze(1)  # [B, k]

    # a = dPhi/d out: the read-out is linear without a chiral gate
    chiral = queries.projector(head)
    if chiral is None:
        phi = head.w_o(out)  # [B, 1]
        a = head.w_o.weight.expand(n_batch, -1)  # [B, k]
    else:
        phi, a = chiral_gate_vjp(
            out,
            chiral[0],
            cfg.options.n_colors,
            head.chirality_strength,
            head.w_o.weight[0],
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
    if coefficients is not None:  # through the line, <kappa, U psi> at fixed psi
        grad_z = _add_line_gradient(grad_z, head, z, psi, kappa, y, coefficients, pieces, prefixes)
    # through psi: W_Qz, the quadratic term (d lambda/dz = lambda^2 z), and W_Q x
    jq_u = (y.unsqueeze(1) * vz).reshape(n_batch, rank * k) @ u_mat  # [B, d]
    jq_v = (y.unsqueeze(1) * uz).reshape(n_batch, rank * k) @ v_mat
    jq = jq_u + jq_v  # J_Q^T y [B, d]
    grad_z = grad_z + y @ head.w_qz.weight
    if cfg.options.christoffel == "poincare":
        grad_z = grad_z + lam * jq + (y * quad).sum(-1, keepdim=True) * lam.square() * z
    else:
        grad_z = grad_z + jq
    grad_x = y @ head.w_q.weight  # [B, d_query]
    return phi, grad_z, grad_x, lines


def _add_line_gradient(
    grad_z: Tensor,
    head: PotentialHead,
    z: Tensor,
    psi: Tensor,
    kappa: Tensor,
    y: Tensor,
    coefficients: tuple[Tensor, Tensor],
    pieces: Tensor | None,
    prefixes: Tensor | None,
) -> Tensor:
    """grad_z [B, d] plus d/dz of <kappa, U(z) psi> through the Wilson line U at fixed psi.
    z [B, d]; psi, kappa, y = U^T kappa [B, k]; coefficients (p, q) [B, G] each
    (geometry.wilson_lines.affine_endpoint_coefficients); pieces, prefixes: the segmented line's
    (None: first order)."""
    p_coef, q_coef = coefficients
    cfg = head.config
    wilson, segments = cfg.options.wilson, cfg.options.segments
    gens, group = head.generators, head.group  # [G, r, r]
    r, n_gen = head.rep_dim, gens.shape[0]
    c0, c1 = head.connection_c0, head.connection_c1  # [d, G], [d, d, G]
    n_batch, d = z.shape
    # e_g = <w, T_g psi> with w = U^T kappa = y for the segmented lines (the pieces' gradients
    # follow from e by the prefixes' adjoint action, segmented_group_line_vjp); first
    # order, dU/dh_g = T_g, so w = kappa and the gradient in h = p + q / 2 is e itself
    w = kappa if wilson == "first_order" else y
    outer = w.reshape(n_batch, r, -1) @ psi.reshape(n_batch, r, -1).transpose(-1, -2)
    e = outer.reshape(n_batch, r * r) @ gens.reshape(n_gen, r * r).T  # [B, G]
    if wilson == "first_order":
        grad_p, grad_q = e, 0.5 * e
    else:
        e = segmented_group_line_vjp(group, pieces, prefixes, e)  # [S, B, G]
        grad_p, grad_q = affine_segment_exponents_vjp(group, p_coef, q_coef, wilson, segments, e)
    # dp_g/dz_m = c0[m, g], dq_g/dz_m = sum_n (c1[m, n, g] + c1[n, m, g]) z_n
    c1_sym = (c1 + c1.transpose(0, 1)).reshape(d, d * n_gen)  # [m, (n, g)]
    zq = (z.unsqueeze(-1) * grad_q.unsqueeze(-2)).reshape(n_batch, d * n_gen)  # [B, (n, g)]
    return grad_z + grad_p @ c0.T + zq @ c1_sym.T
