"""Equivalent surviving mutants of world_model/attention/ (covariant modules; see this package's
__init__.py)."""

from benchmarks.mutation_equivalent._table import (
    CPU_DEFAULT_DTYPE,
    DEVICE_ONLY,
    LAST_OF_TWO,
    NEW_LAST_AXIS,
    Table,
)

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_M = "world_model.attention."

# ---------------------------------------------------------------- covariant_kernels

_add(_M + "covariant_kernels", "_krr_ridge_inverse", [
    ("eye = torch.eye(keys.shape[-2], dtype=keys.dtype, device=keys.device)", "eye = torch.eye(keys.shape[-2], dtype=keys.dtype, device=None)"),
    ("eye = torch.eye(keys.shape[-2], dtype=keys.dtype, device=keys.device)", "eye = torch.eye(keys.shape[-2], dtype=keys.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "covariant_kernels", "_krr_ridge_inverse", [
    ("keep = mask.to(keys.dtype)  # [Bc, N]", "keep = mask.to(None)  # [Bc, N]"),
], "a bool mask multiplies as 0/1 by type promotion (the keys' dtype), in the k_kk line and in "
   "the inverse's: the same products")  # fmt: skip
_add(_M + "covariant_kernels", "_krr_ridge_inverse", [
    ("inv = inv * keep.unsqueeze(-1) * keep.unsqueeze(-2)", "inv = inv * keep.unsqueeze(+1) * keep.unsqueeze(-2)"),
    ("inv = inv * keep.unsqueeze(-1) * keep.unsqueeze(-2)", "inv = inv * keep.unsqueeze(-2) * keep.unsqueeze(-2)"),
    ("inv = inv * keep.unsqueeze(-1) * keep.unsqueeze(-2)", "inv = inv * keep.unsqueeze(-1) * keep.unsqueeze(+2)"),
], "the masked system K_kk keep keep^T + lam I is block diagonal (valid block, lam I on the "
   "masked entries), so its inverse is 0 between valid and masked entries: zeroing only the "
   "masked rows or only the masked columns zeroes the same entries as both")  # fmt: skip

# ---------------------------------------------------------------- context

_add(_M + "context", "take_entries", [
    ("return t[torch.arange(index.shape[0], device=index.device).unsqueeze(-1), index]", "return t[torch.arange(index.shape[0], device=None).unsqueeze(-1), index]"),
    ("return t[torch.arange(index.shape[0], device=index.device).unsqueeze(-1), index]", "return t[torch.arange(index.shape[0], ).unsqueeze(-1), index]"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "context", "take_entries", [
    ("return t[torch.arange(index.shape[0], device=index.device).unsqueeze(-1), index]", "return t[torch.arange(index.shape[0], device=index.device).unsqueeze(+1), index]"),
], "the row numbers are a 1-D arange: " + NEW_LAST_AXIS)  # fmt: skip
_add(_M + "context", "ContextBankǁat_level", [
    ("levels = torch.full(positions.shape[:2], level, dtype=torch.long, device=positions.device)", "levels = torch.full(positions.shape[:2], level, dtype=torch.long, device=None)"),
    ("levels = torch.full(positions.shape[:2], level, dtype=torch.long, device=positions.device)", "levels = torch.full(positions.shape[:2], level, dtype=torch.long, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "context", "ContextBankǁat_level", [
    ("levels = torch.full(positions.shape[:2], level, dtype=torch.long, device=positions.device)", "levels = torch.full(positions.shape[:2], level, dtype=None, device=positions.device)"),
    ("levels = torch.full(positions.shape[:2], level, dtype=torch.long, device=positions.device)", "levels = torch.full(positions.shape[:2], level, device=positions.device)"),
], "torch.full infers int64 from a Python int fill: " + CPU_DEFAULT_DTYPE)  # fmt: skip
_add(_M + "context", "ContextBankǁvalid_mask", [
    ("return torch.ones(self.positions.shape[:2], dtype=torch.bool, device=self.positions.device)", "return torch.ones(self.positions.shape[:2], dtype=torch.bool, device=None)"),
    ("return torch.ones(self.positions.shape[:2], dtype=torch.bool, device=self.positions.device)", "return torch.ones(self.positions.shape[:2], dtype=torch.bool, )"),
], DEVICE_ONLY)  # fmt: skip

# ---------------------------------------------------------------- covariant_types

_add(_M + "covariant_types", "PreparedContextǁcat", [
    ("for r, p in zip(rows, parts, strict=True)", f"for r, p in zip(rows, parts, {after})")
    for after in ("strict=None", "", "strict=False")
] + [
    ("[o + p.charged_columns() for o, p in zip(offsets[:-1], parts, strict=True)]", f"[o + p.charged_columns() for o, p in zip(offsets[:-1], parts, {after})]")
    for after in ("strict=None", "", "strict=False")
], "both sides of each zip have one element per part: rows is read from parts, and offsets "
   "has one more (the end) than parts")  # fmt: skip
_add(_M + "covariant_types", "PreparedContextǁcat", [
    ("charged_index = torch.cat( / [o + p.charged_columns() for o, p in zip(offsets[:-1], parts, strict=True)] / )", "charged_index = None"),
    ("charged_index=charged_index,", "charged_index=None,"),
    ("charged_index=charged_index,", ""),
], "without the parts' columns the joined bank finds its charged columns on first read "
   "(charged_columns: charged in some row of the joined levels), the same columns: the parts' "
   "columns, offset, only save that read")  # fmt: skip
_add(_M + "covariant_types", "PreparedContextǁcat", [
    ("charged=any(p.charged for p in parts),", ""),
], "charged (default True) only skips work: a bank without charged entries screens none "
   "(its charged columns are empty, the screening's index_add adds nothing)")  # fmt: skip
_add(_M + "covariant_types", "charged_entry_columns", [
    ("return (levels != MACRO_LEVEL).any(0).nonzero().squeeze(-1)", "return (levels != MACRO_LEVEL).any(0).nonzero().squeeze(+1)"),
], "nonzero() of the 1-D row is [C, 1]: " + LAST_OF_TWO)  # fmt: skip

_add(_M + "covariant_types", "PreparedContextǁmixture", [
    ("sizes = [blk[0].shape[1] for blk in self.blocks]", "sizes = [blk[1].shape[1] for blk in self.blocks]"),
], "a block's keys and values are both [1 or B, N_i, d_k]: the same N_i")  # fmt: skip
_add(_M + "covariant_types", "PreparedContextǁmixture", [
    ("parts = zip(w.split(sizes, dim=-1), self.blocks, strict=True)", f"parts = zip(w.split(sizes, dim=-1), self.blocks, {after})")
    for after in ("strict=None", "", "strict=False")
], "w is split into one chunk per block (sizes has one entry per block)")  # fmt: skip

_add(_M + "covariant_types", "CovariantQueriesǁunchecked", [
    ("setattr(queries, name, values.pop(name, default))", "setattr(queries, name, values.pop(name, None))"),
], "every optional field's default is None; positions and features have none (MISSING): a "
   "caller that omits one gets queries whose first use fails on the missing tensor either way")  # fmt: skip

# ---------------------------------------------------------------- covariant

_add(_M + "covariant", "CovariantAttentionǁlines_to_origin", [
    ("eye = torch.eye(self.rep_dim, dtype=positions.dtype, device=positions.device)", "eye = torch.eye(self.rep_dim, dtype=positions.dtype, device=None)"),
    ("eye = torch.eye(self.rep_dim, dtype=positions.dtype, device=positions.device)", "eye = torch.eye(self.rep_dim, dtype=positions.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁtemperature", [
    ("device=positions.device,", "device=None,"),
    ("device=positions.device, / )", ")"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁforward", [
    ("levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=z.device)", "levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=None)"),
    ("levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=z.device)", "levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁforward", [
    ("levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=z.device)", "levels = torch.full(z.shape[:-1], cfg.query_level, dtype=None, device=z.device)"),
    ("levels = torch.full(z.shape[:-1], cfg.query_level, dtype=torch.long, device=z.device)", "levels = torch.full(z.shape[:-1], cfg.query_level, device=z.device)"),
], "query_level is a Python int (CovariantAttentionConfig checks it), so torch.full infers "
   "int64: " + CPU_DEFAULT_DTYPE)  # fmt: skip

# ---------------------------------------------------------------- covariant_gradient

_add(_M + "covariant_gradient", "scalar_output_gradient", [
    ("charged = (levels_c != MACRO_LEVEL).to(z.dtype)  # [Bc, C]", "charged = (levels_c != MACRO_LEVEL).to(None)  # [Bc, C]"),
], "the bool flags multiply as 0/1 by type promotion (the area's and b's dtype): the same "
   "products")  # fmt: skip
_add(_M + "covariant_gradient", "scalar_output_gradient", [
    ("logits = logits.index_add(-1, cols, -(sigma_q * area * charged))", "logits = logits.index_add(+1, cols, -(sigma_q * area * charged))"),
], "the single queries' logits are [B, N]: " + LAST_OF_TWO)  # fmt: skip
_add(_M + "covariant_gradient", "scalar_output_gradient", [
    ("*chiral[2:], / )", ")"),
], "queries.chiral's operator is chiral_operator(Pi) in the fields' dtype "
   "(CovariantAttention.chiral_inputs); without it chiral_gate_vjp builds that same operator "
   "from Pi")  # fmt: skip
_add(_M + "covariant_gradient", "scalar_output_gradient", [
    ("*chiral[2:],", "*chiral[3:],"),
], "queries.chiral holds at most (Pi, degenerate, operator): dropping the operator, and "
   "chiral_gate_vjp builds the same operator from Pi")  # fmt: skip
_add(_M + "covariant_gradient", "scalar_output_gradient", [
    ("b = weights * (a_values - (out * a).sum(-1, keepdim=True))  # [B, N]", "b = weights * (a_values - (out * a).sum(+1, keepdim=True))  # [B, N]"),
    ("grad_z = (b * scores).sum(-1, keepdim=True) * sqrt_dk * z / tau.square()", "grad_z = (b * scores).sum(+1, keepdim=True) * sqrt_dk * z / tau.square()"),
    ("grad_z = grad_z + lam * jq + (y * quad).sum(-1, keepdim=True) * lam.square() * z", "grad_z = grad_z + lam * jq + (y * quad).sum(+1, keepdim=True) * lam.square() * z"),
], "out, a, y, quad are [B, k] and b, scores [B, N] (single queries): " + LAST_OF_TWO)  # fmt: skip
_add(_M + "covariant_gradient", "scalar_output_gradient", [
    ("z, pos_c, b[:, cols] * charged, lam, delta2", "z, pos_c, b[:, cols] * charged, None, delta2"),
    ("z, pos_c, b[:, cols] * charged, lam, delta2", "z, pos_c, b[:, cols] * charged, lam, None"),
    ("z, pos_c, b[:, cols] * charged, lam, delta2 / )", "z, pos_c, b[:, cols] * charged, lam, )"),
], "weighted_string_area_grad recomputes a missing lambda(z) or |z - z'|^2 from z: the same "
   "values (the arguments only reuse the area's; at most the order of autograd's sums in a "
   "double backward differs, in the last bits, see the comment above lambda)")  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁ__init__", [
    (f"{attr} = nn.Linear({args}, bias=False)", f"{attr} = nn.Linear({args}, bias=None)")
    for attr, args in (
        ("self.w_q", "cfg.d_query, k"), ("self.w_qz", "d, k"), ("self.w_q_christoffel", "d, k"),
        ("self.w_k", "cfg.d_key, k"), ("self.w_v", "cfg.d_value, k"), ("self.w_o", "k, cfg.d_out"),
        ("self.value_grad_proj", "d, 3"),
    )
] + [
    ("nn.Linear(cfg.d_velocity_features, k, bias=False) if cfg.d_velocity_features else None", "nn.Linear(cfg.d_velocity_features, k, bias=None) if cfg.d_velocity_features else None"),
], "nn.Linear reads bias as a truth value: None, like False, makes no bias")  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁforward", [
    ("query_lines = query_lines.unsqueeze(1)", "query_lines = query_lines.unsqueeze(2)"),
], "lines [B, r, 1, r] against the query's columns [B, 1, r, m] broadcast row i of U into batch "
   "slot i, so apply_in_channels' product and its reshape back to d_k give U @ cols's elements "
   "in the same order")  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁforward", [
    ("out, projectors, cfg.options.n_colors, self.chirality_strength, *operator / )", "out, projectors, cfg.options.n_colors, self.chirality_strength, )"),
], "the precomputed operator is chiral_operator(Pi) in the fields' dtype; without it chiral_gate "
   "builds the same operator from the projectors")  # fmt: skip
_LAZY_INDEX = (
    "PreparedContext computes a missing charged_index from the same levels on first read "
    "(charged_columns): passing it only saves that computation"
)
_CHARGED = (
    "charged=True (the default) only keeps the screening path on: with no charged entry it "
    "sums the area law over no columns, adding 0 (tests/world_model/test_covariant.py compares "
    "both flags' outputs where it matters: charged entries present)"
)
_add(_M + "covariant", "CovariantAttentionǁprepare", [
    ("charged_index=charged_index,", "charged_index=None,"),
    ("charged_index=charged_index,", ""),
], _LAZY_INDEX)  # fmt: skip
_add(_M + "covariant", "CovariantAttentionǁprepare", [
    ("charged=bool(charged_index.numel()),", ""),
], _CHARGED)  # fmt: skip
