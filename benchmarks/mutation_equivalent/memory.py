"""Equivalent surviving mutants of world_model/memory/ (see this package's __init__.py)."""

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

_M = "world_model.memory."
_STRICT = "both sides of the zip are slices of one list that differ by one element at each end"
_SORT_CPU = (
    "torch.sort is stable on the CPU whatever the flag (the tests' machine); the flag matters "
    "on CUDA, and dim -1 is sort's default"
)

_add(_M + "episodic", "EpisodicMemoryǁscreened_mass", [
    ("passed = (kernel * torch.exp(-0.5 * tension * d2)).sum(-1)", "passed = (kernel * torch.exp(-0.5 * tension * d2)).sum(+1)"),
    ("return passed / kernel.sum(-1).clamp_min(torch.finfo(z.dtype).tiny)", "return passed / kernel.sum(+1).clamp_min(torch.finfo(z.dtype).tiny)"),
], "kernel and d2 are [B, C] (z [B, d] against the bank): " + LAST_OF_TWO)  # fmt: skip
_add(_M + "gsr", "selected_weights", [
    ("return torch.nan_to_num(w, nan=0.0)  # all -inf (empty pool): -inf - -inf", "return torch.nan_to_num(w, nan=None)  # all -inf (empty pool): -inf - -inf"),
    ("return torch.nan_to_num(w, nan=0.0)  # all -inf (empty pool): -inf - -inf", "return torch.nan_to_num(w, )  # all -inf (empty pool): -inf - -inf"),
], "nan_to_num replaces NaN by 0 by default")  # fmt: skip
_add(_M + "gsr", "gsr_route", [
    ("for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):", f"for lo, hi in zip(bounds[:-1], bounds[1:], {after})")
    for after in ("strict=None):", "):", "strict=False):")
] + [
    ("for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)", f"for lo, hi in zip(bounds[:-1], bounds[1:], {after})")
    for after in ("strict=None", "", "strict=False")
], _STRICT)  # fmt: skip
_add(_M + "gsr", "gsr_route", [
    ("if hi > lo:", "if hi >= lo:"),
], "an empty slice's local step selects nothing (top-0) and its log-normaliser is -inf, which "
   "the merge's logsumexp ignores")  # fmt: skip
_add(_M + "gsr", "routing_error_report", [
    ("top_w, idx = torch.topk(w, k, dim=-1)  # [..., Nq, K]", "top_w, idx = torch.topk(w, k, )  # [..., Nq, K]"),
], "dim -1 is topk's default")  # fmt: skip
_add(_M + "gsr", "routing_error_report", [
    ("norms = values.norm(dim=-1)  # [P]", "norms = values.norm(dim=+1)  # [P]"),
], "values are [P, dv]: " + LAST_OF_TWO)  # fmt: skip
_add(_M + "hcc", "CompressedKeysǁwidths", [
    ("return torch.tensor([cfg.bits_dir] * d + [cfg.bits_radius], dtype=torch.int64)", "return torch.tensor([cfg.bits_dir] * d + [cfg.bits_radius], dtype=None)"),
    ("return torch.tensor([cfg.bits_dir] * d + [cfg.bits_radius], dtype=torch.int64)", "return torch.tensor([cfg.bits_dir] * d + [cfg.bits_radius], )"),
], CPU_DEFAULT_DTYPE)  # fmt: skip
_add(_M + "hcc", "compress", [
    ("widths = torch.tensor([bits_dir] * d + [bits_radius], dtype=torch.int64)", "widths = torch.tensor([bits_dir] * d + [bits_radius], dtype=None)"),
    ("widths = torch.tensor([bits_dir] * d + [bits_radius], dtype=torch.int64)", "widths = torch.tensor([bits_dir] * d + [bits_radius], )"),
], CPU_DEFAULT_DTYPE)  # fmt: skip
_add(_M + "hcc", "CompressedKeysǁdecompress", [
    ("return (r_hat.unsqueeze(-1) * u_hat).reshape(self.shape)", "return (r_hat.unsqueeze(+1) * u_hat).reshape(self.shape)"),
], "r_hat is [count]: " + NEW_LAST_AXIS)  # fmt: skip
_add(_M + "hcc", "compress", [
    ("quantize.quantize_radius(flat_r, bits_radius).unsqueeze(-1),  # [count, 1]", "quantize.quantize_radius(flat_r, bits_radius).unsqueeze(+1),  # [count, 1]"),
    ("dim=-1,", "dim=+1,"),
], "the radius codes are [count] and the concatenated codes [count, d + 1]: " + NEW_LAST_AXIS
   + ", and " + LAST_OF_TWO)  # fmt: skip
