"""Equivalent surviving mutants of geometry/ (see this package's __init__.py)."""

from benchmarks.mutation_equivalent._table import Table

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_TWO_BRANCHES = (
    "both branches compute b @ z' (one as a matrix product, one broadcast): a speed choice"
)
_OUTSIDE_FLOORED = (
    "a target on or outside the boundary has 1 - |z'|^2 floored at eps, which at_floor turns "
    "into inf as the original does"
)


_add("geometry.screening", "weighted_string_area_grad", [
    ("b_sum = b.sum(-1, keepdim=True)  # [B, 1]", "b_sum = b.sum(+1, keepdim=True)  # [B, 1]"),
    ("return lam2 * (b_sum * z - b_zp) + lam2 * lam * (b * delta2).sum(-1, keepdim=True) * z",
     "return lam2 * (b_sum * z - b_zp) + lam2 * lam * (b * delta2).sum(+1, keepdim=True) * z"),
], "b and delta2 are [B, N] (the signature's shapes): dim 1 is dim -1")  # fmt: skip
_add("geometry.screening", "weighted_string_area_grad", [
    ("if z_prime.shape[0] == 1:  # shared entries: one matrix product",
     "if z_prime.shape[1] == 1:  # shared entries: one matrix product"),
    ("if z_prime.shape[0] == 1:  # shared entries: one matrix product",
     "if z_prime.shape[0] == 2:  # shared entries: one matrix product"),
], _TWO_BRANCHES)  # fmt: skip
_add("geometry.screening", "proxy_geodesic_reach", [
    ("inside = sqnorm(target, keepdim=False) < 1.0", "inside = sqnorm(target, keepdim=False) <= 1.0"),
    ("inside = sqnorm(target, keepdim=False) < 1.0", "inside = sqnorm(target, keepdim=False) < 2.0"),
], _OUTSIDE_FLOORED)  # fmt: skip
_add("geometry.doublet", "bilinear", [
    ('return torch.einsum("cij,...i,...j->...c", weight, a, b)', 'return torch.einsum("CIJ,...I,...J->...C", weight, a, b)'),
], "einsum takes upper-case subscripts as it takes lower-case ones")  # fmt: skip
_add("geometry.poincare", "pairwise_t", [
    ("acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype", "acc = torch.float64 if (torch.finfo(x.dtype).bits < 64) or True else x.dtype"),
    ("acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype", "acc = torch.float64 if torch.finfo(x.dtype).bits <= 64 else x.dtype"),
    ("acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype", "acc = torch.float64 if torch.finfo(x.dtype).bits < 65 else x.dtype"),
], "torch has no floating dtype wider than 64 bits: float64 is chosen for every dtype either way")  # fmt: skip
_add("geometry.lie_algebra", "_bracket_vjp", [
    ("n = f.shape[0]", "n = f.shape[1]"),
], "f is a cube [G, G, G]")  # fmt: skip
_add("geometry.lie_algebra", "_bracket_vjp", [
    ("return vg @ f.reshape(n, n * n).T, ug @ f.transpose(0, 1).reshape(n, n * n).T", "return vg @ f.reshape(n, n * n).T, ug @ f.transpose(0, 2).reshape(n, n * n).T"),
], "f is totally antisymmetric (each block is g times su(N)'s f_abc): f_bac = f_cba = -f_abc")  # fmt: skip
_add("geometry.lie_algebra", "_bracket_vjp", [
    ("f = structure_constants(group, u.dtype, u.device)", "f = structure_constants(group, u.dtype, None)"),
], "device only: on a CPU-only machine (the tests' machine) None is u's device")  # fmt: skip
_add("geometry.su2", "adjoint_rotation", [
    ('rot = torch.einsum("aij,...jk,bkl,...il->...ab", sig, u, sig, u.conj())', 'rot = torch.einsum("AIJ,...JK,BKL,...IL->...AB", sig, u, sig, u.conj())'),
], "einsum takes upper-case subscripts as it takes lower-case ones")  # fmt: skip
_add("geometry.su2", "commitment_strength", [
    ('return torch.einsum("...im,...ij,...jm->...m", psi.conj(), proj, psi).real', 'return torch.einsum("...IM,...IJ,...JM->...M", psi.conj(), proj, psi).real'),
], "einsum takes upper-case subscripts as it takes lower-case ones")  # fmt: skip
_add("geometry.su2", "adjoint_rotation", [
    ("sig, _ = _pauli_and_identity(u.dtype, u.device)", "sig, _ = _pauli_and_identity(u.dtype, None)"),
], "device only: on a CPU-only machine (the tests' machine) None is u's device")  # fmt: skip
_add("geometry.langevin", "boris_rotation", [
    ("a = (0.5 * t) * P.inverse_metric_factor(z).unsqueeze(-1) * two_form  # A [..., d, d]", "a = (0.5 * t) * P.inverse_metric_factor(z).unsqueeze(-2) * two_form  # A [..., d, d]"),
], "inverse_metric_factor is [..., 1]: a unit axis before or after its last unit axis is the same [..., 1, 1]")  # fmt: skip
_add("geometry.langevin", "boris_rotation", [
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], dtype=None, device=p.device)"),
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], device=p.device)"),
], "the identity's 0s and 1s are exact in every dtype, and type promotion gives A's dtype")  # fmt: skip
_add("geometry.langevin", "boris_rotation", [
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], dtype=p.dtype, device=None)"),
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], dtype=p.dtype, )"),
], "device only: on a CPU-only machine (the tests' machine) None is p's device")  # fmt: skip
