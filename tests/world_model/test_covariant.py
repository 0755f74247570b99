"""world_model.attention.covariant: the covariant attention head of seed 003 (Defs 280-286, 291;
Thms 98, 99, 101, 102) and its context bank.

The head is checked against (i) standard softmax attention in the degenerate limit, reached by
setting coefficients to 0 through the full code path, (ii) its own definition written out pair
by pair with the geometry functions and explicit complex 2 x 2 algebra, (iii) autograd
(gradcheck, gradients to every parameter) and (iv) the boundary of the ball.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from geometry import lie_algebra, poincare, screening, wilson_lines
from geometry.doublet import masked_softmax
from tests.conftest import ball_points
from world_model.attention.context import ContextBank
from world_model.attention.covariant import (
    CovariantAttention,
    CovariantAttentionConfig,
    CovariantQueries,
    HeadOptions,
    PreparedContext,
)
from world_model.attention.covariant_types import check_context

F64 = torch.float64
D, FQ, FK, FV, FXV, DOUT = 3, 5, 4, 6, 2, 3
WILSON_MODES = list(wilson_lines.WILSON_MODES)
CHRISTOFFEL_MODES = ["full", "factorized", "poincare"]


# The standalone head's defaults before HeadOptions took the geodesic model's (d_k 16, exp lines
# of 8 segments, chirality 0): these tests were written against them, so they keep them.
OLD_STANDALONE = dict(d_k=32, wilson="path_ordered", segments=32, chirality=1.0)
_SHAPE = {f.name for f in dataclasses.fields(CovariantAttentionConfig)} - {"options"}


def head_config(**kwargs) -> CovariantAttentionConfig:
    """A head's config from flat keywords over OLD_STANDALONE: the shape fields to the head, the
    rest to its HeadOptions."""
    kwargs = {**OLD_STANDALONE, **kwargs}
    options = HeadOptions(**{k: v for k, v in kwargs.items() if k not in _SHAPE})
    return CovariantAttentionConfig(
        **{k: v for k, v in kwargs.items() if k in _SHAPE}, options=options
    )


def make_head(dtype=F64, seed=0, **overrides) -> CovariantAttention:
    kwargs = dict(d=D, d_query=FQ, d_key=FK, d_value=FV, d_out=DOUT, d_k=16, n_colors=2)
    kwargs.update(overrides)
    torch.manual_seed(seed)
    return CovariantAttention(head_config(**kwargs)).to(dtype)


def _rand(g, *shape, dtype=F64):
    return torch.randn(*shape, generator=g, dtype=F64).to(dtype)


def make_bank(b=2, n=7, dtype=F64, seed=1, max_norm=0.9, mask=True, min_norm=0.0):
    g = torch.Generator().manual_seed(seed)
    pos = ball_points(b * n, D, max_norm, seed=seed, min_norm=min_norm).reshape(b, n, D)
    levels = torch.tensor([0, 1] * n)[:n].repeat(b, 1)  # both levels in every row
    m = None
    if mask:
        m = torch.ones(b, n, dtype=torch.bool)
        m[0, -1] = False
    return ContextBank(
        pos.to(dtype), _rand(g, b, n, FK, dtype=dtype), _rand(g, b, n, FV, dtype=dtype), levels, m
    )


def make_queries(b=2, q=3, dtype=F64, seed=2, max_norm=0.9, velocity=True, levels=True, **kw):
    g = torch.Generator().manual_seed(seed)
    pos = ball_points(b * q, D, max_norm, seed=seed + 100, **kw).reshape(b, q, D).to(dtype)
    return CovariantQueries(
        pos,
        _rand(g, b, q, FQ, dtype=dtype),
        velocity=0.3 * _rand(g, b, q, D, dtype=dtype) if velocity else None,
        velocity_features=_rand(g, b, q, FXV, dtype=dtype) if velocity else None,
        value_grad=_rand(g, b, q, D, dtype=dtype),
        levels=torch.tensor([0, 1, 0] * q)[:q].repeat(b, 1) if levels else None,
    )


FULL_OPTIONS = dict(
    d_velocity_features=FXV,
    position_velocity=True,
    string_tension=(0.8, 0.2),
    chirality=0.7,
    rank=2,
)


def _perturb_calibration(head, scale=0.05, slope=-0.1):
    """A head whose temperature has drifted from the metric one: tau(z) exp(scale + slope
    log(lambda(z) / 2)), what node 68 must catch (tests/world_model/test_diagnostics.py). The
    config has no such mode, so the instance's temperature is replaced."""
    metric = head.temperature

    def drifted(positions):
        log_half_lam = -torch.log(poincare.one_minus_sqnorm(positions)).squeeze(-1)
        return metric(positions) * torch.exp(scale + slope * log_half_lam)

    head.temperature = drifted


# --------------------------------------------------------------------------- validation


def test_invalid_configuration_and_inputs_give_one_clear_error():
    base = dict(d=D, d_query=FQ, d_key=FK, d_value=FV, d_out=DOUT)
    bad = [
        (dict(d_k=12, n_colors=2), "multiple of 4 \\* n_colors"),
        (dict(wilson="second_order"), "wilson must be one of"),
        (dict(temperature="hot"), "temperature must be one of"),
        (dict(temperature="calibrated"), "temperature must be one of"),  # measured, removed
        (dict(christoffel="riemann"), "christoffel must be one of"),
        (dict(area="volume"), "area must be one of"),
        (dict(string_tension=(1.0,)), "one sigma per level"),
        (dict(string_tension=(1.0, -0.1)), "finite and >= 0"),
        (dict(query_level=2), "query_level must lie in"),
        (dict(d=0), "d must be an int >= 1"),
        (dict(segments=0), "segments must be an int >= 1"),
        (dict(g_2=math.nan), "g_2 must be finite"),
    ]
    for overrides, match in bad:
        with pytest.raises(ValueError, match=match):
            head_config(**{**base, **overrides})

    bank = make_bank()
    pos, kf, vf, lv = bank.positions, bank.key_features, bank.value_features, bank.levels
    with pytest.raises(ValueError, match="positions must be \\[B, N, d\\]"):
        ContextBank(pos[0], kf, vf, lv)
    with pytest.raises(ValueError, match="key_features must be \\[B, N, F\\]"):
        ContextBank(pos, kf[:, :3], vf, lv)
    with pytest.raises(ValueError, match="levels must be an integer tensor"):
        ContextBank(pos, kf, vf, lv.double())
    with pytest.raises(ValueError, match="levels must be >= 0"):
        ContextBank(pos, kf, vf, -lv)
    with pytest.raises(ValueError, match="mask must be a bool"):
        ContextBank(pos, kf, vf, lv, torch.ones(2, 7))
    with pytest.raises(ValueError, match="inside the unit ball"):
        ContextBank(pos * 2, kf, vf, lv)
    # a broadcast bank (expand's stride-0 rows) is checked on its one row, as strictly
    one = ContextBank(pos[:1], kf[:1], vf[:1], lv[:1]).expand(5)
    assert one.positions.stride(0) == 0 and one.batch_size == 5
    outside = (pos[:1] / pos[:1].norm(dim=-1, keepdim=True)).expand(5, -1, -1)  # |z| = 1
    with pytest.raises(ValueError, match="inside the unit ball"):
        ContextBank(outside, one.key_features, one.value_features, one.levels)
    with pytest.raises(ValueError, match="levels must be >= 0"):
        ContextBank(one.positions, one.key_features, one.value_features, -1 - one.levels)
    with pytest.raises(ValueError, match="inside the unit ball"):  # a row past the first, unshared
        ContextBank(torch.cat([pos[:1], outside[:1]]), kf, vf, lv)

    q = make_queries()
    with pytest.raises(ValueError, match="positions must be \\[B, d\\] or \\[B, Q, d\\]"):
        CovariantQueries(q.positions[0, 0], q.features[0, 0])
    with pytest.raises(ValueError, match="features must have leading shape"):
        CovariantQueries(q.positions, q.features[:, :2])
    with pytest.raises(ValueError, match="inside the unit ball"):
        CovariantQueries(q.positions / q.positions.norm(dim=-1, keepdim=True), q.features)
    with pytest.raises(ValueError, match="levels must be an integer tensor"):
        CovariantQueries(q.positions, q.features, levels=torch.zeros(2, 3))

    head = make_head()
    with pytest.raises(ValueError, match="expects d_key"):
        head(q, ContextBank(pos, torch.cat([kf, kf], -1), vf, lv))
    with pytest.raises(ValueError, match="context levels must lie in"):
        head(q, ContextBank(pos, kf, vf, lv + 1))
    with pytest.raises(ValueError, match="batch size 2 must be 1"):
        head(make_queries(b=3), bank)
    with pytest.raises(ValueError, match="query levels must lie in"):
        head(CovariantQueries(q.positions, q.features, levels=q.levels + 2), bank)
    with pytest.raises(ValueError, match="W_Qv term"):
        make_head(d_velocity_features=FXV)(make_queries(velocity=False), bank)