_add(_M + "routed_prototypes", "RoutedPoolConfigǁ__post_init__", [
    ('if not (isinstance(v, (int, float)) and 0 < v < float("inf")):', 'if not (isinstance(v, (int, float)) and 0 < v < float("INF")):'),
], 'float() reads "INF" as it reads "inf"')  # fmt: skip
_add(_M + "routed_prototypes", "RoutedPoolConfigǁdmg", [
    ("tau_base=1.0,  # the batch mean of the relative error", ""),
    ("gamma=1.0,", ""),
    ('when_full="evict_lru", / )', ")"),
], "the value the routed pool's rule needs is also DMGConfig's default (stated here so that the "
   "rule does not depend on that default)")  # fmt: skip
_add(_M + "routed_prototypes", "Selectionǁlog_mass", [
    ("k = self.index.shape[-1]", "k = self.index.shape[+1]"),
], "the selection's index is [B, K]: " + LAST_OF_TWO)  # fmt: skip
_add(_M + "routed_prototypes", "Selectionǁ_on_rows", [
    ("out = values.new_zeros(self.index.shape[0], rows + 1)", "out = values.new_zeros(self.index.shape[0], rows + 2)"),
], "invalid slots write into column `rows`, and every column from `rows` on is dropped")  # fmt: skip
_add(_M + "routed_prototypes", "RoutedPrototypePoolǁ__init__", [
    ("self.dmg = DynamicMemoryGenesis(cfg.dmg(1))  # its rule is set per update (genesis)", "self.dmg = DynamicMemoryGenesis(cfg.dmg(2))  # its rule is set per update (genesis)"),
], "genesis replaces the rule with cfg.dmg(batch) before DMG reads it; the rule's batch size "
   "enters no buffer")  # fmt: skip
