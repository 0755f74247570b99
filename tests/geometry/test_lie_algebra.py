"""geometry.lie_algebra: the Gell-Mann matrices, the realification (an algebra homomorphism),
the generators of SU(N_f) x SU(2) x U(1) (skew, SU(2)'s algebra, commuting factors) and the
bracket on the generators' coefficients with its VJP."""

from __future__ import annotations

import pytest
import torch

from geometry.lie_algebra import (
    GaugeGroup,
    _bracket_vjp,
    bracket,
    gauge_generators,
    gell_mann,
    realify,
)

F64 = torch.float64


def test_gell_mann():
    """Hermitian, traceless, Tr(l_a l_b) = 2 delta_ab to complex128's rounding; none for n = 1,
    in the dtype asked for."""
    for n in [1, 2, 3, 4]:
        lam = gell_mann(n)
        assert lam.shape == (n * n - 1, n, n) and lam.dtype == torch.complex128
        torch.testing.assert_close(lam, lam.conj().transpose(-1, -2))
        if n > 1:
            torch.testing.assert_close(
                torch.einsum("aii->a", lam), torch.zeros(n * n - 1, dtype=lam.dtype)
            )
            gram = torch.einsum("aij,bji->ab", lam, lam)
            eye = torch.eye(n * n - 1, dtype=lam.dtype)
            torch.testing.assert_close(gram, 2 * eye, rtol=0, atol=1e-14)
    assert gell_mann(1, torch.complex64).dtype == torch.complex64


def test_realify_is_an_algebra_homomorphism():
    g = torch.Generator().manual_seed(1)
    a = torch.complex(
        torch.randn(4, 4, generator=g, dtype=F64), torch.randn(4, 4, generator=g, dtype=F64)
    )
    b = torch.complex(
        torch.randn(4, 4, generator=g, dtype=F64), torch.randn(4, 4, generator=g, dtype=F64)
    )
    torch.testing.assert_close(realify(a @ b), realify(a) @ realify(b))
    torch.testing.assert_close(realify(a + b), realify(a) + realify(b))
    q, _ = torch.linalg.qr(a)  # unitary -> orthogonal
    rq = realify(q)
    torch.testing.assert_close(rq @ rq.T, torch.eye(8, dtype=F64))


def test_generators_skew_with_su2_algebra_and_commuting_factors():
    gens = gauge_generators(16, n_colors=2, dtype=F64)
    assert gens.binding.shape == (3, 16, 16) and gens.error.shape == (3, 16, 16)
    assert gens.opportunity.shape == (1, 16, 16)
    allg = gens.stacked(1.0, 1.0, 1.0)
    torch.testing.assert_close(allg, -allg.transpose(-1, -2))

    def comm(x, y):
        return x @ y - y @ x

    t = gens.error  # realified -i sigma/2: [t_a, t_b] = eps_abc t_c
    torch.testing.assert_close(comm(t[0], t[1]), t[2])
    torch.testing.assert_close(comm(t[1], t[2]), t[0])
    torch.testing.assert_close(comm(t[2], t[0]), t[1])
    for x in gens.binding:
        for y in torch.cat([gens.error, gens.opportunity]):
            assert comm(x, y).abs().max() < 1e-12  # product group: factors commute
    for y in gens.error:
        assert comm(gens.opportunity[0], y).abs().max() < 1e-12
    with pytest.raises(ValueError):
        gauge_generators(12, n_colors=2)


def test_bracket_is_the_matrix_commutator_of_the_generators():
    """bracket(u, v) = the coefficients of [u . T, v . T] (SU(2)-type blocks: g u x v; U(1): 0),
    for every colour count, couplings 0 included, and its VJP against autograd."""
    g = torch.Generator().manual_seed(30)
    for n_colors, g_s in ((1, 1.0), (2, 1.3), (3, 0.8), (2, 0.0)):
        group = GaugeGroup(n_colors, g_s=g_s, g_2=0.7, g_1=0.4, hypercharge=1.3)
        gens = group.generators()
        u = torch.randn(5, group.n_generators, generator=g, dtype=F64, requires_grad=True)
        v = torch.randn(5, group.n_generators, generator=g, dtype=F64, requires_grad=True)
        mu, mv = (torch.einsum("bg,gij->bij", w, gens) for w in (u, v))
        want = mu @ mv - mv @ mu
        got = torch.einsum("bg,gij->bij", bracket(group, u, v), gens)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        w = torch.randn(5, group.n_generators, generator=g, dtype=F64)
        ref = torch.autograd.grad((bracket(group, u, v) * w).sum(), (u, v))
        for a, b in zip(_bracket_vjp(group, u, v, w), ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gauge_generators_defaults_dtype_and_refusal():
    """By default N_f = 2 with hypercharge 1, in float32; float64 on request; a k that is not a
    multiple of 4 N_f is refused with the multiple it needs."""
    default = gauge_generators(8)
    explicit = gauge_generators(8, n_colors=2, hypercharge=1.0, dtype=torch.float32)
    assert default.stacked(1.0, 0.7, 0.4).dtype == torch.float32
    assert torch.equal(default.stacked(1.0, 0.7, 0.4), explicit.stacked(1.0, 0.7, 0.4))
    high = gauge_generators(8, dtype=torch.float64).stacked(1.0, 0.7, 0.4)
    assert high.dtype == torch.float64
    torch.testing.assert_close(high.float(), explicit.stacked(1.0, 0.7, 0.4), rtol=0, atol=0)
    assert gauge_generators(24, n_colors=3).stacked(1.0, 1.0, 1.0).shape == (12, 24, 24)
    with pytest.raises(
        ValueError, match=r"^k=12 must be a positive multiple of 4 \* n_colors = 8$"
    ):
        gauge_generators(12)
