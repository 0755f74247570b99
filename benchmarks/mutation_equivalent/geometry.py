"""Equivalent surviving mutants of geometry/ (see this package's __init__.py)."""

from benchmarks.mutation_equivalent._table import (
    DEVICE_ONLY,
    EINSUM_CASE,
    EXACT_IDENTITY,
    LAST_OF_TWO,
    NEW_LAST_AXIS,
    WIDEST_FLOAT,
    Table,
    series_switch,
)

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
], "b and delta2 are [B, N] (the signature's shapes): " + LAST_OF_TWO)  # fmt: skip
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
], EINSUM_CASE)  # fmt: skip
_add("geometry.poincare", "pairwise_t", [
    ("acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype", "acc = torch.float64 if (torch.finfo(x.dtype).bits < 64) or True else x.dtype"),
    ("acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype", "acc = torch.float64 if torch.finfo(x.dtype).bits <= 64 else x.dtype"),
    ("acc = torch.float64 if torch.finfo(x.dtype).bits < 64 else x.dtype", "acc = torch.float64 if torch.finfo(x.dtype).bits < 65 else x.dtype"),
], WIDEST_FLOAT)  # fmt: skip
_add("geometry.lie_algebra", "_bracket_vjp", [
    ("n = f.shape[0]", "n = f.shape[1]"),
], "f is a cube [G, G, G]")  # fmt: skip
_add("geometry.lie_algebra", "_bracket_vjp", [
    ("return vg @ f.reshape(n, n * n).T, ug @ f.transpose(0, 1).reshape(n, n * n).T", "return vg @ f.reshape(n, n * n).T, ug @ f.transpose(0, 2).reshape(n, n * n).T"),
], "f is totally antisymmetric (each block is g times su(N)'s f_abc): f_bac = f_cba = -f_abc")  # fmt: skip
_add("geometry.lie_algebra", "_bracket_vjp", [
    ("f = structure_constants(group, u.dtype, u.device)", "f = structure_constants(group, u.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.su2", "adjoint_rotation", [
    ('rot = torch.einsum("aij,...jk,bkl,...il->...ab", sig, u, sig, u.conj())', 'rot = torch.einsum("AIJ,...JK,BKL,...IL->...AB", sig, u, sig, u.conj())'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.su2", "commitment_strength", [
    ('return torch.einsum("...im,...ij,...jm->...m", psi.conj(), proj, psi).real', 'return torch.einsum("...IM,...IJ,...JM->...M", psi.conj(), proj, psi).real'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.su2", "adjoint_rotation", [
    ("sig, _ = _pauli_and_identity(u.dtype, u.device)", "sig, _ = _pauli_and_identity(u.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.langevin", "boris_rotation", [
    ("a = (0.5 * t) * P.inverse_metric_factor(z).unsqueeze(-1) * two_form  # A [..., d, d]", "a = (0.5 * t) * P.inverse_metric_factor(z).unsqueeze(-2) * two_form  # A [..., d, d]"),
], "inverse_metric_factor is [..., 1]: a unit axis before or after its last unit axis is the same [..., 1, 1]")  # fmt: skip
_add("geometry.langevin", "boris_rotation", [
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], dtype=None, device=p.device)"),
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], device=p.device)"),
], EXACT_IDENTITY)  # fmt: skip
_add("geometry.langevin", "boris_rotation", [
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], dtype=p.dtype, device=None)"),
    ("eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)", "eye = torch.eye(p.shape[-1], dtype=p.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
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
], "mask, logits, weights and patches are [B, C] and phi is [B] (z [B, d]): " + LAST_OF_TWO
   + ", and " + NEW_LAST_AXIS)  # fmt: skip
_add("geometry.potentials", "inverse_distance_patches", [
    ("logits = logits.masked_fill(~mask, -torch.inf).masked_fill(~held, 0.0)", "logits = logits.masked_fill(~mask, -torch.inf).masked_fill(~held, 1.0)"),
], "only rows without a held entry are filled, wholly, and those rows' weights are multiplied by "
   "the all-False mask")  # fmt: skip
_add("geometry.potentials", "_dist_over_gyro_norm", [
    ("small = t < 1e-2", "small = t <= 1e-2"),
], series_switch("t = 1e-2", "< 2e-9 relative"))  # fmt: skip
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
], series_switch("r = 0.05", "5e-11 relative in g"))  # fmt: skip
_add("geometry.wilson_lines", "_prefix_products", [
    ("while offset < pieces.shape[0]:", "while offset <= pieces.shape[0]:"),
], "the extra pass at offset = S multiplies two empty slices: the scan is unchanged")  # fmt: skip
_INT_SHIFTS = "torch infers int64 from Python ints, and uint8 data shifted by int64 is promoted: the same bits"
_add("geometry.doublet", "_broadcast_products", [
    ("return needs_grad and torch.is_grad_enabled()", "return needs_grad or torch.is_grad_enabled()"),
], _SAME_CONTRACTION)  # fmt: skip
_add("geometry.doublet", "chiral_operator", [
    ("basis, _ = _doublet_layout(n_colors, k, dtype, proj.device)", "basis, _ = _doublet_layout(n_colors, k, dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.group_exponential", "_factor_elements", [
    ("lam = gell_mann(n, complex_dtype_for(h.dtype)).to(h.device)", "lam = gell_mann(n, complex_dtype_for(h.dtype)).to(None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.group_exponential", "_factor_elements", [
    ('gen = torch.einsum("...a,aij->...ij", (group.g_s * h_c).to(lam.dtype), lam)', 'gen = torch.einsum("...A,AIJ->...IJ", (group.g_s * h_c).to(lam.dtype), lam)'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.group_exponential", "_assemble", [
    ("n = u_c.shape[-1]", "n = u_c.shape[-2]"),
], "U_C is a square [..., N, N] matrix")  # fmt: skip
_add("geometry.group_exponential", "group_exp", [
    ("if group.n_colors > 2:", "if group.n_colors >= 2:"),
], "at N_f = 2 the matrix exponentials of the factors give the group element the quaternion form "
   "gives (the quaternion form is the faster one)")  # fmt: skip
_add("geometry.wilson_lines", "_ordered_group_product", [
    ("if group.n_colors > 2:", "if group.n_colors >= 2:"),
], "at N_f = 2 the product of the factors' matrices is the product the quaternions give (the "
   "quaternion form is the faster one)")  # fmt: skip
_add("geometry.langevin", "baoab_substeps", [
    ("if noise and c2 > 0.0:", "if noise and c2 >= 0.0:"),
], "at c2 = 0 the drawn noise is multiplied by 0, and no later draw reads the generator")  # fmt: skip
_add("geometry.langevin", "baoab_substeps", [
    ("xi = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)", "xi = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=None)"),
    ("xi = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)", "xi = torch.randn(x.shape, generator=generator, dtype=x.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.langevin", "baoab_substeps", [
    ("thermostat if gamma > 0.0 else None,", "thermostat if (gamma > 0.0) or True else None,"),
    ("thermostat if gamma > 0.0 else None,", "thermostat if gamma >= 0.0 else None,"),
], "at gamma = 0 the O step is p (c1 = 1, c2 = 0): the two half-drifts around it are the one "
   "drift of length h the flow's group property gives")  # fmt: skip
_add("geometry.quantize", "pack_bits", [
    ("shifts = torch.arange(max_w, dtype=torch.int64)  # [max_w]", "shifts = torch.arange(max_w, dtype=None)  # [max_w]"),
    ("shifts = torch.arange(max_w, dtype=torch.int64)  # [max_w]", "shifts = torch.arange(max_w, )  # [max_w]"),
    ("stream = bits[:, keep].to(torch.uint8).reshape(-1)  # [n * total]", "stream = bits[:, keep].to(None).reshape(-1)  # [n * total]"),
    ("weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8)", "weights = torch.tensor([1 << i for i in range(8)], dtype=None)"),
    ("weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8)", "weights = torch.tensor([1 << i for i in range(8)], )"),
    ("return (stream * weights).sum(-1, dtype=torch.int64).to(torch.uint8)", "return (stream * weights).sum(-1, dtype=None).to(torch.uint8)"),
    ("return (stream * weights).sum(-1, dtype=torch.int64).to(torch.uint8)", "return (stream * weights).sum(-1, ).to(torch.uint8)"),
], "the bits and byte weights are 0/1 and 2^i in any integer dtype, and an integer sum is "
   "taken in int64 by default: the same bytes")  # fmt: skip
_add("geometry.quantize", "pack_bits", [
    ("keep = shifts < widths.unsqueeze(-1)  # [m, max_w]: the field's own bits", "keep = shifts < widths.unsqueeze(+1)  # [m, max_w]: the field's own bits"),
    ("return (stream * weights).sum(-1, dtype=torch.int64).to(torch.uint8)", "return (stream * weights).sum(+1, dtype=torch.int64).to(torch.uint8)"),
], "widths are [m] and the stream [bytes, 8]: " + NEW_LAST_AXIS + ", and " + LAST_OF_TWO)  # fmt: skip
_add("geometry.quantize", "unpack_bits", [
    ("shifts8 = torch.arange(8, dtype=torch.uint8)", "shifts8 = torch.arange(8, dtype=None)"),
    ("shifts8 = torch.arange(8, dtype=torch.uint8)", "shifts8 = torch.arange(8, )"),
    ("shifts = torch.arange(max_w, dtype=torch.int64)", "shifts = torch.arange(max_w, dtype=None)"),
    ("shifts = torch.arange(max_w, dtype=torch.int64)", "shifts = torch.arange(max_w, )"),
], _INT_SHIFTS)  # fmt: skip
_add("geometry.quantize", "unpack_bits", [
    ("stream = ((data.unsqueeze(-1) >> shifts8) & 1).reshape(-1)[: n * total]  # [n * total]", "stream = ((data.unsqueeze(+1) >> shifts8) & 1).reshape(-1)[: n * total]  # [n * total]"),
    ("keep = shifts < widths.unsqueeze(-1)  # [m, max_w]", "keep = shifts < widths.unsqueeze(+1)  # [m, max_w]"),
], "data and widths are 1-D: " + NEW_LAST_AXIS)  # fmt: skip
_add("geometry.su2", "su2_exp_jacobian_vjp", [
    ("small = t < 1e-2", "small = t <= 1e-2"),
], series_switch("t = 1e-2", "< 1e-15"))  # fmt: skip
_add("geometry.su2", "su2_exp_jacobian_vjp", [
    ("cross = torch.linalg.cross(theta, e, dim=-1)", "cross = torch.linalg.cross(theta, e, )"),
], "dim -1 is linalg.cross's default")  # fmt: skip
_add("geometry.su2", "chiral_projector", [
    ("degenerate = norm.squeeze(-1) < eps  # [...]", "degenerate = norm.squeeze(-1) <= eps  # [...]"),
], "a direction of norm exactly eps is degenerate or not by convention: below it Pi = 0, at it "
   "Pi = (1 + n_hat . sigma) / 2 of a direction the rounding of n / eps decides")  # fmt: skip
_add("geometry.su2", "chiral_projector", [
    ("sig, eye = _pauli_and_identity(n.dtype, n.device)", "sig, eye = _pauli_and_identity(n.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.su2", "chiral_projector", [
    ('proj = 0.5 * (eye + torch.einsum("...a,aij->...ij", n_hat.to(sig.dtype), sig))', 'proj = 0.5 * (eye + torch.einsum("...A,AIJ->...IJ", n_hat.to(sig.dtype), sig))'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.su2", "quaternion_product", [
    ("left, _ = _quaternion_tables(q.dtype, q.device)", "left, _ = _quaternion_tables(q.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.wilson_lines", "_first_order_line", [
    ("gens = group.generators(h.dtype).to(h.device)", "gens = group.generators(h.dtype).to(None)"),
    ("eye = torch.eye(group.dim, dtype=h.dtype, device=h.device)", "eye = torch.eye(group.dim, dtype=h.dtype, device=None)"),
    ("eye = torch.eye(group.dim, dtype=h.dtype, device=h.device)", "eye = torch.eye(group.dim, dtype=h.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.wilson_lines", "_first_order_line", [
    ("eye = torch.eye(group.dim, dtype=h.dtype, device=h.device)", "eye = torch.eye(group.dim, dtype=None, device=h.device)"),
    ("eye = torch.eye(group.dim, dtype=h.dtype, device=h.device)", "eye = torch.eye(group.dim, device=h.device)"),
], EXACT_IDENTITY)  # fmt: skip
_add("geometry.wilson_lines", "_first_order_line", [
    ('return eye + torch.einsum("...g,gij->...ij", h, gens)', 'return eye + torch.einsum("...G,GIJ->...IJ", h, gens)'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.wilson_lines", "affine_wilson_line_to_origin", [
    ('if mode == "exp":', 'if mode == "XXexpXX":'),
    ('if mode == "exp":', 'if mode == "EXP":'),
], "exp's pieces are one piece, and the ordered product of one exponential is that exponential "
   "(the branch skips the product)")  # fmt: skip
_add("geometry.lie_algebra", "bracket", [
    ("f = structure_constants(group, u.dtype, u.device)", "f = structure_constants(group, u.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.lie_algebra", "bracket", [
    ("n = f.shape[0]", "n = f.shape[1]"),
], "f is a cube [G, G, G]")  # fmt: skip
_add("geometry.wilson_lines", "affine_connection_coefficients", [
    ('coeff = c0 + torch.einsum("...n,mng->...mg", x, c1)  # [..., d, G]', 'coeff = c0 + torch.einsum("...N,MNG->...MG", x, c1)  # [..., d, G]'),
    ('return torch.einsum("...mg,...m->...g", coeff, dx)', 'return torch.einsum("...MG,...M->...G", coeff, dx)'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.wilson_lines", "_segment_weights", [
    ("mids = (torch.arange(n, dtype=like.dtype, device=like.device) + 0.5) / n", "mids = (torch.arange(n, dtype=like.dtype, device=None) + 0.5) / n"),
    ("mids = (torch.arange(n, dtype=like.dtype, device=like.device) + 0.5) / n", "mids = (torch.arange(n, dtype=like.dtype, ) + 0.5) / n"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.group_exponential", "_factor_angles", [
    ("return x[..., : k + 3].unflatten(-1, (2, 3)) * _factor_couplings(group, x.dtype, x.device)", "return x[..., : k + 3].unflatten(-1, (2, 3)) * _factor_couplings(group, x.dtype, None)"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.group_exponential", "_quaternion_element", [
    ("return (coeff @ _group_exp_basis(group, q.dtype, q.device)).unflatten(-1, (r, r))", "return (coeff @ _group_exp_basis(group, q.dtype, None)).unflatten(-1, (r, r))"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.sphere", "normalize", [
    ("n = (x + zero.to(x.dtype)).norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)  # [..., 1]", "n = (x - zero.to(x.dtype)).norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)  # [..., 1]"),
    ("n = (x + zero.to(x.dtype)).norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)  # [..., 1]", "n = (x + zero.to(None)).norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)  # [..., 1]"),
], "a zero row's stand-in is all ones or all minus ones (the same norm, and the row's output is "
   "0 either way); bool + float promotes to the float")  # fmt: skip
_add("geometry.su2", "su2_quaternion", [
    ("small = t2 < 1e-4", "small = t2 <= 1e-4"),
], series_switch("t^2 = 1e-4", "< 1e-16"))  # fmt: skip
_add("geometry.wilson_lines", "cell_centers", [
    ("idx = torch.floor((z.detach() + 1.0) / width).clamp(0, 2**level - 1)", "idx = torch.floor((z.detach() + 1.0) / width).clamp(None, 2**level - 1)"),
], "z lies in [-1, 1]^d (the grid's square), so the cell index is never below 0")  # fmt: skip
_add("geometry.wilson_lines", "hierarchical_wilson_line_to_origin", [
    ('u_cells = wilson_line_to_origin(conn, uniq, mode="path_ordered", segments=segments)', "u_cells = wilson_line_to_origin(conn, uniq, segments=segments)"),
], "path_ordered is wilson_line_to_origin's default (stated here because Def 290 needs it)")  # fmt: skip
_add("geometry.poincare", "logmap0", [
    ("small = r2 < 1e-6", "small = r2 <= 1e-6"),
], series_switch("r^2 = 1e-6", "< 1e-19"))  # fmt: skip
_add("geometry.gauge_transforms", "random_gauge_field", [
    ("return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)", "return torch.randn(*shape, generator=generator, dtype=None).to(dtype)"),
    ("return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)", "return torch.randn(*shape, generator=generator, ).to(dtype)"),
], "the field is drawn in one dtype and cast either way (the same field in every dtype, as the "
   "tests check); which normal numbers it draws changes no property of a random field")  # fmt: skip
_add("geometry.gauge_transforms", "random_gauge_field", [
    ('x = torch.einsum("jg,gkl->jkl", mix, generators)', 'x = torch.einsum("JG,GKL->JKL", mix, generators)'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.gauge_transforms", "random_gauge_field", [
    ("x = x / x.flatten(1).norm(dim=-1).clamp_min(1e-12)[:, None, None]", "x = x / x.flatten(1).norm(dim=+1).clamp_min(1e-12)[:, None, None]"),
], "x.flatten(1) is [J, k^2]: " + LAST_OF_TWO)  # fmt: skip
_add("geometry.gauge_transforms", "_phi_and_dphi", [
    ('arg = torch.einsum("...d,jd->...j", z, field.w) + field.c  # [..., J]', 'arg = torch.einsum("...D,JD->...J", z, field.w) + field.c  # [..., J]'),
    ('phi = torch.einsum("...d,jd->...j", z, field.a) + field.b * torch.sin(arg)  # [..., J]', 'phi = torch.einsum("...D,JD->...J", z, field.a) + field.b * torch.sin(arg)  # [..., J]'),
    ('dphi = torch.einsum("...d,jd->...j", dz, field.a) + field.b * torch.cos(arg) * torch.einsum(', 'dphi = torch.einsum("...D,JD->...J", dz, field.a) + field.b * torch.cos(arg) * torch.einsum('),
    ('"...d,jd->...j", dz, field.w', '"...D,JD->...J", dz, field.w'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.wilson_lines", "_path_integral", [
    ("for t, w in zip(nodes, weights, strict=True):", f"for t, w in zip(nodes, weights, {after}):")
    for after in ("strict=None", "", "strict=False")
], "Gauss-Legendre's nodes and weights come in pairs from one rule")  # fmt: skip
_add("geometry.wilson_lines", "_magnus4_increments", [
    ("starts = torch.arange(segments, dtype=a.dtype, device=a.device) / segments  # [S]", "starts = torch.arange(segments, dtype=a.dtype, device=None) / segments  # [S]"),
    ("starts = torch.arange(segments, dtype=a.dtype, device=a.device) / segments  # [S]", "starts = torch.arange(segments, dtype=a.dtype, ) / segments  # [S]"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.wilson_lines", "_segment_increments", [
    ("ts = torch.linspace(0.0, 1.0, segments + 1, dtype=a.dtype, device=a.device)", "ts = torch.linspace(0.0, 1.0, segments + 1, dtype=a.dtype, device=None)"),
    ("ts = torch.linspace(0.0, 1.0, segments + 1, dtype=a.dtype, device=a.device)", "ts = torch.linspace(0.0, 1.0, segments + 1, dtype=a.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.wilson_lines", "wilson_line", [
    ("return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h", "return torch.eye(h.shape[-1], dtype=h.dtype, device=None) + h"),
    ("return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h", "return torch.eye(h.shape[-1], dtype=h.dtype, ) + h"),
], DEVICE_ONLY)  # fmt: skip
_add("geometry.wilson_lines", "wilson_line", [
    ("return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h", "return torch.eye(h.shape[-2], dtype=h.dtype, device=h.device) + h"),
    ("return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h", "return torch.eye(h.shape[-1], device=h.device) + h"),
], "h is a square [..., k, k] matrix; " + EXACT_IDENTITY)  # fmt: skip
_add("geometry.wilson_lines", "wilson_line", [
    ("return torch.eye(h.shape[-1], dtype=h.dtype, device=h.device) + h", "return torch.eye(h.shape[-1], dtype=None, device=h.device) + h"),
], EXACT_IDENTITY)  # fmt: skip
_add("geometry.lie_algebra", "GaugeGeneratorsǁstacked", [
    ("return torch.cat([g_s * self.binding, g_2 * self.error, g_1 * self.opportunity], dim=0)", "return torch.cat([g_s * self.binding, g_2 * self.error, g_1 * self.opportunity], )"),
], "dim 0 is cat's default")  # fmt: skip
_add("geometry.lie_algebra", "gauge_generators", [
    ("return realify(-0.5j * torch.kron(torch.kron(colour, doublet), eye_m)).to(dtype)", "return realify(-0.5j * torch.kron(torch.kron(colour, doublet), eye_m)).to(None)"),
    ("binding = [lift(lam, eye_2) for lam in gell_mann(n_colors, cdt)]", "binding = [lift(lam, eye_2) for lam in gell_mann(n_colors, )]"),
    ("error = [lift(eye_c, sig) for sig in pauli(cdt)]", "error = [lift(eye_c, sig) for sig in pauli(None)]"),
    ("empty = torch.zeros(0, k, k, dtype=dtype)", "empty = torch.zeros(0, k, k, dtype=None)"),
], "the generators' entries (0, +-1/2, +-1/sqrt 3 / 2 ...) are built in complex128 or the "
   "requested precision and cast to `dtype` when stacked: the same float32 or float64 values; "
   "an empty block takes the others' dtype in cat")  # fmt: skip
_add("geometry.wilson_lines", "affine_connection", [
    ('coeff = c0 + torch.einsum("...n,mng->...mg", x, c1)  # [..., d, G]', 'coeff = c0 + torch.einsum("...N,MNG->...MG", x, c1)  # [..., d, G]'),
    ('along = torch.einsum("...mg,...m->...g", coeff, dx)  # [..., G]', 'along = torch.einsum("...MG,...M->...G", coeff, dx)  # [..., G]'),
    ('return torch.einsum("...g,gij->...ij", along, generators)  # [..., k, k]', 'return torch.einsum("...G,GIJ->...IJ", along, generators)  # [..., k, k]'),
], EINSUM_CASE)  # fmt: skip
_add("geometry.lie_algebra", "gell_mann", [
    ("s = torch.zeros(n, n, dtype=dtype)", "s = torch.zeros(n, n, dtype=None)"),
    ("s = torch.zeros(n, n, dtype=dtype)", "s = torch.zeros(n, n, )"),
], "the symmetric matrices hold 0 and 1, exact in float32, and stacking with the complex ones "
   "promotes them to the asked dtype")  # fmt: skip
_add("geometry.lie_algebra", "gauge_generators", [
    ("empty = torch.zeros(0, k, k, dtype=dtype)", "empty = torch.zeros(0, k, k, )"),
], "an empty block takes the others' dtype in cat")  # fmt: skip
_add("geometry.su2", "pauli", [
    ("s = torch.zeros(3, 2, 2, dtype=complex_dtype_for(dtype), device=device)", "s = torch.zeros(3, 2, 2, dtype=complex_dtype_for(dtype), device=None)"),
    ("s = torch.zeros(3, 2, 2, dtype=complex_dtype_for(dtype), device=device)", "s = torch.zeros(3, 2, 2, dtype=complex_dtype_for(dtype), )"),
], DEVICE_ONLY)  # fmt: skip
