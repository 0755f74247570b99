"""Equivalent surviving mutants of world_model/attention/ (krr modules; see this package's
__init__.py)."""

from benchmarks.mutation_equivalent._table import (
    DEVICE_ONLY,
    EINSUM_CASE,
    LAST_OF_TWO,
    Table,
)

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_M = "world_model.attention."
_STANDIN = (
    "the stand-in divisor is used only where v_i = 0, whose coefficient the outer where sets to "
    "0 (value and gradient alike): any non-zero stand-in gives the same"
)
_ONE = (
    "the default XSA scale is the 0-d tensor 1, exact in every dtype, and a 0-d tensor does not "
    "change the dtype of the tensors it multiplies (type promotion)"
)
_LAM_VIEW = (
    "krr_attention reads no shape of lam but expands it to [..., 1, 1]: lam [1] and lam [1, 1] "
    "expand to the same tensor"
)
_SQUARE_CHECKED = "the first test has refused a non-square K: K.shape[-2] is K.shape[-1] here"
_ITERS = (
    "iters is int64: adding the bool active to it promotes to int64 and counts True as 1, as the "
    "int64 cast does"
)
_DIRECT_DEFAULT = "Solve's direct defaults to None"
_SQUARE_CHOL = (
    "K + lam I needs a square K [..., n, n], where K.shape[-2] is K.shape[-1]; a non-square K "
    "fails that sum either way"
)
_SQUARE_SYSTEM = (
    "the system a preconditioner is built for is square (K [..., n, n]): K.shape[-2] is K.shape[-1]"
)
_LAM64 = (
    "lam is a tensor here and meets the float64 K in K + lam I, where type promotion makes it "
    "float64 as .double() does (a float32 value is exact in float64)"
)
_NONZERO = "nonzero() of the 1-D redo is [k, 1]: " + LAST_OF_TWO
_POWER_OF_TWO = (
    "Sigma is divided by its trace at the end of each step: doubling the weights doubles Sigma "
    "and its trace exactly (a power of 2), and the division takes the factor out exactly"
)
_FRESH_CACHE = (
    'a fresh preconditioner has no build: with its cache or its key None or "", the first '
    "prepare finds the key different and builds; reset_cache sets both to None and nothing else "
    "reads them"
)
_IMPORTANCE_SLICE = (
    "B has min(rank, n) columns and the importance rank: slicing the importance at n or at "
    "min(rank, n) takes the same columns"
)

