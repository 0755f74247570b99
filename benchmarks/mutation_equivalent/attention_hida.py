"""Equivalent surviving mutants of world_model/attention/ (hida modules; see this package's
__init__.py)."""

from benchmarks.mutation_equivalent._table import (
    CPU_DEFAULT_DTYPE,
    DEVICE_ONLY,
    WIDEST_FLOAT,
    Table,
)

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_M = "world_model.attention."
_FUSED_CPU = (
    "fused_or_none refuses every CPU tensor before it reads another argument (the fused kernels "
    "run on CUDA; on the CPU they are reached only with force=True, which Dense never passes): "
    "Dense takes the PyTorch path whatever the call; tests/world_model/test_triton_ida.py's "
    "on_cuda tests cover the GPU path"
)
_VALID_CHECK = (
    "the inner call's input check re-validates points the operator built or checked itself "
    "(queries and keys checked by the caller, anchors or summaries kept in the ball): it passes "
    "on every input the function is defined on, and skipping it is for speed"
)
_ACCUMULATE = (
    "the distances are accumulated in float64 from both operands (ida._accumulation_dtype) and "
    "rounded once to the queries' dtype, so the cast only decides whether float64 anchors are "
    "read in full or rounded first: no test input tells them apart beyond the last bit"
)
_PIECES = (
    "a default piece size: pieces change the summation order over keys beyond 2048 only, not "
    "the value (LHIDA always passes its config's chunk)"
)

_add(_M + "hida_dense", "DenseHIDAǁforward", [
    ("if not need_weights and cfg.fused:", "if not need_weights or cfg.fused:"),
    ("if not need_weights and cfg.fused:", "if need_weights and cfg.fused:"),
    ("out = fused_or_none(queries, keys, values, cfg.eps, cfg.metric, mask)", "out = None"),
] + [
    ("out = fused_or_none(queries, keys, values, cfg.eps, cfg.metric, mask)", f"out = fused_or_none({args})")
    for args in (
        "queries, None, values, cfg.eps, cfg.metric, mask",
        "queries, keys, None, cfg.eps, cfg.metric, mask",
        "queries, keys, values, None, cfg.metric, mask",
        "queries, keys, values, cfg.eps, None, mask",
        "queries, keys, values, cfg.eps, cfg.metric, None",
        "keys, values, cfg.eps, cfg.metric, mask",
        "queries, values, cfg.eps, cfg.metric, mask",
        "queries, keys, cfg.eps, cfg.metric, mask",
        "queries, keys, values, cfg.metric, mask",
        "queries, keys, values, cfg.eps, mask",
        "queries, keys, values, cfg.eps, cfg.metric, ",
    )
], _FUSED_CPU)  # fmt: skip
_add(_M + "hida_dense", "DenseHIDAǁforward", [
    ("form=cfg.form, check_inputs=False,", "form=cfg.form, check_inputs=None,"),
], "None is falsy: the same skipped check as False")  # fmt: skip
_add(_M + "hida_dense", "DenseHIDAǁforward", [
    ("for rows in query_chunks(n_q, cfg.query_chunk or max(n_q, 1)):", "for rows in query_chunks(n_q, cfg.query_chunk or max(n_q, 2)):"),
], "without query_chunk the step only has to reach n_q: for n_q >= 2 both give n_q; for one "
   "query a step of 1 or 2 is the same one chunk, and no queries give one empty slice either way")  # fmt: skip