# --------------------------------------------------------------------------- degenerate limit


def _degenerate_head(dtype, wilson, christoffel):
    """Couplings 0 (Wilson lines = I exactly), constant temperature, geometric query terms 0,
    sigma = 0, kappa = 0: coefficients, not bypass flags; the whole code path still runs."""
    head = make_head(
        dtype,
        wilson=wilson,
        christoffel=christoffel,
        g_s=0.0,
        g_2=0.0,
        g_1=0.0,
        temperature="constant",
        string_tension=(0.0, 0.0),
        chirality=0.0,
        position_velocity=True,
    )
    with torch.no_grad():
        head.w_qz.weight.zero_()
        for name, p in head.named_parameters():
            if name.startswith(("q_gamma", "q_zv", "w_q_gamma", "w_q_zv", "w_q_christoffel")):
                p.zero_()
    return head


@pytest.mark.parametrize("christoffel", CHRISTOFFEL_MODES)
@pytest.mark.parametrize("wilson", WILSON_MODES)
def test_degenerate_limit_is_standard_softmax_attention(dtype, wilson, christoffel):
    """Seed 003 'The Degenerate Limit': the head equals W_O softmax(QK^T / sqrt(d_k)) V
    (torch's scaled_dot_product_attention as the reference) to 1e-6."""
    head = _degenerate_head(dtype, wilson, christoffel)
    bank, q = make_bank(dtype=dtype), make_queries(dtype=dtype)  # both levels, a mask, grad V
    out, rec = head(q, bank)
    ref_q = q.features @ head.w_q.weight.T  # [B, Q, d_k]
    ref_k = bank.key_features @ head.w_k.weight.T
    ref_v = bank.value_features @ head.w_v.weight.T
    ref = F.scaled_dot_product_attention(ref_q, ref_k, ref_v, attn_mask=bank.mask[:, None, :])
    ref_w = torch.softmax(
        (ref_q @ ref_k.transpose(-1, -2) / math.sqrt(16)).masked_fill(~bank.mask[:, None], -1e30),
        -1,
    )
    tol = dict(rtol=0.0, atol=1e-6) if dtype == torch.float32 else dict(rtol=0.0, atol=1e-12)
    torch.testing.assert_close(out, ref @ head.w_o.weight.T, **tol)
    torch.testing.assert_close(rec.weights, ref_w, **tol)
    assert rec.projectors is not None  # the chiral gate ran, with kappa = 0


# --------------------------------------------------------------------------- the definition


PAULI = np.array([[[0, 1], [1, 0]], [[0, -1j], [1j, 0]], [[1, 0], [0, -1]]], dtype=complex)