_add(_M + "krr", "xsa_project", [
    ("c = torch.where(nonzero, (y * v).sum(-1, keepdim=True) / torch.where(nonzero, vv, 1.0), 0.0)", "c = torch.where(nonzero, (y * v).sum(-1, keepdim=True) / torch.where(nonzero, vv, 2.0), 0.0)"),
], _STANDIN)  # fmt: skip
_add(_M + "krr", "krr_attention", [
    ("scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, device=q.device)", "scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=None, device=q.device)"),
    ("scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, device=q.device)", "scale = xsa_scale if xsa_scale is not None else torch.ones((), device=q.device)"),
], _ONE)  # fmt: skip
_add(_M + "krr", "krr_attention", [
    ("scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, device=q.device)", "scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, device=None)"),
    ("scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, device=q.device)", "scale = xsa_scale if xsa_scale is not None else torch.ones((), dtype=q.dtype, )"),
    ("lam = torch.as_tensor(lam, dtype=q.dtype, device=q.device)", "lam = torch.as_tensor(lam, dtype=q.dtype, device=None)"),
    ("lam = torch.as_tensor(lam, dtype=q.dtype, device=q.device)", "lam = torch.as_tensor(lam, dtype=q.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "krr", "krr_attention", [
    ('out = torch.einsum("...qk,...qkd->...qd", K_qk, alpha)', 'out = torch.einsum("...QK,...QKD->...QD", K_qk, alpha)'),
], EINSUM_CASE)  # fmt: skip
_add(_M + "krr", "KernelRidgeAttentionǁforward", [
    ("lam = lam.view(-1, 1, 1) if heads_axis else lam.view(1, 1)", "lam = lam.view(-1, 1, 1) if heads_axis else lam.view(1)"),
    ("lam = lam.view(-1, 1, 1) if heads_axis else lam.view(1, 1)", "lam = lam.view(-1, 1, 1) if heads_axis else lam.view(1, )"),
], _LAM_VIEW)  # fmt: skip
_add(_M + "krr_solver", "pcg", [
    ("if K.shape[-1] != K.shape[-2] or K.shape[-1] != v.shape[-2]:", "if K.shape[-1] != K.shape[-2] or K.shape[-2] != v.shape[-2]:"),
], _SQUARE_CHECKED)  # fmt: skip
_add(_M + "krr_solver", "pcg", [
    ("iters = iters + active.to(torch.int64)", "iters = iters + active.to(None)"),
], _ITERS)  # fmt: skip
_add(_M + "krr_solver", "pcg", [
    ("x=x, iters=iters.squeeze(-2), converged=res <= tol, res=res, history=history, direct=None / )", "x=x, iters=iters.squeeze(-2), converged=res <= tol, res=res, history=history, )"),
], _DIRECT_DEFAULT)  # fmt: skip
_add(_M + "krr_solver", "cholesky_spd_solve", [
    ("n = K.shape[-1]", "n = K.shape[-2]"),
], _SQUARE_CHOL)  # fmt: skip
_add(_M + "krr_solver", "cholesky_spd_solve", [
    ("eye = torch.eye(n, dtype=K.dtype, device=K.device)", "eye = torch.eye(n, dtype=K.dtype, device=None)"),
    ("eye = torch.eye(n, dtype=K.dtype, device=K.device)", "eye = torch.eye(n, dtype=K.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "krr_solver", "cholesky_spd_solve", [
    ("lam64 = lam.double() if isinstance(lam, Tensor) else lam", "lam64 = lam.double() if (isinstance(lam, Tensor)) and False else lam"),
], _LAM64)  # fmt: skip
_add(_M + "krr_solver", "solve_spd", [
    ("lam_t = torch.as_tensor(lam, dtype=K.dtype, device=K.device)", "lam_t = torch.as_tensor(lam, dtype=K.dtype, device=None)"),
    ("lam_t = torch.as_tensor(lam, dtype=K.dtype, device=K.device)", "lam_t = torch.as_tensor(lam, dtype=K.dtype, )"),
    ("direct = torch.ones(K.shape[:-2], dtype=torch.bool, device=K.device)", "direct = torch.ones(K.shape[:-2], dtype=torch.bool, device=None)"),
    ("direct = torch.ones(K.shape[:-2], dtype=torch.bool, device=K.device)", "direct = torch.ones(K.shape[:-2], dtype=torch.bool, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "krr_solver", "solve_spd", [
    ("idx = redo.reshape(-1).nonzero().squeeze(-1)", "idx = redo.reshape(-1).nonzero().squeeze(+1)"),
], _NONZERO)  # fmt: skip
_add(_M + "krr_precond", "woodbury_factor", [
    ("eye = torch.eye(r, dtype=U.dtype, device=U.device)", "eye = torch.eye(r, dtype=U.dtype, device=None)"),
    ("eye = torch.eye(r, dtype=U.dtype, device=U.device)", "eye = torch.eye(r, dtype=U.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "krr_precond", "tyler_scatter", [
    ("sigma = torch.eye(p, dtype=samples.dtype, device=samples.device).expand(", "sigma = torch.eye(p, dtype=samples.dtype, device=None).expand("),
    ("sigma = torch.eye(p, dtype=samples.dtype, device=samples.device).expand(", "sigma = torch.eye(p, dtype=samples.dtype, ).expand("),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "krr_precond", "tyler_scatter", [
    ("w = 1.0 / quad.clamp_min(torch.finfo(samples.dtype).tiny)", "w = 2.0 / quad.clamp_min(torch.finfo(samples.dtype).tiny)"),
], _POWER_OF_TWO)  # fmt: skip
_add(_M + "krr_precond", "Preconditionerǁ__init__", [
    ("self._cache: tuple[Tensor, ...] | None = None", 'self._cache: tuple[Tensor, ...] | None = ""'),
    ("self._cache_key: tuple | None = None", 'self._cache_key: tuple | None = ""'),
], _FRESH_CACHE)  # fmt: skip
_add(_M + "krr_precond", "Preconditionerǁprepare", [
    ("lam = torch.as_tensor(lam, dtype=K.dtype, device=K.device)", "lam = torch.as_tensor(lam, dtype=K.dtype, device=None)"),
    ("lam = torch.as_tensor(lam, dtype=K.dtype, device=K.device)", "lam = torch.as_tensor(lam, dtype=K.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "krr_precond", "LowRankPreconditionerǁlow_rank_factor", [
    ("n = K.shape[-1]", "n = K.shape[-2]"),
], _SQUARE_SYSTEM)  # fmt: skip
_add(_M + "krr_precond", "LowRankPreconditionerǁlow_rank_factor", [
    ("imp = F.softplus(self.importance[:, : B.shape[-1]])  # [heads, r']", "imp = F.softplus(self.importance[:, : B.shape[-2]])  # [heads, r']"),
], _IMPORTANCE_SLICE)  # fmt: skip