_add(_M + "routed_prototypes", "RoutedPrototypePoolǁ_bank", [
    ("feats = self.pool.values.unflatten(-1, (4, f))  # [C, 4, F]", "feats = self.pool.values.unflatten(+1, (4, f))  # [C, 4, F]"),
], "the pool's values are [C, 4F]: " + LAST_OF_TWO)  # fmt: skip
_add(_M + "routed_prototypes", "RoutedPrototypePoolǁ_nearest", [
    ("return logits.argmax(-1)", "return logits.argmax(+1)"),
], "the logits are [B, C]: " + LAST_OF_TWO)  # fmt: skip
_add(_M + "routing", "_softmax_rows", [
    ("return torch.softmax(logits.masked_fill(~finite, 0.0), dim=-1) * finite", "return torch.softmax(logits.masked_fill(~finite, 1.0), dim=-1) * finite"),
], "only rows without a finite logit are filled, wholly, and those rows are multiplied by 0")  # fmt: skip
_add(_M + "routing", "ordered_topk", [
    ("indices = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)", "indices = torch.arange(scores.shape[-1], device=None).expand_as(scores)"),
    ("indices = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)", "indices = torch.arange(scores.shape[-1], ).expand_as(scores)"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "routing", "ordered_topk", [
    ("order = torch.sort(indices, dim=-1, stable=True).indices", f"order = torch.sort(indices, {after}).indices")
    for after in ("dim=-1, stable=None", "stable=True", "dim=-1, ", "dim=-1, stable=False")
] + [
    ("top, pos = torch.sort(scores, dim=-1, descending=True, stable=True)", f"top, pos = torch.sort(scores, {after})")
    for after in ("dim=-1, descending=True, stable=None", "descending=True, stable=True",
                  "dim=-1, descending=True, ", "dim=-1, descending=True, stable=False")
], _SORT_CPU)  # fmt: skip
_add(_M + "unified", "UnifiedBlockǁ__init__", [
    ('self.hida = DenseHIDA(DenseHIDAConfig(eps=cfg.eps, metric="poincare", check_inputs=False))', f"self.hida = DenseHIDA(DenseHIDAConfig({after}))")
    for after in ('eps=cfg.eps, metric="poincare", check_inputs=None', 'eps=cfg.eps, metric="poincare", ',
                  'eps=cfg.eps, metric="poincare", check_inputs=True')
], "check_inputs only validates (the block's inputs are valid): it raises or passes")  # fmt: skip
_add(_M + "unified", "UnifiedBlockǁ__init__", [
    ('self.hida = DenseHIDA(DenseHIDAConfig(eps=cfg.eps, metric="poincare", check_inputs=False))', "self.hida = DenseHIDA(DenseHIDAConfig(eps=cfg.eps, check_inputs=False))"),
], "the Poincare metric is DenseHIDAConfig's default (stated here because the block is HIDA)")  # fmt: skip
_add(_M + "window", "TrajectoryWindowǁbanks", [
    ("levels = torch.full(z.shape[:2], self.level, dtype=torch.long, device=z.device)", f"levels = torch.full(z.shape[:2], self.level, {after})")
    for after in ("dtype=None, device=z.device", "device=z.device")
], CPU_DEFAULT_DTYPE)  # fmt: skip
_add(_M + "window", "TrajectoryWindowǁbanks", [
    ("levels = torch.full(z.shape[:2], self.level, dtype=torch.long, device=z.device)", f"levels = torch.full(z.shape[:2], self.level, {after})")
    for after in ("dtype=torch.long, device=None", "dtype=torch.long, ")
], DEVICE_ONLY)  # fmt: skip
_add(_M + "prototypes", "PrototypePoolǁ_bank", [
    ("levels = torch.full((1, m), MACRO_LEVEL, dtype=torch.long, device=keys.device)", f"levels = torch.full((1, m), MACRO_LEVEL, {after})")
    for after in ("dtype=None, device=keys.device", "device=keys.device")
], CPU_DEFAULT_DTYPE)  # fmt: skip
_add(_M + "prototypes", "PrototypePoolǁ_bank", [
    ("levels = torch.full((1, m), MACRO_LEVEL, dtype=torch.long, device=keys.device)", f"levels = torch.full((1, m), MACRO_LEVEL, {after})")
    for after in ("dtype=torch.long, device=None", "dtype=torch.long, ")
], DEVICE_ONLY)  # fmt: skip
_add(_M + "dmg", "DynamicMemoryGenesisǁ__init__", [
    ('self.register_buffer("last_spawn", torch.full((), NEVER, dtype=torch.int64))', f'self.register_buffer("last_spawn", torch.full((), NEVER, {after}))')
    for after in ("dtype=None", "")
], CPU_DEFAULT_DTYPE + " (NEVER is a Python int)")  # fmt: skip
_add(_M + "dmg", "surprise_scan", [
    ("losses = losses.detach().to(torch.float64).reshape(-1)", "losses = losses.detach().to(None).reshape(-1)"),
    ("hist = losses.new_zeros(0) if history is None else history.detach().to(torch.float64)", "hist = losses.new_zeros(0) if history is None else history.detach().to(None)"),
], "floating losses convert to float64 exactly, window_statistics computes in float64, and "
   "tolist() gives the same Python floats from either dtype")  # fmt: skip
_add(_M + "gsr_distributed", "gather_queries", [
    ("return torch.cat(_all_gather(queries, log, group), dim=0)", "return torch.cat(_all_gather(queries, log, group), )"),
], "dim 0 is cat's default")  # fmt: skip
_add(_M + "gsr_distributed", "_padded", [
    ('pad = part.scores.new_full((*part.scores.shape[:-1], short), float("-inf"))', 'pad = part.scores.new_full((*part.scores.shape[:-1], short), float("-INF"))'),
], 'float() reads "-INF" as it reads "-inf"')  # fmt: skip
_add(_M + "gsr_distributed", "sharded_gsr_route", [
    ("[LocalTopK(*parts) for parts in zip(scores, indices, log_z, strict=True)], k", f"[LocalTopK(*parts) for parts in zip(scores, indices, log_z, {after})], k")
    for after in ("strict=None", "", "strict=False")
], "the three lists are all-gathers over one group: one tensor per rank each")  # fmt: skip
_add(_M + "gsr_distributed", "moe_dispatch", [
    ("pairs = torch.nonzero(flat >= 0).squeeze(-1)", "pairs = torch.nonzero(flat >= 0).squeeze(+1)"),
    ("recv = told.view(world, hi - lo).sum(-1).tolist()", "recv = told.view(world, hi - lo).sum(+1).tolist()"),
    ("received = tokens.new_empty(sum(recv), tokens.shape[-1])", "received = tokens.new_empty(sum(recv), tokens.shape[+1])"),
    ("returned = answers.new_empty(order.numel(), values.shape[-1])", "returned = answers.new_empty(order.numel(), values.shape[+1])"),
    ('log.add("all_to_all", (sum(send) - send[rank]) * tokens.shape[-1] * tokens.element_size())', 'log.add("all_to_all", (sum(send) - send[rank]) * tokens.shape[+1] * tokens.element_size())'),
    ('log.add("all_to_all", (sum(recv) - recv[rank]) * values.shape[-1] * values.element_size())', 'log.add("all_to_all", (sum(recv) - recv[rank]) * values.shape[+1] * values.element_size())'),
    ("rows = values.new_zeros(nq * k, values.shape[-1])", "rows = values.new_zeros(nq * k, values.shape[+1])"),
], "nonzero's output, the counts' view, the tokens [Nq K, m] and the values [P_r, dv] are 2-D: "
   + LAST_OF_TWO)  # fmt: skip
_add(_M + "gsr_distributed", "moe_dispatch", [
    ("order = pairs[torch.sort(flat[pairs], stable=True).indices]  # grouped by owner, then row", f"order = pairs[torch.sort(flat[pairs], {after}).indices]  # grouped by owner, then row")
    for after in ("stable=None", "", "stable=False")
], _SORT_CPU)  # fmt: skip
_add(_M + "gsr_distributed", "moe_dispatch", [
    ("dist.all_to_all_single(told, per_row, [hi - lo] * world, shard, group=group)", "dist.all_to_all_single(told, per_row, None, shard, group=group)"),
], "no output split sizes means equal parts of `told`, world parts of hi - lo: the sizes given")  # fmt: skip
