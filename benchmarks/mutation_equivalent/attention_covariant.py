"""Equivalent surviving mutants of world_model/attention/ (covariant modules; see this package's
__init__.py)."""

from benchmarks.mutation_equivalent._table import (
    CPU_DEFAULT_DTYPE,
    DEVICE_ONLY,
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
