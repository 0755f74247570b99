"""Equivalent surviving mutants of geometry/ (see this package's __init__.py)."""

from benchmarks.mutation_equivalent._table import DEVICE_ONLY, Table

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_TWO_BRANCHES = (
    "both branches compute b @ z' (one as a matrix product, one broadcast): a speed choice"
)
_SAME_CONTRACTION = (
    "every branch computes the same contraction (a matrix product, shared or batched, or a "
    "broadcast sum): which one runs is a speed choice"
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
_add("geometry.doublet", "apply_in_channels", [
    ("r = u.shape[-1]", "r = u.shape[-2]"),
], "u is a square [..., r, r] group element")  # fmt: skip
for _name, _w in (("pair_products", "q"), ("pair_mixture", "w")):
    _test = (
        f"if {_w}.shape[1] == 1 and _broadcast_products({_w}.requires_grad or bank.requires_grad):"
    )
    _add("geometry.doublet", _name, [
        ("if bank.shape[0] == 1:", "if bank.shape[1] == 1:"),
        ("if bank.shape[0] == 1:", "if bank.shape[0] == 2:"),
        (_test, _test.replace("shape[1]", "shape[2]")),
        (_test, f"if {_w}.shape[1] == 1 and _broadcast_products(None):"),
        (_test, _test.replace(" or ", " and ")),
    ], _SAME_CONTRACTION)  # fmt: skip
_add("geometry.doublet", "chiral_gate_vjp", [
    ("_, groups = _doublet_layout(n_colors, out.shape[-1], out.dtype, out.device)", "_, groups = _doublet_layout(n_colors, out.shape[-1], out.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.doublet", "_apply_operator", [
    ("if op.shape[:-2].numel() == 1:", "if op.shape[:+2].numel() == 1:"),
    ("if op.shape[:-2].numel() == 1:", "if op.shape[:-2].numel() == 2:"),
    ("if _broadcast_products(op.requires_grad or x.requires_grad):", "if _broadcast_products(None):"),
    ("if _broadcast_products(op.requires_grad or x.requires_grad):", "if _broadcast_products(op.requires_grad and x.requires_grad):"),
], _SAME_CONTRACTION)  # fmt: skip
_add("geometry.potentials", "inverse_distance_patches", [
    ("shared = keys.shape[0] == 1 and z.shape[0] != 1  # one bank for every row: plain matmuls", f"shared = {after}  # one bank for every row: plain matmuls")
    for after in ("None", "keys.shape[0] == 1 and z.shape[1] != 1", "keys.shape[0] == 1 and z.shape[0] == 1",
                  "keys.shape[0] == 1 and z.shape[0] != 2")
] + [
    ("t = _bank_t(z, keys, shared).clamp_min(torch.finfo(z.dtype).tiny)  # [B, C]", "t = _bank_t(z, keys, None).clamp_min(torch.finfo(z.dtype).tiny)  # [B, C]"),
    ("patches = (keys * slopes).sum(-1) - _bank_apply(slopes, z, shared)", "patches = (keys * slopes).sum(-1) - _bank_apply(slopes, z, None)"),
    ("pull = _bank_combine(e, keys, shared) - z * scale  # [B, d]", "pull = _bank_combine(e, keys, None) - z * scale  # [B, d]"),
    ("average = _bank_combine(weights, slopes, shared)  # sum_i W_i f_i [B, d]", "average = _bank_combine(weights, slopes, None)  # sum_i W_i f_i [B, d]"),
], "a shared bank is read either by matrix products or as per-row banks broadcast from one; "
   "the mutants choose the per-row form where the bank is shared, or the shared form for a "
   "single query and a single bank: the same values")  # fmt: skip
_add("geometry.potentials", "inverse_distance_patches", [
    ("held = mask.any(-1, keepdim=True)  # [Bk, 1]", "held = mask.any(+1, keepdim=True)  # [Bk, 1]"),
    ("weights = torch.softmax(logits, dim=-1) * mask  # [B, C]; a bank without entries: 0", "weights = torch.softmax(logits, dim=+1) * mask  # [B, C]; a bank without entries: 0"),
    ("phi = (weights * patches).sum(-1)  # [B]", "phi = (weights * patches).sum(+1)  # [B]"),
    ("coeff = weights * (patches - phi.unsqueeze(-1)) * (2.0 / (d2 + eps) + tension)", "coeff = weights * (patches - phi.unsqueeze(+1)) * (2.0 / (d2 + eps) + tension)"),
    ("scale = e.sum(-1, keepdim=True) + (coeff * t / (1.0 + t)).sum(-1, keepdim=True)  # [B, 1]", "scale = e.sum(+1, keepdim=True) + (coeff * t / (1.0 + t)).sum(-1, keepdim=True)  # [B, 1]"),
    ("scale = e.sum(-1, keepdim=True) + (coeff * t / (1.0 + t)).sum(-1, keepdim=True)  # [B, 1]", "scale = e.sum(-1, keepdim=True) + (coeff * t / (1.0 + t)).sum(+1, keepdim=True)  # [B, 1]"),
], "mask, logits, weights and patches are [B, C] and phi is [B] (z [B, d]): dim 1 is dim -1, "
   "and a new last axis of a 1-D tensor is axis 1")  # fmt: skip
_add("geometry.potentials", "inverse_distance_patches", [
    ("logits = logits.masked_fill(~mask, -torch.inf).masked_fill(~held, 0.0)", "logits = logits.masked_fill(~mask, -torch.inf).masked_fill(~held, 1.0)"),
], "only rows without a held entry are filled, wholly, and those rows' weights are multiplied by "
   "the all-False mask")  # fmt: skip
_add("geometry.potentials", "_dist_over_gyro_norm", [
    ("small = t < 1e-2", "small = t <= 1e-2"),
], "at t = 1e-2 exactly the series and the quotient agree to the series' truncation (< 2e-9 "
   "relative); no test can pin which one a single point takes")  # fmt: skip
_add("geometry.su2", "quaternion_adjoint", [
    ("_, adjoint = _quaternion_tables(q.dtype, q.device)", "_, adjoint = _quaternion_tables(q.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.wilson_lines", "segmented_group_line_vjp", [
    ("e = torch.cat([blocks.flatten(-2), e0[..., k:].expand(*blocks.shape[:-2], -1)], dim=-1)", "e = torch.cat([blocks.flatten(-2), e0[..., k:].expand(*blocks.shape[:-2], +1)], dim=-1)"),
], "the U(1) component after the SU(2)-type ones is one number: expanding it to size 1 is -1")  # fmt: skip
_add("geometry.doublet", "_gate_terms", [
    ("_, groups = _doublet_layout(n_colors, k, out.dtype, out.device)", "_, groups = _doublet_layout(n_colors, k, out.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.poincare", "logmap0_jacobian", [
    ("small = r2 < 0.05**2", "small = r2 <= 0.05**2"),
], "at r = 0.05 exactly the series and the exact forms agree to the series' truncation (5e-11 "
   "relative in g); no test can pin which one a single point takes")  # fmt: skip
_add("geometry.wilson_lines", "_prefix_products", [
    ("while offset < pieces.shape[0]:", "while offset <= pieces.shape[0]:"),
], "the extra pass at offset = S multiplies two empty slices: the scan is unchanged")  # fmt: skip
