"""geometry.group_exponential: the closed-form group exponential's VJP against autograd
(its values against matrix exponentials: tests/geometry/test_wilson_lines.py,
test_closed_form_lines_in_the_group_equal_the_generic_lines)."""

from __future__ import annotations

import pytest
import torch

from geometry.group_exponential import group_exp, group_exp_vjp
from geometry.lie_algebra import GaugeGroup

F64 = torch.float64


@pytest.mark.parametrize("n_colors", [1, 2])
def test_group_exp_vjp_is_the_gradient_of_a_transported_field(n_colors):
    """d/dh <y, U(h) psi> = M(h)^T e with e_g = <U^T y, T_g psi> (group_exp_vjp), against
    autograd through the closed-form exponential; the identity (h = 0) included."""
    group = GaugeGroup(n_colors, g_s=1.0, g_2=0.7, g_1=0.4, hypercharge=1.3)
    gens = group.generators()  # [G, r, r]
    g = torch.Generator().manual_seed(5)
    h = torch.randn(6, group.n_generators, generator=g, dtype=F64)
    h[0] = 0.0
    y = torch.randn(6, group.dim, generator=g, dtype=F64)
    psi = torch.randn(6, group.dim, generator=g, dtype=F64)
    h_req = h.clone().requires_grad_(True)
    u = group_exp(group, h_req)
    (ref,) = torch.autograd.grad((y * (u @ psi.unsqueeze(-1)).squeeze(-1)).sum(), h_req)
    e = torch.einsum(
        "bi,gij,bj->bg", (u.detach().transpose(-1, -2) @ y.unsqueeze(-1))[..., 0], gens, psi
    )
    torch.testing.assert_close(group_exp_vjp(group, h, e), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="N_f <= 2"):
        group_exp_vjp(GaugeGroup(3, 1.0, 0.5, 0.3), torch.zeros(12, dtype=F64), torch.zeros(12))


def test_three_colours_with_two_batch_axes_in_float64_and_float32():
    """N_f = 3 (the factors' matrix exponentials) is exp(sum_g h_g T_g) for h [2, 4, G], in the
    dtype of h."""
    group = GaugeGroup(3, g_s=0.9, g_2=0.6, g_1=0.3, hypercharge=0.7)
    h = torch.randn(2, 4, group.n_generators, generator=torch.Generator().manual_seed(6), dtype=F64)
    want = torch.linalg.matrix_exp(torch.einsum("...g,gij->...ij", h, group.generators()))
    torch.testing.assert_close(group_exp(group, h), want, rtol=1e-12, atol=1e-12)
    low = group_exp(group, h.float())
    assert low.dtype == torch.float32
    torch.testing.assert_close(low.double(), want, rtol=1e-5, atol=1e-5)