def _reference_forward(head: CovariantAttention, q: CovariantQueries, bank: ContextBank):
    """The head's definition evaluated pair by pair (float64, numpy for the doublet algebra):
    d_k x d_k Wilson lines from the full-representation generators of geometry.lie_algebra,
    pairwise transport U(z <- z') = U_{z->0}^T U_{z'->0}, Def 286's multiply-then-renormalise
    screening, explicit Pauli matrices and per-(colour, channel) commitment gating."""
    cfg, opt = head.config, head.config.options
    k, m = opt.d_k, opt.d_k // (4 * opt.n_colors)
    t = {n: p.detach() for n, p in head.named_parameters()}
    # the connection in the full d_k-dim representation (the head works in the minimal one)
    full = lie_algebra.gauge_generators(k, opt.n_colors, opt.hypercharge, dtype=F64)
    full = full.stacked(opt.g_s, opt.g_2, opt.g_1)
    conn = wilson_lines.affine_connection(full, t["connection_c0"], t["connection_c1"])
    sigma = t["screening_coupling"] ** 2
    b_n, q_n, n_n = q.positions.shape[0], q.positions.shape[1], bank.size
    outs = torch.zeros(b_n, q_n, cfg.d_out, dtype=F64)
    weights = torch.zeros(b_n, q_n, n_n, dtype=F64)

    def line(x):
        return wilson_lines.wilson_line(
            conn, x, torch.zeros_like(x), opt.wilson, opt.segments
        ).detach()

    for b in range(b_n):
        for i in range(q_n):
            z, v = q.positions[b, i], q.velocity[b, i]
            lam = 2.0 / (1.0 - z @ z)
            gamma_vv = lam * (2 * (z @ v) * v - (v @ v) * z)  # Prop 19 closed form
            psi_q = (
                t["w_q.weight"] @ q.features[b, i]
                + t["w_qz.weight"] @ z
                + t["w_qv.weight"] @ q.velocity_features[b, i]
                + lam * ((t["q_gamma_u"] @ z) * (t["q_gamma_v"] @ z)).sum(0)
                + t["w_q_christoffel.weight"] @ gamma_vv
                + ((t["q_zv_u"] @ z) * (t["q_zv_v"] @ v)).sum(0)
            )
            u_z = line(z)
            tau = math.sqrt(k) / lam  # Thm 99
            scores, screen, valid = [], [], []
            for j in range(n_n):
                zj = bank.positions[b, j]
                pair = wilson_lines.compose_via_origin(u_z, line(zj))
                scores.append(psi_q @ pair @ (t["w_k.weight"] @ bank.key_features[b, j]))
                area = 0.5 * lam**2 * ((z - zj) @ (z - zj))
                charged = int(bank.levels[b, j]) != 0
                screen.append(torch.exp(-sigma[q.levels[b, i]] * area) if charged else 1.0)
                valid.append(bool(bank.mask[b, j]))
            s = torch.stack(scores) / tau
            s = s.masked_fill(~torch.tensor(valid), -math.inf)
            alpha = torch.softmax(s, 0) * torch.tensor(screen, dtype=F64)
            alpha = alpha / alpha.sum()
            weights[b, i] = alpha
            out = sum(
                alpha[j]
                * line(bank.positions[b, j])
                @ (t["w_v.weight"] @ bank.value_features[b, j])
                for j in range(n_n)
            )
            # chirality: complex doublet psi[c, s, j], Pi = (I + n.sigma)/2
            o = out.numpy()
            psi = (o[: k // 2] + 1j * o[k // 2 :]).reshape(opt.n_colors, 2, m)
            n_vec = (t["value_grad_proj.weight"] @ q.value_grad[b, i]).numpy()
            n_hat = n_vec / np.linalg.norm(n_vec)
            proj = 0.5 * (np.eye(2) + np.einsum("a,aij->ij", n_hat, PAULI))
            kappa = float(t["chirality_strength"])
            for c in range(opt.n_colors):
                for ch in range(m):
                    phi = psi[c, :, ch]
                    commit = np.real(phi.conj() @ proj @ phi) / np.real(phi.conj() @ phi)
                    psi[c, :, ch] = phi + kappa * (commit * (proj @ phi) - phi)
            flat = psi.reshape(-1)
            real = torch.from_numpy(np.concatenate([flat.real, flat.imag]))
            outs[b, i] = t["w_o.weight"] @ real
    return outs, weights


@pytest.mark.parametrize("wilson", WILSON_MODES)
def test_head_equals_its_definition_pair_by_pair(wilson):
    head = make_head(wilson=wilson, segments=4, **FULL_OPTIONS)
    bank, q = make_bank(), make_queries()
    out, rec = head(q, bank)
    ref_out, ref_w = _reference_forward(head, q, bank)
    torch.testing.assert_close(rec.weights, ref_w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(head.scores(q, bank), rec.scores, rtol=1e-12, atol=1e-12)
    # the record's other fields: lambda(z) = 2 / (1 - |z|^2), tau = sqrt(d_k) / lambda (Thm 99)
    lam = 2 / (1 - q.positions.square().sum(-1))
    torch.testing.assert_close(rec.conformal, lam, rtol=1e-14, atol=0)
    torch.testing.assert_close(rec.tau, 4.0 / lam, rtol=1e-14, atol=0)
    torch.testing.assert_close(rec.logits, rec.scores * lam.unsqueeze(-1) / 4.0)
    projectors, degenerate = head.chiral_projector(q.value_grad)
    assert torch.equal(rec.projectors, projectors) and torch.equal(rec.degenerate, degenerate)
    assert torch.equal(rec.query_levels, q.levels) and torch.equal(rec.entry_levels, bank.levels)
    assert torch.equal(rec.mask, bank.mask) and rec.d_k == 16


def test_full_and_factorized_quadratic_query_terms():
    """Def 283's W(z, z) as a full 3-tensor and Def 291's rank-R factorisation: the rank-R
    parameters, expanded to a full tensor W^c_ij = sum_r U_r[c, i] V_r[c, j], give the same
    query field; 'full' mode evaluates that tensor."""
    fact = make_head(christoffel="factorized", position_velocity=True, rank=3)
    full = make_head(christoffel="full", position_velocity=True)
    with torch.no_grad():
        for name in ("w_q.weight", "w_qz.weight"):
            full.get_parameter(name).copy_(fact.get_parameter(name))
        full.w_q_gamma.copy_(torch.einsum("rci,rcj->cij", fact.q_gamma_u, fact.q_gamma_v))
        full.w_q_zv.copy_(torch.einsum("rci,rcj->cij", fact.q_zv_u, fact.q_zv_v))
    q = make_queries(velocity=True)
    q_nov = CovariantQueries(q.positions, q.features, velocity=q.velocity)
    torch.testing.assert_close(full.query_field(q_nov), fact.query_field(q_nov))


# --------------------------------------------------------------------------- caching


def test_prepared_context_equals_unprepared_with_one_wilson_line_per_entry_and_query(monkeypatch):
    head = make_head(**FULL_OPTIONS)
    shared = make_bank(b=1, n=9, mask=False)  # one bank for the whole batch (planning)
    q = make_queries(b=4, q=3)
    calls = []
    real = wilson_lines.affine_wilson_line_to_origin  # the head's own connection: closed-form path

    def counting(group, c0, c1, z, mode, segments):
        calls.append(z.shape[:-1].numel())
        return real(group, c0, c1, z, mode, segments)

    monkeypatch.setattr(wilson_lines, "affine_wilson_line_to_origin", counting)
    prepared = head.prepare(shared)
    assert calls == [9]  # one line per context entry, for keys and values together
    out_p, rec_p = head(q, prepared)
    assert calls == [9, 4 * 3]  # one line per query; never one per (query, entry) pair
    half_a, _ = head(CovariantQueries(*(t[:2] for t in _fields(q))), prepared)
    half_b, _ = head(CovariantQueries(*(t[2:] for t in _fields(q))), prepared)
    assert calls == [9, 12, 6, 6]
    out_u, rec_u = head(q, shared)
    torch.testing.assert_close(out_p, out_u, rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([half_a, half_b]), out_p, rtol=1e-12, atol=1e-14)
    # the shared bank broadcasts exactly like its expanded copy
    out_e, rec_e = head(q, shared.expand(4))
    torch.testing.assert_close(out_e, out_u, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(rec_e.weights, rec_u.weights, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="^re-scoring under another gauge needs the ContextBank$"):
        head.scores(q, prepared, field_map=lambda z, psi: psi)
    with pytest.raises(ValueError, match="needs the ContextBank"):
        head.scores(q, prepared, connection=lambda z: torch.zeros(*z.shape[:-1], 3))
    torch.testing.assert_close(head.scores(q, prepared), head.scores(q, shared), rtol=0, atol=0)
    cut = rec_u.detach()  # a record cut from the graph keeps every value
    assert any(v.requires_grad for v in vars(rec_u).values() if isinstance(v, torch.Tensor))
    for name, value in vars(rec_u).items():
        if isinstance(value, torch.Tensor):
            assert not getattr(cut, name).requires_grad and torch.equal(getattr(cut, name), value)
        else:
            assert getattr(cut, name) == value


@pytest.mark.parametrize("mode", ["none", "first_order", "exp", "path_ordered", "magnus4"])
def test_lines_from_the_generic_path_equal_the_group_path_in_every_wilson_mode(mode):
    """lines_to_origin through the head's own connection (closed-form group path) and through
    the same connection passed in (geometry.wilson_lines' generic path) agree in each Wilson
    mode, one line [r, r] per point (the identity for "none")."""
    head = make_head(wilson=mode)
    z = make_queries().positions  # [B, Q, d]
    own, generic = head.lines_to_origin(z), head.lines_to_origin(z, head.connection())
    assert own.shape == generic.shape == (*z.shape[:-1], head.rep_dim, head.rep_dim)
    torch.testing.assert_close(generic, own, rtol=1e-10, atol=1e-12)


def _fields(q: CovariantQueries):
    return [q.positions, q.features, q.velocity, q.velocity_features, q.value_grad, q.levels]


def test_single_queries_and_concatenated_banks():
    head = make_head(**FULL_OPTIONS)
    macro = ContextBank.at_level(*(t[:1, :4] for t in _bank_tensors(make_bank(b=1))), level=0)
    texture = make_bank(b=3, n=5, seed=4)
    both = ContextBank.cat([macro, texture])
    assert both.positions.shape == (3, 9, D) and both.mask.shape == (3, 9)
    assert both.mask[:, :4].all() and (both.levels[:, :4] == 0).all()
    torch.testing.assert_close(both.mask[:, 4:], texture.mask)
    q = make_queries(b=3, q=1)
    single = CovariantQueries(*(None if t is None else t[:, 0] for t in _fields(q)))
    out_1, rec_1 = head(single, both)
    out_m, rec_m = head(q, both)
    assert out_1.shape == (3, DOUT) and rec_1.weights.shape == (3, 1, 9)
    torch.testing.assert_close(out_1, out_m[:, 0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="incompatible batch sizes"):
        ContextBank.cat([texture, make_bank(b=2)])


def _bank_tensors(bank):
    return bank.positions, bank.key_features, bank.value_features


# --------------------------------------------------------------------------- screening


def test_screening_is_defs_286_multiply_and_renormalise_with_macro_entries_exempt():
    head = make_head(**FULL_OPTIONS)
    bank, q = make_bank(), make_queries()
    _, rec = head(q, bank)
    with torch.no_grad():
        sigma = head.string_tension().clone()
        head.screening_coupling.zero_()
        _, bare = head(q, bank)
    area = screening.pairwise_string_area(q.positions, bank.positions)  # [B, Q, N]
    factor = screening.screening_factor(area, sigma[q.levels].unsqueeze(-1))
    factor = torch.where(bank.levels.unsqueeze(-2) == 0, torch.ones_like(factor), factor)
    expected = bare.weights * factor
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(rec.weights, expected, rtol=1e-10, atol=1e-14)
    # macro entries keep their bare odds against each other: screening only touches texture
    macro = (bank.levels[0] == 0) & bank.mask[0]
    ratio = rec.weights[0][:, macro] / bare.weights[0][:, macro]
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))


def test_hard_screening_stays_finite_where_multiply_and_renormalise_gives_nan():
    """sigma A beyond the float range: exp(-sigma A) underflows to 0 for every texture entry,
    so a texture-only row is 0 / 0 in the seed's form; the log-space form keeps the weights of
    the least-screened entry."""
    head = make_head(string_tension=(1e6, 1e6))
    bank = make_bank(b=1, n=5, mask=False)
    bank = ContextBank(
        bank.positions, bank.key_features, bank.value_features, torch.ones_like(bank.levels)
    )
    q = make_queries(b=1, q=2, levels=False)
    out, rec = head(q, bank)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(rec.weights.sum(-1), torch.ones(1, 2, dtype=F64))
    area = screening.pairwise_string_area(q.positions, bank.positions)
    with torch.no_grad():
        head.screening_coupling.zero_()
        _, bare = head(q, bank)
    naive = bare.weights * screening.screening_factor(area, 1e6)
    assert (naive.sum(-1) == 0).all()  # every factor underflowed: renormalising is 0 / 0
    # the weight goes to the entry with the smallest area
    assert (rec.weights.argmax(-1) == area.argmin(-1)).all()


def test_geodesic_area_option():
    head = make_head(area="geodesic", **FULL_OPTIONS)
    bank, q = make_bank(), make_queries()
    pen = head.screening_penalty(q.positions, bank.positions, q.levels, bank.levels)
    d_g = poincare.pairwise_dist(q.positions, bank.positions)
    sigma = head.string_tension()[q.levels].unsqueeze(-1)
    expected = sigma * 0.5 * d_g**2 * (bank.levels != 0).unsqueeze(-2)
    torch.testing.assert_close(pen, expected)


def test_masked_rows_give_zero_output_and_no_nan():
    head = make_head(**FULL_OPTIONS)
    bank = make_bank()
    bank.mask[1] = False
    q = make_queries()
    params = list(head.parameters())
    out, rec = head(q, bank)
    assert (out[1] == 0).all() and (rec.weights[1] == 0).all()
    grads = torch.autograd.grad(out.sum(), params, allow_unused=True)
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    w = masked_softmax(torch.zeros(2, 3), torch.tensor([[True, False, True], [False] * 3]))
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]))


# --------------------------------------------------------------------------- autograd


