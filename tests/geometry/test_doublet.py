"""geometry.doublet: the realified layout of the covariant head's fields (seed 003 Def 284), the
per-channel action of lines in the minimal representation, and the chiral gate of Defs 284-285
in real arithmetic, against its complex definition (Thm 101's SU(2) covariance included)."""

from __future__ import annotations

import torch

from geometry import lie_algebra, su2, wilson_lines
from geometry.doublet import (
    apply_in_channels,
    bilinear,
    chiral_gate,
    chiral_gate_vjp,
    chiral_operator,
    doublet_to_realified,
    low_rank_bilinear,
    masked_softmax,
    pair_mixture,
    pair_products,
    realified_to_doublet,
)
from tests.conftest import ball_points

F64 = torch.float64
D = 3
WILSON_MODES = ["first_order", "exp", "path_ordered"]


def test_realified_doublet_layout_matches_the_gauge_generators():
    """R^{d_k} = realification of C^{N_f} (x) C^2 (x) C^m: the SU(2)_L generators (realified
    -i sigma_b / 2) act on the doublet axis of realified_to_doublet, the colour ones on the
    colour axis."""
    n_c, k = 2, 24
    gens = lie_algebra.gauge_generators(k, n_c, dtype=F64)
    x = torch.randn(5, k, dtype=F64)
    psi = realified_to_doublet(x, n_c)
    assert psi.shape == (5, n_c, 2, 3)
    torch.testing.assert_close(doublet_to_realified(psi), x)
    sig = su2.pauli(F64)
    for b in range(3):
        moved = realified_to_doublet(x @ gens.error[b].T, n_c)
        torch.testing.assert_close(moved, torch.einsum("st,bctm->bcsm", -0.5j * sig[b], psi))
    lam = lie_algebra.gell_mann(n_c)
    for a in range(lam.shape[0]):
        moved = realified_to_doublet(x @ gens.binding[a].T, n_c)
        torch.testing.assert_close(moved, torch.einsum("cd,bdsm->bcsm", -0.5j * lam[a], psi))


def test_lines_in_the_minimal_representation_act_like_the_full_d_k_lines():
    """geometry.lie_algebra's generators on R^{d_k} are those on R^r (r = 4 N_f) tensored with I_m;
    apply_in_channels(U_r, psi) equals U_{d_k} psi for Wilson lines of every mode."""
    n_c, k = 2, 24
    g = torch.Generator().manual_seed(5)
    small = lie_algebra.gauge_generators(4 * n_c, n_c, dtype=F64).stacked(1.0, 0.7, 0.4)
    big = lie_algebra.gauge_generators(k, n_c, dtype=F64).stacked(1.0, 0.7, 0.4)
    c0 = torch.randn(D, small.shape[0], generator=g, dtype=F64)
    c1 = torch.randn(D, D, small.shape[0], generator=g, dtype=F64)
    z = ball_points(5, D, 0.9, seed=6)
    psi = torch.randn(5, k, generator=g, dtype=F64)
    for mode in WILSON_MODES:
        u_small = wilson_lines.wilson_line_to_origin(
            wilson_lines.affine_connection(small, c0, c1), z, mode=mode
        )
        u_big = wilson_lines.wilson_line_to_origin(
            wilson_lines.affine_connection(big, c0, c1), z, mode=mode
        )
        assert u_small.shape == (5, 8, 8) and u_big.shape == (5, k, k)
        torch.testing.assert_close(
            apply_in_channels(u_small, psi), (u_big @ psi.unsqueeze(-1)).squeeze(-1)
        )


def test_the_chiral_operator_is_built_in_the_requested_dtype():
    """A complex128 projector gives a float32 operator when float32 is asked for (the gate's
    output dtype), with the float64 one's values."""
    proj, _ = su2.chiral_projector(
        torch.randn(3, 3, generator=torch.Generator().manual_seed(2)).double()
    )
    low, high = chiral_operator(proj, 2, 16, torch.float32), chiral_operator(proj, 2, 16, F64)
    assert low.dtype == torch.float32 and high.dtype == F64
    torch.testing.assert_close(low.double(), high, rtol=1e-6, atol=1e-7)