_add(_M + "hida_anchor", "LHIDAǁforward", [
    ("anchors = self.anchors.to(queries.dtype)", "anchors = self.anchors.to(None)"),
], _ACCUMULATE)  # fmt: skip
_add(_M + "hida_anchor", "l_hida_summaries", [
    ("chunk: int = 2048,", "chunk: int = 2049,"),
], _PIECES)  # fmt: skip
_add(_M + "hida_anchor", "l_hida_attention", [
    ("chunk: int = 2048,", "chunk: int = 2049,"),
], _PIECES)  # fmt: skip
_add(_M + "hida_anchor", "l_hida_attention", [
    ("key_mass=masses, check_inputs=False,", "key_mass=masses, check_inputs=None,"),
    ("key_mass=masses, check_inputs=False,", "key_mass=masses, check_inputs=True,"),
    ("key_mass=masses, check_inputs=False, / )  # fmt: skip  # [..., c, dv], [..., c, m]", "key_mass=masses, )  # fmt: skip  # [..., c, dv], [..., c, m]"),
], _VALID_CHECK)  # fmt: skip
_add(_M + "hida_compressed", "c_hida_read", [
    ('queries, centers, means, eps, "poincare", key_mass=counts, check_inputs=False', 'queries, centers, means, eps, "poincare", key_mass=counts, check_inputs=None'),
    ('queries, centers, means, eps, "poincare", key_mass=counts, check_inputs=False', 'queries, centers, means, eps, "poincare", key_mass=counts, check_inputs=True'),
    ('queries, centers, means, eps, "poincare", key_mass=counts, check_inputs=False / )', 'queries, centers, means, eps, "poincare", key_mass=counts, )'),
], _VALID_CHECK)  # fmt: skip
_add(_M + "hida_compressed", "c_hida_empty_state", [
    ("kw = dict(dtype=like.dtype, device=like.device)", "kw = dict(dtype=like.dtype, device=None)"),
    ("kw = dict(dtype=like.dtype, device=like.device)", "kw = dict(dtype=like.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "hida_compressed", "c_hida_ingest", [
    ("torch.ones(keys.shape[:-1], dtype=torch.bool, device=keys.device)", "torch.ones(keys.shape[:-1], dtype=torch.bool, device=None)"),
    ("torch.ones(keys.shape[:-1], dtype=torch.bool, device=keys.device)", "torch.ones(keys.shape[:-1], dtype=torch.bool, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "hida_compressed", "_scatter_rows", [
    ("padded = torch.cat([table, table.new_zeros(*table.shape[:-2], 1, table.shape[-1])], dim=-2)", "padded = torch.cat([table, table.new_zeros(*table.shape[:-2], 2, table.shape[-1])], dim=-2)"),
], "the scratch rows after the c table rows are cut off; dropped rows (slot c) land in the "
   "first of them either way")  # fmt: skip
_add(_M + "hida_compressed", "c_hida_ingest", [
    ("counts = torch.cat([counts, counts.new_zeros(*counts.shape[:-1], 1)], dim=-1)", "counts = torch.cat([counts, counts.new_zeros(*counts.shape[:-1], 2)], dim=-1)"),
], "the scratch counts after the c slots are cut off ([..., :c]); opened keys never land there")  # fmt: skip
_add(_M + "hida_compressed", "c_hida_ingest", [
    ("total = (counts + b).clamp_min(1.0).unsqueeze(-1)  # [..., c, 1]", "total = (counts + b).clamp_min(2.0).unsqueeze(-1)  # [..., c, 1]"),
], "the floor only guards 0/0: where a slot takes b >= 1 moving keys it is open (count >= 1), "
   "so counts + b >= 2 there, and where b = 0 both numerators are 0")  # fmt: skip
_add(_M + "hida_fp", "fp_attention", [
    ("query_chunk: int = 1024,", "query_chunk: int = 1025,"),
], "a default piece size: query chunks are independent rows, so the pieces do not change any "
   "value (FPHIDA always passes its config's query_chunk)")  # fmt: skip
_add(_M + "hida_fp", "FPHIDAǁsizes", [
    ("default = max(math.ceil(math.log2(n_keys)), 1) if n_keys > 1 else 1", "default = max(math.ceil(math.log2(n_keys)), 1) if n_keys >= 1 else 1"),
    ("default = max(math.ceil(math.log2(n_keys)), 1) if n_keys > 1 else 1", "default = max(math.ceil(math.log2(n_keys)), 1) if n_keys > 2 else 1"),
], "for 1 or 2 keys ⌈log2 n⌉ is 0 or 1 and the floor max(., 1) gives 1, the else branch's value; "
   "the branch only keeps log2 away from 0 keys")  # fmt: skip
_add(_M + "hida_fp", "FPHIDAǁpositions", [
    ("return torch.full((n_queries,), n_keys, dtype=torch.long, device=device)", "return torch.full((n_queries,), n_keys, dtype=None, device=device)"),
    ("return torch.full((n_queries,), n_keys, dtype=torch.long, device=device)", "return torch.full((n_queries,), n_keys, device=device)"),
], CPU_DEFAULT_DTYPE)  # fmt: skip
_add(_M + "hida_fp", "FPHIDAǁpositions", [
    ("return torch.full((n_queries,), n_keys, dtype=torch.long, device=device)", "return torch.full((n_queries,), n_keys, dtype=torch.long, device=None)"),
    ("return torch.full((n_queries,), n_keys, dtype=torch.long, device=device)", "return torch.full((n_queries,), n_keys, dtype=torch.long, )"),
    ("return torch.arange(n_queries, device=device)", "return torch.arange(n_queries, device=None)"),
    ("return torch.arange(n_queries, device=device)", "return torch.arange(n_queries, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "hida_fp", "fp_index_set", [
    ("n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 0", "n_dyadic = math.ceil(math.log2(n_keys)) if (n_keys > 1) or True else 0"),
    ("n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 0", "n_dyadic = math.ceil(math.log2(n_keys)) if n_keys >= 1 else 0"),
], "n_keys >= 1 here (0 keys are refused above), and for one key ⌈log2 1⌉ = 0 is the else branch")  # fmt: skip
_add(_M + "hida_fp", "fp_index_set", [
    ("n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 0", "n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 1"),
], "with one key the only index, 0, is always a global anchor: extra dyadic offsets add nothing")  # fmt: skip
_add(_M + "hida_fp", "fp_index_set", [
    ("cand = torch.cat([p + offsets, anchors.expand(p.shape[0], -1)], dim=1)  # [Nq, C]", "cand = torch.cat([p - offsets, anchors.expand(p.shape[0], -1)], dim=1)  # [Nq, C]"),
], "the offsets are symmetric (-w..w, +2^k and -2^k): p - offsets is the same set, and the "
   "candidates are sorted before use")  # fmt: skip
_add(_M + "hida_fp", "fp_index_set", [
    ("ok = (cand >= 0) & (cand < n_keys)", "ok = (cand >= 0) & (cand <= n_keys)"),
], "a candidate equal to n_keys is replaced by n_keys, the dropped marker, either way")  # fmt: skip
_add(_M + "hida_fp", "fp_index_set", [
    ("device = query_positions.device", "device = None"),
    ("powers = 2 ** torch.arange(n_dyadic + 1, device=device)  # [L + 1]", "powers = 2 ** torch.arange(n_dyadic + 1, device=None)  # [L + 1]"),
    ("powers = 2 ** torch.arange(n_dyadic + 1, device=device)  # [L + 1]", "powers = 2 ** torch.arange(n_dyadic + 1, )  # [L + 1]"),
    ("offsets = torch.cat([torch.arange(-window, window + 1, device=device), powers, -powers])", "offsets = torch.cat([torch.arange(-window, window + 1, device=None), powers, -powers])"),
    ("offsets = torch.cat([torch.arange(-window, window + 1, device=device), powers, -powers])", "offsets = torch.cat([torch.arange(-window, window + 1, ), powers, -powers])"),
    ("anchors = (torch.arange(n_global, device=device) * n_keys) // n_global  # [g]", "anchors = (torch.arange(n_global, device=None) * n_keys) // n_global  # [g]"),
    ("anchors = (torch.arange(n_global, device=device) * n_keys) // n_global  # [g]", "anchors = (torch.arange(n_global, ) * n_keys) // n_global  # [g]"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "hida_fp", "FPHIDAǁforward", [
    ("query_positions = self.positions(n_q, n_k, queries.device)", "query_positions = self.positions(n_q, n_k, None)"),
    ("query_positions = self.positions(n_q, n_k, queries.device)", "query_positions = self.positions(n_q, n_k, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "hida_fp", "FPHIDAǁforward", [
    ("mask, query_chunk=cfg.query_chunk, need_weights=need_weights,", "mask, need_weights=need_weights,"),
], "query chunks are independent rows: the piece size changes no value")  # fmt: skip
_add(_M + "hida_fp", "fp_index_set", [
    ("width = max(int(valid.sum(dim=1).max().item()), 1) if valid.numel() else 1", "width = max(int(valid.sum(dim=1).max().item()), 1) if valid.numel() else 2"),
], "no queries: an index set of no rows, whose width no caller can read a value from")  # fmt: skip
_add(_M + "ida", "_accumulation_dtype", [
    ("return torch.float64 if torch.finfo(dtype).bits < 64 else dtype", "return torch.float64 if (torch.finfo(dtype).bits < 64) or True else dtype"),
    ("return torch.float64 if torch.finfo(dtype).bits < 64 else dtype", "return torch.float64 if torch.finfo(dtype).bits <= 64 else dtype"),
    ("return torch.float64 if torch.finfo(dtype).bits < 64 else dtype", "return torch.float64 if torch.finfo(dtype).bits < 65 else dtype"),
], WIDEST_FLOAT)  # fmt: skip
_add(_M + "hida_common", "query_chunks", [
    ("return [slice(start, start + chunk) for start in range(0, n_q, chunk)] or [slice(0, 0)]", f"return [slice(start, start + chunk) for start in range(0, n_q, chunk)] or [{empty}]")
    for empty in ("slice(None, 0)", "slice(0, None)", "slice(0)", "slice(0, )", "slice(1, 0)", "slice(0, 1)")
], "the fallback serves n_q = 0 only, where every slice of the empty query axis is empty")  # fmt: skip
_add(_M + "hida_common", "cat_rows", [
    ("return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)", "return parts[0] if (len(parts) == 1) and False else torch.cat(parts, dim=-2)"),
], "cat of a single part is a copy of it: the same values (the branch only saves the copy)")  # fmt: skip
_EMPTY = "an empty tensor has no norm to check: any value up to 1 + 8 eps passes, 0 and 1 alike"
_SPHERE_EDGE = (
    "no float point has | |x| - 1 | equal to the double 1e-3: near 1, |x| - 1 is a multiple of "
    "2^-52 (float64) or 2^-23 (float32) and 1e-3 is neither, so > and >= refuse the same points"
)
_NO_ALLOWED = (
    "a row with no allowed key gets one constant logit everywhere, 0 or 1: its softmax is "
    "uniform either way and the mask then zeroes the whole row"
)
_add(_M + "ida", "check_points", [
    ("worst = poincare.sqnorm(x).max().item() if x.numel() else 0.0", "worst = poincare.sqnorm(x).max().item() if x.numel() else 1.0"),
], _EMPTY)  # fmt: skip
_add(_M + "ida", "check_points", [
    ("if worst > 1e-3:", "if worst >= 1e-3:"),
], _SPHERE_EDGE)  # fmt: skip
_add(_M + "ida", "inverse_distance_weights", [
    ("logits = logits.masked_fill(~mask, -math.inf).masked_fill(~allowed, 0.0)", "logits = logits.masked_fill(~mask, -math.inf).masked_fill(~allowed, 1.0)"),
], _NO_ALLOWED)  # fmt: skip