@pytest.mark.parametrize("christoffel", CHRISTOFFEL_MODES)
def test_gradients_reach_every_parameter(christoffel):
    """With every optional query term and without them (no W_Qv, no W_Qzv: a head has only the
    parameters its terms use)."""
    for options in (FULL_OPTIONS, {}):
        head = make_head(christoffel=christoffel, **options)
        bank, q = make_bank(), make_queries()  # macro and texture queries and entries
        out, _ = head(q, bank)
        names, params = zip(*head.named_parameters(), strict=True)
        grads = torch.autograd.grad(out.square().sum(), params, allow_unused=True)
        dead = [n for n, g in zip(names, grads, strict=True) if g is None or g.abs().sum() == 0]
        assert not dead, dead
        assert all(torch.isfinite(g).all() for g in grads)


def test_float64_gradcheck_on_a_small_head():
    """Inputs (query and entry positions, features, velocity, value gradient) and every
    parameter, through each Wilson-line mode, by random projections of the Jacobian (gradcheck
    fast mode; the full Jacobian in all ~450 parameters takes minutes on the shared 2 cores),
    plus the full Jacobian in the geometric inputs (positions, velocity, value gradient)."""
    for wilson in WILSON_MODES:
        head = make_head(d_k=8, segments=2, wilson=wilson, **FULL_OPTIONS)
        bank, q = make_bank(b=1, n=3), make_queries(b=1, q=2)
        names, params = zip(*head.named_parameters(), strict=True)
        params = tuple(p.detach().clone().requires_grad_(True) for p in params)
        inputs = (
            q.positions.clone().requires_grad_(True),
            q.features.clone().requires_grad_(True),
            q.velocity.clone().requires_grad_(True),
            q.value_grad.clone().requires_grad_(True),
            bank.positions.clone().requires_grad_(True),
            bank.value_features.clone().requires_grad_(True),
        )

        def fn(zq, xq, vq, gq, zk, xv, *ps, names=names, head=head, q=q, bank=bank):
            queries = CovariantQueries(zq, xq, vq, q.velocity_features, gq, q.levels)
            ctx = ContextBank(zk, bank.key_features, xv, bank.levels, bank.mask)
            out, _ = functional_call(head, dict(zip(names, ps, strict=True)), (queries, ctx))
            return out

        # every input and parameter element (fast mode: random projections of the Jacobian)
        assert torch.autograd.gradcheck(fn, inputs + params, atol=1e-5, fast_mode=True), wilson
        if wilson == "path_ordered":  # the full Jacobian in the geometric inputs
            rest = [t.detach() for t in (inputs[1], inputs[5], *params)]

            def geo(zq, vq, gq, zk, fn=fn, rest=rest):
                return fn(zq, rest[0], vq, gq, zk, rest[1], *rest[2:])

            geo_inputs = (inputs[0], inputs[2], inputs[3], inputs[4])
            assert torch.autograd.gradcheck(geo, geo_inputs, atol=1e-5)


@pytest.mark.parametrize("christoffel", ["full", "poincare"])
@pytest.mark.parametrize("wilson", WILSON_MODES)
def test_finite_values_and_gradients_near_the_boundary(wilson, christoffel):
    """float32, queries and entries with |z| up to 1 - 1e-5 (lambda ~ 1e5, tau ~ 1e-5)."""
    f32 = torch.float32
    head = make_head(f32, wilson=wilson, christoffel=christoffel, **FULL_OPTIONS)
    bank = make_bank(dtype=f32, max_norm=1 - 1e-5, min_norm=0.99)
    q = make_queries(dtype=f32, max_norm=1 - 1e-5, min_norm=0.999)
    radii = torch.tensor([1 - 1e-5, 1 - 1e-4, 0.999], dtype=F64)
    pos = q.positions.detach().double()
    pos = (pos / pos.norm(dim=-1, keepdim=True) * radii[: pos.shape[1], None]).to(f32)
    assert pos.norm(dim=-1).max() > 1 - 2e-5
    zq = pos.requires_grad_(True)
    zk = bank.positions.clone().requires_grad_(True)
    queries = CovariantQueries(
        zq, q.features, q.velocity, q.velocity_features, q.value_grad, q.levels
    )
    out, rec = head(
        queries, ContextBank(zk, bank.key_features, bank.value_features, bank.levels, bank.mask)
    )
    assert torch.isfinite(out).all() and torch.isfinite(rec.weights).all()
    assert torch.isfinite(rec.tau).all() and (rec.tau > 0).all()
    params = list(head.parameters())
    grads = torch.autograd.grad(out.sum(), [zq, zk, *params], allow_unused=True)
    assert all(g is None or torch.isfinite(g).all() for g in grads)


# --------------------------------------------------------------------------- attention kernels


def _transported(head, q, bank):
    """Q~, K~, V~ at the origin, from the head's own pieces."""
    prepared = head.prepare(bank)
    q_t = head._transported_query(q.multi())
    return q_t, prepared


def test_inverse_distance_kernel_is_hida_on_the_positions():
    """kernel='inverse_distance': weights (d_H(z, z')^2 + eps)^-1 normalised (seed 000 Def 5.1),
    on transported values; equals ida.inverse_distance_attention on a macro-only bank."""
    from world_model.attention import ida

    head = make_head(kernel="inverse_distance", ida_eps=0.05)
    bank = make_bank(mask=False)
    bank = ContextBank(
        bank.positions, bank.key_features, bank.value_features, torch.zeros_like(bank.levels)
    )  # macro: no screening
    q = make_queries(velocity=False, levels=False)
    q = CovariantQueries(q.positions, q.features)
    out, rec = head(q, bank)
    prepared = head.prepare(bank)
    ref, w = ida.inverse_distance_attention(
        q.positions, bank.positions, prepared.values, 0.05, "poincare"
    )
    torch.testing.assert_close(rec.weights, w, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out, head.w_o(ref), rtol=1e-9, atol=1e-12)
    assert rec.tau is None
    assert rec.projectors is None and rec.degenerate is None  # no value gradient: no gate