def test_chiral_gate_identity_idempotence_degeneracy_and_su2_covariance():
    n_c, k = 2, 16
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, k, generator=g, dtype=F64)
    n = torch.randn(6, 3, generator=g, dtype=F64)
    proj, _ = su2.chiral_projector(n)
    torch.testing.assert_close(chiral_gate(x, proj, n_c, 0.0), x)  # kappa = 0: identity
    once = chiral_gate(x, proj, n_c, 1.0)
    torch.testing.assert_close(chiral_gate(once, proj, n_c, 1.0), once)  # committed is fixed
    # the committed doublet lies in the range of Pi, with |.| <= |Psi|
    psi1 = realified_to_doublet(once, n_c)
    torch.testing.assert_close(proj[:, None] @ psi1, psi1)
    assert (
        psi1.abs().square().sum(-2) <= realified_to_doublet(x, n_c).abs().square().sum(-2) + 1e-12
    ).all()
    # doublets with |Psi|^2 around float64's eps (which regularises c^'s quotient): no longer
    tiny = x * (0.5 * torch.finfo(F64).eps) ** 0.5
    kept = realified_to_doublet(chiral_gate(tiny, proj, n_c, 1.0), n_c).abs().square().sum(-2)
    assert (kept <= realified_to_doublet(tiny, n_c).abs().square().sum(-2) * (1 + 1e-9)).all()
    # degenerate direction: Pi = 0, no commitment, (1 - kappa) Psi
    proj0, degenerate = su2.chiral_projector(torch.zeros(6, 3, dtype=F64))
    assert degenerate.all()
    torch.testing.assert_close(chiral_gate(x, proj0, n_c, 0.25), 0.75 * x)
    # SU(2) covariance (Thm 101): gate(U Psi, U Pi U^dag) = U gate(Psi, Pi)
    theta = torch.randn(6, 3, generator=g, dtype=F64)
    u_real = torch.linalg.matrix_exp(
        torch.einsum("na,aij->nij", theta, lie_algebra.gauge_generators(k, n_c, dtype=F64).error)
    )
    u_c = su2.su2_element(theta)  # exp(-i theta.sigma/2), the same group element on C^2
    proj_rot = u_c @ proj @ u_c.conj().transpose(-1, -2)
    lhs = chiral_gate((u_real @ x.unsqueeze(-1)).squeeze(-1), proj_rot, n_c, 0.6)
    rhs = (u_real @ chiral_gate(x, proj, n_c, 0.6).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(lhs, rhs)


def _complex_chiral_gate(out, proj, n_colors, strength):
    """Defs 284-285 in complex arithmetic (the reference for the real-arithmetic gate)."""
    psi = realified_to_doublet(out, n_colors)  # [..., N_f, 2, m]
    p = proj.unsqueeze(-3)
    commit = su2.commitment_strength(psi, p)
    norm2 = (psi.real.square() + psi.imag.square()).sum(-2)
    gate = commit / (norm2 + torch.finfo(out.dtype).eps)
    return doublet_to_realified(psi + strength * (gate.unsqueeze(-2) * (p @ psi) - psi))


def test_real_chiral_gate_equals_the_complex_definition():
    g = torch.Generator().manual_seed(17)
    for shape, proj_shape in (((5, 16), (5,)), ((3, 4, 24), (3, 4)), ((3, 4, 24), (1, 4))):
        n_c = 2 if shape[-1] == 16 else 3
        out = torch.randn(*shape, generator=g, dtype=F64)
        n = torch.randn(*proj_shape, 3, generator=g, dtype=F64)
        n.view(-1, 3)[0] = 0.0  # one degenerate direction
        proj, _ = su2.chiral_projector(n)
        for kappa in (0.0, 0.6, 1.0):
            torch.testing.assert_close(
                chiral_gate(out, proj, n_c, kappa), _complex_chiral_gate(out, proj, n_c, kappa)
            )


def test_chiral_gate_vjp_equals_autograd_through_the_complex_gate():
    """The real-arithmetic value and gradient of <a, chiral_gate(out)>: a regular projector, a
    degenerate one (Pi = 0) and a shared (batch 1) one, kappa inside and outside [0, 1]."""
    g = torch.Generator().manual_seed(13)
    out = torch.randn(5, 16, generator=g, dtype=F64)
    a = torch.randn(16, generator=g, dtype=F64)
    n = torch.randn(5, 3, generator=g, dtype=F64)
    n[1] = 0.0  # degenerate
    for proj_batch in (5, 1):
        proj, degenerate = su2.chiral_projector(n[:proj_batch])
        assert bool(degenerate[1]) if proj_batch == 5 else True
        for kappa in (0.0, 0.7, 1.3):
            o = out.clone().requires_grad_(True)
            ref = (_complex_chiral_gate(o, proj, 2, kappa) * a).sum(-1, keepdim=True)
            (ref_grad,) = torch.autograd.grad(ref.sum(), o)
            value, grad = chiral_gate_vjp(out, proj, 2, kappa, a)
            torch.testing.assert_close(value, ref.detach(), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


def test_bilinear_forms_against_explicit_sums_over_a_two_dim_batch():
    """W(a, b)^c = sum_ij W^{cij} a^i b^j, and the factorised form sum_r (U_r a)_c (V_r b)_c is the
    bilinear form of W^{cij} = sum_r U_r^{ci} V_r^{cj}; both on a batch [2, 3] (every batch
    position contracted on its own)."""
    g = torch.Generator().manual_seed(7)
    k, d, e, rank = 4, 3, 5, 2
    weight = torch.randn(k, d, e, dtype=F64, generator=g)
    a = torch.randn(2, 3, d, dtype=F64, generator=g)
    b = torch.randn(2, 3, e, dtype=F64, generator=g)
    explicit = torch.zeros(2, 3, k, dtype=F64)
    for c in range(k):
        for i in range(d):
            for j in range(e):
                explicit[..., c] += weight[c, i, j] * a[..., i] * b[..., j]
    torch.testing.assert_close(bilinear(weight, a, b), explicit)
    u = torch.randn(rank, k, d, dtype=F64, generator=g)
    v = torch.randn(rank, k, d, dtype=F64, generator=g)
    b = torch.randn(2, 3, d, dtype=F64, generator=g)
    full = torch.einsum("rci,rcj->cij", u, v)  # [k, d, d]
    got = low_rank_bilinear(u, v, a, b)
    assert got.shape == (2, 3, k)
    torch.testing.assert_close(got, bilinear(full, a, b))


def test_pair_products_and_mixtures_on_every_path_against_einsum():
    """<q_bi, bank_bj> and sum_j w_bij bank_bj for a shared bank (one matrix product), per-query
    banks with one query (the broadcast form while training, a batched product without
    gradients) and with two: values and gradients against einsum."""
    g = torch.Generator().manual_seed(9)
    for bc, q_len, grad in [(1, 2, True), (4, 1, True), (4, 1, False), (4, 2, True)]:
        q = torch.randn(4, q_len, 5, generator=g, dtype=F64).requires_grad_(grad)
        w = torch.randn(4, q_len, 3, generator=g, dtype=F64).requires_grad_(grad)
        bank = torch.randn(bc, 3, 5, generator=g, dtype=F64).requires_grad_(grad)
        full = bank.expand(4, -1, -1)
        got = (pair_products(q, bank), pair_mixture(w, bank))
        want = (torch.einsum("bik,bjk->bij", q, full), torch.einsum("bij,bjk->bik", w, full))
        assert got[0].shape == (4, q_len, 3) and got[1].shape == (4, q_len, 5)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
        if grad:
            cot = [torch.randn(t.shape, generator=g, dtype=F64) for t in got]
            inputs = (q, w, bank)
            dg = torch.autograd.grad(got, inputs, cot, retain_graph=True)
            dw = torch.autograd.grad(want, inputs, cot)
            for a, b in zip(dg, dw, strict=True):
                torch.testing.assert_close(a, b)


def test_masked_softmax_is_the_softmax_of_the_allowed_entries():
    """Over the last dim of [2, 3, 4] logits: no mask is the softmax; a mask gives the softmax
    of the allowed entries and 0 elsewhere; a row with none allowed is all 0, never NaN."""
    logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(2), dtype=F64)
    torch.testing.assert_close(masked_softmax(logits, None), torch.softmax(logits, -1))
    mask = torch.tensor([[True, False, True, True], [False, True, False, False],
                         [False, False, False, False]])  # fmt: skip
    got = masked_softmax(logits, mask)
    for i in range(2):
        for j in range(3):
            allowed = mask[j].nonzero().flatten()
            want = torch.zeros(4, dtype=F64)
            if len(allowed):
                want[allowed] = torch.softmax(logits[i, j, allowed], -1)
            torch.testing.assert_close(got[i, j], want)


def test_the_gate_reads_the_operator_it_is_given():
    """chiral_gate and its VJP with `operator` (a rollout's cached flat Pi) use that operator:
    the gate of proj with proj2's operator is the gate of proj2."""
    g = torch.Generator().manual_seed(3)
    n_c, k = 2, 16
    out = torch.randn(5, k, generator=g, dtype=F64)
    a = torch.randn(5, k, generator=g, dtype=F64)
    proj, _ = su2.chiral_projector(torch.randn(5, 3, generator=g, dtype=F64))
    proj2, _ = su2.chiral_projector(torch.randn(5, 3, generator=g, dtype=F64))
    op2 = chiral_operator(proj2, n_c, k, F64)
    torch.testing.assert_close(
        chiral_gate(out, proj, n_c, 0.6, operator=op2), chiral_gate(out, proj2, n_c, 0.6)
    )
    for got, want in zip(
        chiral_gate_vjp(out, proj, n_c, 0.6, a, operator=op2),
        chiral_gate_vjp(out, proj2, n_c, 0.6, a),
        strict=True,
    ):
        torch.testing.assert_close(got, want)
    assert not torch.allclose(chiral_gate(out, proj, n_c, 0.6), chiral_gate(out, proj2, n_c, 0.6))


def test_per_sample_operators_give_the_same_gate_with_and_without_gradients():
    """With a projector per sample the gate contracts by a batched product without gradients
    and by a broadcast sum with them (a speed choice): the same values."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(5, 16, generator=g, dtype=F64)
    proj, _ = su2.chiral_projector(torch.randn(5, 3, generator=g, dtype=F64))
    plain = chiral_gate(x, proj, 2, 0.7)
    traced = chiral_gate(x.clone().requires_grad_(True), proj, 2, 0.7)
    torch.testing.assert_close(traced.detach(), plain, rtol=1e-12, atol=1e-12)