def test_krr_kernel_is_kernel_ridge_regression_on_the_transported_fields():
    """kernel='krr': out = K_qk (K_kk + lam I)^-1 V~ (seed 001 §3, SPD form), equal to
    krr.krr_attention's direct solve; the system is solved once per prepared bank."""
    from world_model.attention import krr

    head = make_head(kernel="krr", krr_kernel="rbf", krr_lambda=0.3)
    bank = make_bank(mask=True)
    q = make_queries(velocity=False, levels=False)
    q = CovariantQueries(q.positions, q.features)
    out, rec = head(q, bank)
    q_t, prepared = _transported(head, q, bank)
    ref, w, _ = krr.krr_attention(
        q_t,
        prepared.keys,
        prepared.values,
        head.ridge_lambda(),
        mask=bank.mask.unsqueeze(-2),
        kernel="rbf",
        solver="cholesky",
        need_weights=True,
    )
    torch.testing.assert_close(rec.weights, w, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(out, head.w_o(ref), rtol=1e-8, atol=1e-10)
    (out.square().sum()).backward()
    assert torch.isfinite(head.krr_lambda_raw.grad) and head.krr_lambda_raw.grad != 0


@pytest.mark.parametrize("kernel", ["inverse_distance", "krr"])
def test_other_kernels_keep_gauge_invariance_and_finite_gradients(kernel):
    from world_model.diagnostics import run_diagnostics

    head = make_head(kernel=kernel, wilson="path_ordered", segments=64)
    bank, q = make_bank(), make_queries()
    out, rec = head(q, bank)
    assert torch.isfinite(out).all()
    reports = {r.node: r for r in run_diagnostics(head, q, bank, rec, emit=False)}
    assert 68 not in reports  # no temperature to check
    assert reports[67].value < 1e-3


def _potential_head(**overrides) -> CovariantAttention:
    head = make_head(
        d_out=1, query_velocity=False, chirality=0.7, string_tension=(0.5, 0.8), **overrides
    )
    with torch.no_grad():  # away from the initialisation's zeros and symmetries
        g = torch.Generator().manual_seed(11)
        for p in head.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return head


@pytest.mark.parametrize(
    "wilson, segments, screening",
    [("exp", 1, True), ("first_order", 1, True), ("path_ordered", 3, True), ("magnus4", 1, True)]
    + [("magnus4", 3, True), ("none", 1, True), ("magnus4", 3, False)],  # the last two: ablations
)
@pytest.mark.parametrize("christoffel", ["factorized", "poincare"])
@pytest.mark.parametrize("temperature", ["metric", "constant"])
@pytest.mark.parametrize("shared_bank", [True, False])
def test_closed_form_potential_gradient_equals_autograd(
    wilson, segments, screening, christoffel, temperature, shared_bank
):
    """scalar_output_gradient: Phi equals the head's output, and dPhi/dz, dPhi/dx equal
    autograd's, with the chiral gate on and off, masked and colour-charged entries, a shared
    (Bc = 1) or per-query bank; and with create_graph, the parameter gradients of a loss on
    the gradient equal autograd's double backward (what training differentiates)."""
    head = _potential_head(
        wilson=wilson,
        segments=segments,
        screening=screening,
        christoffel=christoffel,
        temperature=temperature,
    )
    bank = make_bank(b=1 if shared_bank else 4, n=7)
    assert head.has_closed_form_gradient()
    prepared = head.prepare(bank)
    q = make_queries(b=4, q=1, velocity=False, levels=False)
    z, x, vg = q.positions[:, 0], q.features[:, 0], q.value_grad[:, 0]
    for value_grad in (None, vg):
        zr, xr = z.clone().requires_grad_(True), x.clone().requires_grad_(True)
        queries = CovariantQueries(zr, xr, value_grad=value_grad)
        ref, _ = head(queries, head.prepare(bank))
        gz, gx = torch.autograd.grad(ref.sum(), (zr, xr), create_graph=True)
        phi, cz, cx, lines = head.scalar_output_gradient(queries, prepared)
        torch.testing.assert_close(phi, ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(cz, gz, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(cx, gx, rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(lines, head.lines_to_origin(z), rtol=1e-12, atol=1e-12)
        params = [p for p in head.parameters() if p.requires_grad]
        want = torch.autograd.grad(
            (gz.square().sum() + gz.sum() * gx.sum()),
            params + [zr],
            allow_unused=True,
            retain_graph=True,
        )
        prepared = head.prepare(bank)  # a fresh graph for the closed form's own backward
        zr2 = z.clone().requires_grad_(True)
        _, cz, cx, _ = head.scalar_output_gradient(
            CovariantQueries(zr2, xr, value_grad=value_grad), prepared
        )
        got = torch.autograd.grad(
            (cz.square().sum() + cz.sum() * cx.sum()), params + [zr2], allow_unused=True
        )
        for w, g_ in zip(want, got, strict=True):
            if w is None:
                assert g_ is None or not g_.abs().max() > 0
            else:
                torch.testing.assert_close(g_, w, rtol=1e-8, atol=1e-10)


def test_closed_form_gradient_is_refused_where_it_does_not_apply():
    for overrides in (
        dict(kernel="krr"),
        dict(christoffel="full"),
        dict(area="geodesic"),
        dict(n_colors=3, d_k=24),
    ):
        head = _potential_head(**overrides)
        assert not head.has_closed_form_gradient()
        q = make_queries(b=2, q=1, velocity=False, levels=False)
        single = CovariantQueries(q.positions[:, 0], q.features[:, 0])
        with pytest.raises(ValueError, match="closed-form"):
            head.scalar_output_gradient(single, head.prepare(make_bank()))
    assert not make_head(d_out=3, query_velocity=False).has_closed_form_gradient()


def test_a_precomputed_shared_chiral_projector_equals_the_per_query_one():
    """queries.chiral (computed once, batch 1, broadcast) gives the same output as value_grad
    repeated over the batch (what GeodesicContext.chiral_for relies on)."""
    head = make_head(chirality=0.7, query_velocity=False)
    bank = make_bank(b=1)
    q = make_queries(b=4, q=1, velocity=False, levels=False)
    z, x = q.positions[:, 0], q.features[:, 0]
    vg = q.value_grad[:1, 0]  # [1, d]
    ref, _ = head(CovariantQueries(z, x, value_grad=vg.expand(4, -1)), bank)
    for chiral in (head.chiral_projector(vg), head.chiral_inputs(vg)):  # with its operator
        out, rec = head(CovariantQueries(z, x, chiral=chiral), bank)
        torch.testing.assert_close(out, ref)
        assert rec.projectors.shape[0] == 1  # computed once
    potential = _potential_head(wilson="exp", christoffel="poincare", temperature="metric")
    prepared = potential.prepare(bank)
    ref = potential.scalar_output_gradient(
        CovariantQueries(z, x, value_grad=vg.expand(4, -1)), prepared
    )
    got = potential.scalar_output_gradient(
        CovariantQueries(z, x, chiral=potential.chiral_inputs(vg)), prepared
    )
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b)


def test_a_shared_and_a_per_sample_bank_joined_after_preparing_equal_the_joined_bank():
    """PreparedContext.cat of a shared (B = 1) bank and a per-sample one: the head contracts
    part by part (blocks), and its output, the closed-form potential gradient, and the fields
    joined on first read equal those of preparing the joined ContextBank, with grad enabled
    (the broadcast contractions) and without (batched products)."""
    head = _potential_head(wilson="exp", christoffel="poincare", temperature="metric")
    shared = ContextBank.at_level(*(t[:1, :5] for t in _bank_tensors(make_bank(b=1))), level=0)
    window = make_bank(b=4, n=3, seed=6)
    joined_bank = ContextBank.cat([shared, window])
    q = make_queries(b=4, q=1, velocity=False, levels=False)
    z, x, vg = q.positions[:, 0], q.features[:, 0], q.value_grad[:, 0]
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            parts = PreparedContext.cat([head.prepare(shared), head.prepare(window)])
            whole = head.prepare(joined_bank)
            assert parts.blocks is not None and parts._keys is None  # not joined yet
            queries = CovariantQueries(z.clone().requires_grad_(grad), x, value_grad=vg)
            out_parts, _ = head(queries, parts)
            out_whole, _ = head(queries, whole)
            torch.testing.assert_close(out_parts, out_whole, rtol=1e-12, atol=1e-14)
            for a, b in zip(
                head.scalar_output_gradient(queries, parts),
                head.scalar_output_gradient(queries, whole),
                strict=True,
            ):
                torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13)
            for name in ("key_fields", "keys", "values", "lines", "positions", "levels", "mask"):
                torch.testing.assert_close(getattr(parts, name), getattr(whole, name))
            assert parts.keys is parts.keys and parts.lines is parts.lines  # joined once


# --------------------------------------------------------------------------- checks at their edges


def test_each_option_and_shape_check_refuses_its_first_bad_value():
    """HeadOptions and CovariantAttentionConfig checks not covered above, each at its boundary
    (the first bad value refused with its own message, the nearest good one accepted)."""
    base = dict(d=D, d_query=FQ, d_key=FK, d_value=FV, d_out=DOUT)
    bad = [
        (dict(screening=1), "screening must be a bool"),
        (dict(ida_eps=0.0), "needs ida_eps > 0 and krr_lambda > 1e-4"),
        (dict(krr_lambda=1e-4), "needs ida_eps > 0 and krr_lambda > 1e-4"),
        (dict(string_tension=(1.0, math.inf)), "finite and >= 0"),
        (dict(connection_init_std=-1e-9), "connection_init_std must be >= 0"),
        (dict(hypercharge=math.inf), "hypercharge must be finite"),
        (dict(d_k=True), "d_k must be an int >= 1"),
        (dict(rank=0), "rank must be an int >= 1"),
        (dict(n_colors=0), "n_colors must be an int >= 1"),
        (dict(d_out=0), "d_out must be an int >= 1"),
        (dict(d_velocity_features=-1), "d_velocity_features must be an int >= 0"),
        (dict(n_levels=0), "n_levels must be an int >= 1"),
        (dict(query_level=-1), "query_level must lie in"),
    ]
    for overrides, match in bad:
        with pytest.raises(ValueError, match=match):
            head_config(**{**base, **overrides})
    good = dict(
        ida_eps=1e-12, krr_lambda=1.1e-4, string_tension=(0.0, 0.0), connection_init_std=0.0,
        rank=1, d_velocity_features=0, query_level=1,
    )  # fmt: skip
    cfg = head_config(**{**base, **good})
    assert cfg.options.krr_lambda == 1.1e-4 and cfg.query_level == 1
    with pytest.raises(ValueError, match="options must be a HeadOptions"):
        CovariantAttentionConfig(**base, options=dict(d_k=16))


def test_queries_banks_and_heads_refuse_what_does_not_fit():
    bank, q = make_bank(), make_queries()
    pos, kf, vf, lv = bank.positions, bank.key_features, bank.value_features, bank.levels
    cases = [
        (lambda: ContextBank(pos, kf.float(), vf, lv), "key_features has dtype"),
        (lambda: ContextBank(pos, kf, vf, lv[:, :3]), "levels must be \\[B, N\\]"),
        (lambda: ContextBank(pos, kf, vf, lv, bank.mask[:, :3]), "mask must be a bool \\[B, N\\]"),
        (lambda: bank.expand(4), "cannot broadcast a bank of batch size 2"),
        (lambda: ContextBank.cat([]), "at least one bank"),
        (
            lambda: ContextBank.cat([bank, ContextBank(pos, kf[..., :2], vf, lv)]),
            "disagree on \\(d, F_k, F_v\\)",
        ),
        (lambda: CovariantQueries(q.positions, q.features.float()), "features has dtype"),
        (
            lambda: CovariantQueries(q.positions, q.features, velocity=q.velocity[..., :2]),
            "velocity must have last dim d",
        ),
        (
            lambda: CovariantQueries(q.positions, q.features, levels=q.levels.bool()),
            "levels must be an integer tensor",
        ),
        (
            lambda: CovariantQueries(q.positions, q.features, levels=q.levels[:, :2]),
            "levels must be an integer tensor",
        ),
        (lambda: CovariantQueries.unchecked(positions=q.positions, speed=q.velocity), "speed"),
    ]
    for call, match in cases:
        with pytest.raises((ValueError, TypeError), match=match):
            call()
    head = make_head()
    other_d = ContextBank(torch.zeros(2, 7, 2, dtype=F64), kf, vf, lv)
    with pytest.raises(ValueError, match="context positions have d = 2"):
        head(q, other_d)
    with pytest.raises(ValueError, match="expects d_value"):
        head(q, ContextBank(pos, kf, vf[..., :2], lv))
    with pytest.raises(ValueError, match="queries have d = 2"):
        head(CovariantQueries(q.positions[..., :2], q.features), bank)
    with pytest.raises(ValueError, match="expects d_query"):
        head(CovariantQueries(q.positions, q.features[..., :2]), bank)
    with pytest.raises(ValueError, match="query_velocity=False"):
        make_head(query_velocity=False)(q, bank)
    with pytest.raises(ValueError, match="no area-law screening"):
        make_head(screening=False).string_tension()
    single = CovariantQueries(q.positions[:, 0], q.features[:, 0])
    potential = _potential_head()
    with pytest.raises(ValueError, match="single queries without velocity"):
        potential.scalar_output_gradient(
            CovariantQueries(q.positions[:, :1], q.features[:, :1]), potential.prepare(bank)
        )
    krr_head = make_head(kernel="krr", krr_lambda=0.3)
    prepared = krr_head.prepare(bank)
    with pytest.raises(ValueError, match="KRR banks must be prepared joined"):
        PreparedContext.cat([prepared, prepared])
    with pytest.raises(ValueError, match="^PreparedContext.within: prepare a joined or KRR bank"):
        prepared.within(bank.valid_mask())
    joined = PreparedContext.cat([head.prepare(bank), head.prepare(bank)])
    with pytest.raises(ValueError, match="prepare a joined or KRR bank"):
        joined.within(torch.ones(2, 14, dtype=torch.bool))
    assert head(single, bank)[0].shape == (2, DOUT)


def test_krr_ridge_lambda_starts_at_the_configured_value():
    """lam = softplus(raw) + 1e-4 with raw = softplus^-1(krr_lambda - 1e-4): krr_lambda itself
    at initialisation."""
    for lam in (0.3, 2.0):
        head = make_head(kernel="krr", krr_lambda=lam)
        torch.testing.assert_close(head.ridge_lambda(), torch.tensor(lam, dtype=F64))


def test_within_and_masses_restrict_and_weight_the_softmax():
    """PreparedContext.within(keep, log_mass): weights ∝ m_j exp(l_j) over keep & the bank's mask,
    written out from the recorded logits (screening off: the logits are all there is); the
    ContextBank's within gives the same head output as the prepared one's (no masses)."""
    head = make_head(screening=False)
    bank, q = make_bank(), make_queries()
    keep = torch.rand(2, 7, generator=torch.Generator().manual_seed(20)) > 0.4
    keep[:, 0] = True
    log_mass = torch.randn(2, 7, generator=torch.Generator().manual_seed(21), dtype=F64)
    prepared = head.prepare(bank)
    _, rec = head(q, prepared.within(keep, log_mass))
    allowed = (keep & bank.mask).unsqueeze(-2)  # [B, 1, N]
    ref = torch.exp(rec.logits + log_mass.unsqueeze(-2)) * allowed
    ref = ref / ref.sum(-1, keepdim=True)
    torch.testing.assert_close(rec.weights, ref, rtol=1e-12, atol=1e-14)
    out_p, _ = head(q, prepared.within(keep))
    out_b, _ = head(q, bank.within(keep))
    torch.testing.assert_close(out_p, out_b, rtol=1e-12, atol=1e-14)
    shared = make_bank(b=1, mask=False)
    assert torch.equal(shared.within(keep).mask, keep)  # a bank without mask: keep itself
    assert torch.equal(head.prepare(make_bank(mask=False)).within(keep).mask, keep)


def test_bank_take_and_at_level_against_per_row_indexing():
    """ContextBank.take(index, valid): row b holds its own bank's entries index[b] (a loop over
    rows; a shared B = 1 bank gives every row the same table), masked by valid & the bank's
    mask; at_level puts every entry at one integer level and keeps the given mask."""
    bank = make_bank(b=3, n=7)
    index = torch.tensor([[6, 0], [2, 2], [5, 1]])  # B = 3, K = 2 (K != B)
    valid = torch.tensor([[True, False], [True, True], [False, True]])
    got = bank.take(index, valid)
    for b in range(3):
        for name in ("positions", "key_features", "value_features", "levels"):
            assert torch.equal(getattr(got, name)[b], getattr(bank, name)[b][index[b]])
        assert torch.equal(got.mask[b], valid[b] & bank.mask[b][index[b]])
    shared = make_bank(b=1, n=7, mask=False)
    got = shared.take(index, valid)
    assert torch.equal(got.positions, shared.positions[0][index]) and torch.equal(got.mask, valid)
    mask = torch.tensor([[True, False, True]])
    level = ContextBank.at_level(*(t[:1, :3] for t in _bank_tensors(bank)), level=2, mask=mask)
    assert level.levels.dtype == torch.long and level.levels.tolist() == [[2, 2, 2]]
    assert level.mask is mask


@pytest.mark.parametrize("shared", [True, False])
def test_take_picks_each_rows_entries(shared):
    """ContextBank.take(index, valid) against a loop over rows: row b holds entries index[b]
    of its bank (of the one bank when shared), valid where selected and in the bank's mask."""
    bank = make_bank(b=1 if shared else 3, n=7)
    index = torch.tensor([[6, 0, 2], [1, 1, 5], [3, 6, 4]])
    valid = torch.tensor([[True, True, False], [True, False, True], [True, True, True]])
    taken = bank.take(index, valid)
    for b in range(3):
        src = 0 if shared else b
        for name in ("positions", "key_features", "value_features", "levels"):
            assert torch.equal(getattr(taken, name)[b], getattr(bank, name)[src, index[b]])
        assert torch.equal(taken.mask[b], valid[b] & bank.mask[src, index[b]])
    assert torch.equal(make_bank(b=3, mask=False).take(index, valid).mask, valid)


def test_single_queries_with_given_lines_equal_computed_lines():
    """forward(query_lines=[B, r, r]) for single queries [B, d]: the same output and record as
    computing the lines inside, and different lines change the output."""
    head = make_head(**FULL_OPTIONS)
    bank, q = make_bank(b=3), make_queries(b=3, q=1)  # B = 3 differs from r
    single = CovariantQueries(*(None if t is None else t[:, 0] for t in _fields(q)))
    lines = head.lines_to_origin(single.positions)  # [B, r, r]
    out, rec = head(single, bank)
    given, rec_g = head(single, bank, query_lines=lines)
    torch.testing.assert_close(given, out, rtol=0, atol=0)
    torch.testing.assert_close(rec_g.weights, rec.weights, rtol=0, atol=0)
    eye = torch.eye(lines.shape[-1], dtype=F64).expand_as(lines)
    assert not torch.allclose(head(single, bank, query_lines=eye)[0], out)


def _exact(message: str) -> str:
    """A pytest.raises pattern that matches `message` and nothing more."""
    return "^" + re.escape(message) + "$"


def test_config_and_bank_checks_raise_their_exact_messages():
    """Each check of HeadOptions, CovariantAttentionConfig and ContextBank with its whole
    message (values in it included), and the nearest values each check accepts."""
    base = dict(d=D, d_query=FQ, d_key=FK, d_value=FV, d_out=DOUT)
    bad = [
        (dict(d_k=10, n_colors=2), "HeadOptions.d_k = 10 must be a multiple of 4 * n_colors = 8 "
         "(C^n_colors (x) C^2 (x) C^m, realified)"),
        (dict(d_k=True), "HeadOptions.d_k must be an int >= 1, got True"),
        (dict(n_colors=0), "HeadOptions.n_colors must be an int >= 1, got 0"),
        (dict(segments=0), "HeadOptions.segments must be an int >= 1, got 0"),
        (dict(rank=0), "HeadOptions.rank must be an int >= 1, got 0"),
        (dict(screening=1), "HeadOptions.screening must be a bool, got 1"),
        (dict(ida_eps=0.0), "HeadOptions needs ida_eps > 0 and krr_lambda > 1e-4"),
        (dict(string_tension=(1.0, -0.1)), "HeadOptions.string_tension must be finite and >= 0"),
        (dict(g_s=math.inf), "HeadOptions.g_s must be finite"),
        (dict(chirality=math.nan), "HeadOptions.chirality must be finite"),
        (dict(connection_init_std=-1e-9), "HeadOptions.connection_init_std must be >= 0"),
        (dict(d=0), "CovariantAttentionConfig.d must be an int >= 1, got 0"),
        (dict(d_out=0), "CovariantAttentionConfig.d_out must be an int >= 1, got 0"),
        (dict(d_velocity_features=-1),
         "CovariantAttentionConfig.d_velocity_features must be an int >= 0"),
        (dict(n_levels=0), "CovariantAttentionConfig.n_levels must be an int >= 1"),
        (dict(string_tension=(1.0,)), "CovariantAttentionConfig: options.string_tension needs "
         "one sigma per level (2), got 1"),
        (dict(query_level=2), "CovariantAttentionConfig.query_level must lie in [0, 1]"),
    ]  # fmt: skip
    for overrides, message in bad:
        with pytest.raises(ValueError, match=_exact(message)):
            head_config(**{**base, **overrides})
    with pytest.raises(ValueError, match="^HeadOptions\\.wilson must be one of .*'second_order'$"):
        head_config(**base, wilson="second_order")
    with pytest.raises(ValueError, match=_exact("CovariantAttentionConfig.options must be a "
                                                "HeadOptions")):  # fmt: skip
        CovariantAttentionConfig(**base, options=dict(d_k=16))
    one_level = head_config(**base, n_levels=1, string_tension=(0.5,), query_level=0)
    assert one_level.n_levels == 1 and one_level.options.string_tension == (0.5,)

    bank = make_bank()
    pos, kf, vf, lv = bank.positions, bank.key_features, bank.value_features, bank.levels
    unit = torch.zeros(2, 7, D, dtype=F64)
    unit[1, 3, 0] = 1.0  # |z| = 1 exactly: outside the open ball
    cases = [
        (lambda: ContextBank(pos[0], kf, vf, lv),
         "ContextBank.positions must be [B, N, d], got shape (7, 3)"),
        (lambda: ContextBank(pos[None], kf, vf, lv),
         "ContextBank.positions must be [B, N, d], got shape (1, 2, 7, 3)"),
        (lambda: ContextBank(pos, kf[:, :3], vf, lv),
         "ContextBank.key_features must be [B, N, F] with B, N = 2, 7, got shape (2, 3, 4)"),
        (lambda: ContextBank(pos, kf, vf[..., 0], lv),
         "ContextBank.value_features must be [B, N, F] with B, N = 2, 7, got shape (2, 7)"),
        (lambda: ContextBank(pos, kf, vf.float(), lv),
         "ContextBank.value_features has dtype torch.float32, positions torch.float64"),
        (lambda: ContextBank(pos, kf, vf, lv[:, :3]),
         "ContextBank.levels must be [B, N] = [2, 7], got (2, 3)"),
        (lambda: ContextBank(pos, kf, vf, lv.bool()),
         "ContextBank.levels must be an integer tensor, got torch.bool"),
        (lambda: ContextBank(pos, kf, vf, lv.double()),
         "ContextBank.levels must be an integer tensor, got torch.float64"),
        (lambda: ContextBank(pos, kf, vf, -lv),
         "ContextBank.levels must be >= 0 (0 = macro, L = texture)"),
        (lambda: ContextBank(pos, kf, vf, lv, torch.ones(2, 7)),
         "ContextBank.mask must be a bool [B, N] = [2, 7] tensor, got torch.float32 (2, 7)"),
        (lambda: ContextBank(pos, kf, vf, lv, bank.mask[:, :3]),
         "ContextBank.mask must be a bool [B, N] = [2, 7] tensor, got torch.bool (2, 3)"),
        (lambda: ContextBank(unit, kf, vf, lv),
         "ContextBank.positions must be finite points inside the unit ball (max |z| = 1)"),
        (lambda: bank.expand(4), "cannot broadcast a bank of batch size 2 to 4"),
        (lambda: ContextBank.cat([]), "ContextBank.cat needs at least one bank"),
        (lambda: ContextBank.cat([bank, make_bank(b=3)]),
         "ContextBank.cat: incompatible batch sizes [2, 3]"),
        (lambda: ContextBank.cat([bank, ContextBank(pos, kf[..., :2], vf, lv)]),
         "ContextBank.cat: banks disagree on (d, F_k, F_v): [(3, 2, 6), (3, 4, 6)]"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(ValueError, match=_exact(message)):
            call()
    empty = ContextBank(pos[:, :0], kf[:, :0], vf[:, :0], lv[:, :0])  # N = 0: nothing to check
    assert empty.size == 0
    check_context(make_head().config, empty)


def test_query_and_head_checks_raise_their_exact_messages():
    """Each check of CovariantQueries, of the head's inputs and of the closed-form gradient
    with its whole message."""
    q = make_queries(q=4)  # B, Q, d = 2, 4, 3: each size its own number in the messages
    unit = torch.zeros(2, 4, D, dtype=F64)
    unit[0, 2, 1] = -1.0
    cases = [
        (lambda: CovariantQueries(q.positions[0, 0], q.features[0, 0]),
         "CovariantQueries.positions must be [B, d] or [B, Q, d], got (3,)"),
        (lambda: CovariantQueries(q.positions[None], q.features[None]),
         "CovariantQueries.positions must be [B, d] or [B, Q, d], got (1, 2, 4, 3)"),
        (lambda: CovariantQueries(q.positions, q.features[:, :2]),
         "CovariantQueries.features must have leading shape (2, 4), got (2, 2, 5)"),
        (lambda: CovariantQueries(q.positions, q.features, value_grad=q.value_grad[:, 0]),
         "CovariantQueries.value_grad must have leading shape (2, 4), got (2, 3)"),
        (lambda: CovariantQueries(q.positions, q.features, velocity=q.velocity.float()),
         "CovariantQueries.velocity has dtype torch.float32, not torch.float64"),
        (lambda: CovariantQueries(q.positions, q.features, levels=q.levels.float()),
         "CovariantQueries.levels must be an integer tensor of shape (2, 4), got torch.float32 "
         "(2, 4)"),
        (lambda: CovariantQueries(q.positions, q.features, levels=q.levels.bool()),
         "CovariantQueries.levels must be an integer tensor of shape (2, 4), got torch.bool "
         "(2, 4)"),
        (lambda: CovariantQueries(q.positions, q.features, levels=q.levels[:, :2]),
         "CovariantQueries.levels must be an integer tensor of shape (2, 4), got torch.int64 "
         "(2, 2)"),
        (lambda: CovariantQueries(q.positions, q.features, velocity=q.velocity[..., :2]),
         "CovariantQueries.velocity must have last dim d = 3"),
        (lambda: CovariantQueries(q.positions, q.features, value_grad=q.value_grad[..., :2]),
         "CovariantQueries.value_grad must have last dim d = 3"),
        (lambda: CovariantQueries(unit, q.features),
         "CovariantQueries.positions must be finite points inside the unit ball (max |z| = 1)"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(ValueError, match=_exact(message)):
            call()
    with pytest.raises(TypeError, match=_exact("unknown CovariantQueries fields ['speed']")):
        CovariantQueries.unchecked(positions=q.positions, speed=q.velocity)

    bank, q = make_bank(), make_queries()
    pos, kf, vf, lv = bank.positions, bank.key_features, bank.value_features, bank.levels
    head, potential = make_head(), _potential_head()
    single = CovariantQueries(q.positions[:, 0], q.features[:, 0])
    cases = [
        (lambda: make_head(screening=False).string_tension(),
         "this head has no area-law screening (HeadOptions.screening off)"),
        (lambda: make_head(d_velocity_features=FXV)(make_queries(velocity=False), bank),
         "this head has a W_Qv term: pass queries.velocity_features"),
        (lambda: make_head(query_velocity=False)(q, bank),
         "this head was built with query_velocity=False: pass no velocity"),
        (lambda: head(CovariantQueries(q.positions, q.features, levels=q.levels + 1), bank),
         "query levels must lie in [0, 1]"),
        (lambda: head(CovariantQueries(q.positions, q.features, levels=q.levels - 1), bank),
         "query levels must lie in [0, 1]"),
        (lambda: head(q, ContextBank(pos[..., :2], kf, vf, lv)),
         "context positions have d = 2, the head expects 3"),
        (lambda: head(q, ContextBank(pos, torch.cat([kf, kf], -1), vf, lv)),
         "context key_features have 8 features, the head expects d_key = 4"),
        (lambda: head(q, ContextBank(pos, kf, vf[..., :2], lv)),
         "context value_features have 2 features, the head expects d_value = 6"),
        (lambda: head(q, ContextBank(pos, kf, vf, lv + 1)),
         "context levels must lie in [0, 1] (n_levels = 2)"),
        (lambda: head(make_queries(b=3), bank),
         "context batch size 2 must be 1 (shared) or equal the queries' 3"),
        (lambda: head(CovariantQueries(q.positions[..., :2], q.features), bank),
         "queries have d = 2, the head expects 3"),
        (lambda: head(CovariantQueries(q.positions, q.features[..., :4]), bank),
         "queries have 4 features, the head expects d_query = 5"),  # 4: not B, Q or d
        (lambda: _potential_head(kernel="krr").scalar_output_gradient(single, head.prepare(bank)),
         "this head's configuration has no closed-form gradient"),
        (lambda: potential.scalar_output_gradient(
            CovariantQueries(q.positions[:, :1], q.features[:, :1]), potential.prepare(bank)),
         "scalar_output_gradient takes single queries without velocity"),
        (lambda: PreparedContext.cat([make_head(kernel="krr").prepare(bank)] * 2),
         "PreparedContext.cat: KRR banks must be prepared joined"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(ValueError, match=_exact(message)):
            call()


def test_joined_banks_keep_each_parts_mask_and_mass():
    """ContextBank.cat joins the masks (None only when no part has one); PreparedContext.cat
    joins masks and masses (a part without reads all valid, mass 1) and contracts part by part
    only where batch sizes differ: weights ∝ m_j exp(l_j) over the joined mask, written out."""
    a, b = make_bank(seed=1), make_bank(seed=3)
    b.mask[1, 2] = False
    assert torch.equal(ContextBank.cat([a, b]).mask, torch.cat([a.mask, b.mask], 1))
    assert ContextBank.cat([make_bank(mask=False), make_bank(mask=False, seed=3)]).mask is None
    one = make_bank(b=1, seed=6)  # its mask drops the last entry
    wide = one.expand(3)
    for name in ("positions", "key_features", "value_features", "levels", "mask"):
        t = getattr(one, name)
        assert torch.equal(getattr(wide, name), t.expand(3, *t.shape[1:]))
    head = make_head(screening=False)
    assert PreparedContext.cat([head.prepare(a), head.prepare(b)]).blocks is None  # same batch
    shared, window = make_bank(b=1, n=5, mask=False, seed=4), make_bank(b=2, n=3, seed=5)
    keep = torch.tensor([[True, False, True, True, False], [False, True, True, True, True]])
    log_mass = torch.randn(2, 5, generator=torch.Generator().manual_seed(22), dtype=F64)
    parts = [head.prepare(shared).within(keep, log_mass), head.prepare(window)]
    q = make_queries(b=2, q=3)
    _, rec = head(q, PreparedContext.cat(parts))
    allowed = torch.cat([keep, window.mask], 1).unsqueeze(-2)  # [B, 1, N]
    masses = torch.cat([log_mass, torch.zeros(2, 3, dtype=F64)], 1).unsqueeze(-2)
    ref = torch.exp(rec.logits + masses) * allowed
    torch.testing.assert_close(rec.weights, ref / ref.sum(-1, keepdim=True), rtol=1e-12, atol=0)
    _, rec = head(q, PreparedContext.cat(parts[::-1]))  # the mass-less part first
    ref = torch.exp(rec.logits + masses.roll(3, -1)) * allowed.roll(3, -1)
    torch.testing.assert_close(rec.weights, ref / ref.sum(-1, keepdim=True), rtol=1e-12, atol=0)


def test_a_per_sample_precomputed_chiral_projector_equals_the_value_gradients():
    """queries.chiral computed for each sample of a batch of single queries (not shared): the
    same output, projectors and degenerate flags as the value gradients it was computed from."""
    head = make_head(chirality=0.7, query_velocity=False)
    bank = make_bank(b=1)
    q = make_queries(b=4, q=1, velocity=False, levels=False)
    z, x, vg = q.positions[:, 0], q.features[:, 0], q.value_grad[:, 0]
    ref, ref_rec = head(CovariantQueries(z, x, value_grad=vg), bank)
    for chiral in (head.chiral_projector(vg), head.chiral_inputs(vg)):
        out, rec = head(CovariantQueries(z, x, chiral=chiral), bank)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-14)
        assert torch.equal(rec.projectors, ref_rec.projectors)
        assert torch.equal(rec.degenerate, ref_rec.degenerate)
    # one unbatched value gradient [d] (leading dims [], broadcast to every sample)
    ref, ref_rec = head(CovariantQueries(z, x, value_grad=vg[:1].expand(4, -1)), bank)
    for chiral in (head.chiral_projector(vg[0]), head.chiral_inputs(vg[0])):
        out, rec = head(CovariantQueries(z, x, chiral=chiral), bank)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-14)
        assert torch.equal(rec.degenerate.expand(4, 1), ref_rec.degenerate)


def test_charged_entries_of_a_prepared_bank_built_without_its_index():
    """A PreparedContext built without charged_index (None: not yet read) finds its charged
    columns on first read: the entries whose level is not macro in some row, a loop over the
    entries; their positions and levels are those columns, read once."""
    bank = make_bank(b=2, n=6)
    for levels in (
        torch.tensor([[0, 1, 0, 2, 0, 0], [0, 0, 0, 1, 1, 0]]),  # charged in one row or both
        torch.tensor([[0, 0, 3, 0, 0, 0], [0, 0, 0, 0, 0, 0]]),  # a single charged column
    ):
        prepared = PreparedContext(bank.positions, levels, None, None, None, None, None)
        want = [j for j in range(6) if any(int(levels[b, j]) != 0 for b in range(2))]
        cols, pos_c, levels_c = prepared.charged_entries()
        assert cols.dtype == torch.long and cols.tolist() == want
        assert torch.equal(prepared.charged_columns(), cols)
        assert torch.equal(pos_c, bank.positions[:, want])
        assert torch.equal(levels_c, levels[:, want])
        assert prepared.charged_entries()[0] is cols


def test_initial_parameters_have_their_documented_scales():
    """At construction: sigma(l) = string_tension and kappa = chirality exactly; the
    connection's coefficients with std connection_init_std, the rank-R factors with std
    1 / sqrt(d) and the full quadratic tensors with std 1 / d (sample stds of a large head,
    within 15%)."""
    d, tension = 8, (0.25, 0.0625, 1.0)  # exact squares of exact roots in float32
    common = dict(d=d, d_k=32, n_colors=2, connection_init_std=0.25, string_tension=tension,
                  n_levels=3, chirality=0.625, position_velocity=True, rank=4)  # fmt: skip
    fact, full = make_head(**common), make_head(christoffel="full", **common)
    assert fact.string_tension().tolist() == list(tension)
    assert fact.chirality_strength.item() == 0.625
    connection = torch.cat([fact.connection_c0.flatten(), fact.connection_c1.flatten()])
    assert abs(connection.std().item() / 0.25 - 1) < 0.15
    for name in ("q_gamma_u", "q_gamma_v", "q_zv_u", "q_zv_v"):
        assert abs(fact.get_parameter(name).std().item() * d**0.5 - 1) < 0.15, name
    for name in ("w_q_gamma", "w_q_zv"):
        assert abs(full.get_parameter(name).std().item() * d - 1) < 0.15, name


def test_constant_temperature_is_sqrt_d_k_in_the_positions_dtype():
    """temperature "constant": tau = sqrt(d_k) at every query, in the positions' dtype (d_k = 8:
    sqrt(8) is not exact in float32)."""
    head = make_head(temperature="constant", d_k=8)
    z = make_queries().positions  # [2, 3, d], float64
    assert torch.equal(head.temperature(z), torch.full((2, 3), math.sqrt(8), dtype=F64))
    assert torch.equal(head.temperature(z[:, 0]), torch.full((2,), math.sqrt(8), dtype=F64))


def test_closed_form_gradient_with_entries_charged_in_some_rows_only():
    """A per-sample bank whose entries are colour-charged in some rows and macro in others:
    Phi and dPhi/dz, dPhi/dx equal the head's output and autograd's."""
    head = _potential_head(wilson="exp", christoffel="poincare")
    bank = make_bank(b=4, n=7)
    levels = bank.levels.clone()
    levels[0] = 0  # row 0 all macro; rows 1-3 differ at entries 0-2
    levels[1, :3] = torch.tensor([1, 0, 1])
    levels[2, :3] = 1
    bank = ContextBank(bank.positions, bank.key_features, bank.value_features, levels, bank.mask)
    q = make_queries(b=4, q=1, velocity=False, levels=False)
    zr, xr = q.positions[:, 0].clone().requires_grad_(True), q.features[:, 0].requires_grad_(True)
    queries = CovariantQueries(zr, xr, value_grad=q.value_grad[:, 0])
    ref, _ = head(queries, head.prepare(bank))
    gz, gx = torch.autograd.grad(ref.sum(), (zr, xr))
    phi, cz, cx, _ = head.scalar_output_gradient(queries, head.prepare(bank))
    torch.testing.assert_close(phi, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cz, gz, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(cx, gx, rtol=1e-9, atol=1e-11)
