"""Equivalent surviving mutants of world_model/attention/ (the Triton kernels and their dispatch;
see this package's __init__.py). On the tests' CPU the kernels run under Triton's interpreter;
the compiled GPU path is covered by tests/world_model/test_triton_ida.py's on_cuda tests."""

from benchmarks.mutation_equivalent._table import DEVICE_ONLY, Table

_table = Table()
EQUIVALENT = _table.entries
_add = _table.add

_M = "world_model.attention."
_INTERPRETER = (
    "Triton's interpreter (the tests' CPU path) computes tl.dot in the operands' precision and "
    "runs each program serially: input_precision (TF32 exists on NVIDIA tensor cores only) and "
    "num_warps act on a GPU alone"
)
_add(_M + "triton_ida_kernels", "pair_sq", [
    ("PREC=config.precision, ACC=tl.float64 if q.dtype == torch.float64 else tl.float32,", "PREC=None, ACC=tl.float64 if q.dtype == torch.float64 else tl.float32,"),
    ("num_warps=config.num_warps,", "num_warps=None,"),
    ("num_warps=config.num_warps, / )  # fmt: skip", ")  # fmt: skip"),
], _INTERPRETER)  # fmt: skip
_add(_M + "triton_ida_kernels", "pair_sq", [
    ("out = torch.empty(n_q, n_k, dtype=q.dtype, device=q.device)", "out = torch.empty(n_q, n_k, dtype=q.dtype, device=None)"),
    ("out = torch.empty(n_q, n_k, dtype=q.dtype, device=q.device)", "out = torch.empty(n_q, n_k, dtype=q.dtype, )"),
], DEVICE_ONLY)  # fmt: skip
_POW2 = (
    "for value >= 16, value & (value - 2) == 0 holds exactly for the powers of two, as "
    "value & (value - 1) == 0 does: an odd value keeps bit 0 in value - 2, and an even one that "
    "is not a power of two keeps its highest bit"
)
_ON_A_CPU = (
    "on a CPU (the tests' machine) the device type is 'cpu', unequal to 'cuda' and to the "
    "mutated string alike, and float64 is admitted where the interpreter runs: the mutants differ "
    "only on a GPU"
)
_GPU_LOG = "the refusal is logged on a GPU only: on a CPU neither the test nor the log is reached"
_PRECISION = (
    "precision only: the mutant keeps an intermediate of float32 inputs (the accumulator, the "
    "conformal factors, the series threshold) in float64 rather than float32; the results move "
    "by float32 rounding, inside the tests' 1e-4 of the float64 reference, and float64 inputs "
    "are unchanged. The float32 choice is a GPU speed choice (benchmarks/triton_ida_gpu.py)"
)
_MASS_DTYPE = (
    "key masses share the queries' dtype (refused otherwise), which is the accumulator's for "
    "float32 and float64; the half-precision dtypes run on a GPU only"
)
_EXACT_01 = (
    "the masses' 1 and 0 are exact in every dtype, and torch.where promotes them to the "
    "accumulator's dtype of the other operand"
)
_PLACEHOLDER = (
    "a pointer argument the kernel reads only when its flag (POINCARE, HAS_MASS) is on; the flag "
    "is off exactly when the placeholder is passed, so what stands there (a 1- or 2-element "
    "tensor, None) is never read"
)
_add(_M + "triton_ida", "KernelConfigǁ__post_init__", [
    ("if not (isinstance(value, int) and value >= 16 and value & (value - 1) == 0):", "if not (isinstance(value, int) and value >= 16 and value & (value - 2) == 0):"),
], _POW2)  # fmt: skip
_add(_M + "triton_ida", "fusion_refusal", [
    ("if device.type != \"cuda\" and not force:", "if device.type != \"XXcudaXX\" and not force:"),
    ("if device.type != \"cuda\" and not force:", "if device.type != \"CUDA\" and not force:"),
    ("if device.type != \"cuda\" and not kernels.INTERPRETED:", "if device.type != \"XXcudaXX\" and not kernels.INTERPRETED:"),
    ("if device.type != \"cuda\" and not kernels.INTERPRETED:", "if device.type != \"CUDA\" and not kernels.INTERPRETED:"),
], _ON_A_CPU)  # fmt: skip
_add(_M + "triton_ida", "fusion_refusal", [
    ("if dtype not in FUSED_DTYPES + ((torch.float64,) if kernels.INTERPRETED else ()):", "if dtype not in FUSED_DTYPES + ((torch.float64,) if (kernels.INTERPRETED) or True else ()):"),
], _ON_A_CPU)  # fmt: skip
_add(_M + "triton_ida", "fused_or_none", [
    ("if queries.device.type == \"cuda\" and reason not in _LOGGED:", "if queries.device.type == \"XXcudaXX\" and reason not in _LOGGED:"),
    ("if queries.device.type == \"cuda\" and reason not in _LOGGED:", "if queries.device.type == \"CUDA\" and reason not in _LOGGED:"),
    ("if queries.device.type == \"cuda\" and reason not in _LOGGED:", "if queries.device.type == \"cuda\" and reason in _LOGGED:"),
    ("_LOGGED.add(reason)", "_LOGGED.add(None)"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(None, reason)"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", None)"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(reason)"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", )"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(\"XXfused inverse-distance attention not used (%s): PyTorch runsXX\", reason)"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(\"fused inverse-distance attention not used (%s): pytorch runs\", reason)"),
    ("_logger.warning(\"fused inverse-distance attention not used (%s): PyTorch runs\", reason)", "_logger.warning(\"FUSED INVERSE-DISTANCE ATTENTION NOT USED (%S): PYTORCH RUNS\", reason)"),
], _GPU_LOG)  # fmt: skip
_add(_M + "triton_ida", "_inverse_factor", [
    ("return (1.0 / a).squeeze(-1).to(acc)", "return (1.0 / a).squeeze(-1).to(None)"),
], _PRECISION)  # fmt: skip
_add(_M + "triton_ida", "_fused", [
    ("acc = torch.float64 if queries.dtype == torch.float64 else torch.float32", "acc = None"),
    ("acc = torch.float64 if queries.dtype == torch.float64 else torch.float32", "acc = torch.float64 if (queries.dtype == torch.float64) or True else torch.float32"),
    ("iq, ik = flat(_inverse_factor(queries, acc), n_q), flat(_inverse_factor(keys, acc), n_k)", "iq, ik = flat(_inverse_factor(queries, None), n_q), flat(_inverse_factor(keys, acc), n_k)"),
    ("iq, ik = flat(_inverse_factor(queries, acc), n_q), flat(_inverse_factor(keys, acc), n_k)", "iq, ik = flat(_inverse_factor(queries, acc), n_q), flat(_inverse_factor(keys, None), n_k)"),
], _PRECISION)  # fmt: skip
_add(_M + "triton_ida", "_fused", [
    ("m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)", "m = key_mass.to(None) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)"),
], _MASS_DTYPE)  # fmt: skip
_add(_M + "triton_ida", "_fused", [
    ("m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)", "m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=None, device=q.device)"),
    ("m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)", "m = key_mass.to(acc) if key_mass is not None else torch.ones((), device=q.device)"),
    ("m = torch.where(key_mask, m, torch.zeros((), dtype=acc, device=q.device))", "m = torch.where(key_mask, m, torch.zeros((), dtype=None, device=q.device))"),
    ("m = torch.where(key_mask, m, torch.zeros((), dtype=acc, device=q.device))", "m = torch.where(key_mask, m, torch.zeros((), device=q.device))"),
], _EXACT_01)  # fmt: skip
_add(_M + "triton_ida", "_fused", [
    ("m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)", "m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=None)"),
    ("m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)", "m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, )"),
    ("m = torch.where(key_mask, m, torch.zeros((), dtype=acc, device=q.device))", "m = torch.where(key_mask, m, torch.zeros((), dtype=acc, device=None))"),
    ("m = torch.where(key_mask, m, torch.zeros((), dtype=acc, device=q.device))", "m = torch.where(key_mask, m, torch.zeros((), dtype=acc, ))"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "triton_ida_kernels", "_meta", [
    ("num_warps=config.num_warps,", "num_warpsXX=config.num_warps,"),
    ("POINCARE=poincare, HAS_MASS=has_mass, FORM=FORMS[config.form], PREC=config.precision,", "POINCARE=poincare, HAS_MASS=has_mass, FORM=FORMS[config.form], PREC=None,"),
    ("num_warps=config.num_warps,", "num_warps=None,"),
    ("num_warps=config.num_warps, / )  # fmt: skip", ")  # fmt: skip"),
], _INTERPRETER)  # fmt: skip
_add(_M + "triton_ida_kernels", "_meta", [
    ("ACC=tl.float64 if f64 else tl.float32, BLOCK_Q=config.block_q, BLOCK_K=config.block_k,", "ACC=tl.float64 if (f64) or True else tl.float32, BLOCK_Q=config.block_q, BLOCK_K=config.block_k,"),
], _PRECISION)  # fmt: skip
_add(_M + "triton_ida_kernels", "_scalars", [
    ("return float(eps), float(config.near), _SERIES_T[\"float64\" if f64 else \"float32\"]", "return float(eps), float(config.near), _SERIES_T[\"float64\" if (f64) or True else \"float32\"]"),
], _PRECISION)  # fmt: skip
_add(_M + "triton_ida_kernels", "forward", [
    ("out = torch.empty(b, n_q, dim_v, dtype=q.dtype, device=q.device)", "out = torch.empty(b, n_q, dim_v, dtype=q.dtype, device=None)"),
    ("out = torch.empty(b, n_q, dim_v, dtype=q.dtype, device=q.device)", "out = torch.empty(b, n_q, dim_v, dtype=q.dtype, )"),
    ("lse = torch.empty(b, n_q, dtype=acc, device=q.device)", "lse = torch.empty(b, n_q, dtype=acc, device=None)"),
    ("lse = torch.empty(b, n_q, dtype=acc, device=q.device)", "lse = torch.empty(b, n_q, dtype=acc, )"),
], DEVICE_ONLY)  # fmt: skip
_add(_M + "triton_ida_kernels", "forward", [
    ("dummy = lse.new_empty(1)", "dummy = None"),
    ("dummy = lse.new_empty(1)", "dummy = lse.new_empty(2)"),
    ("q, k, v, dummy if iq is None else iq, dummy if ik is None else ik,", "q, k, v, dummy if (iq is None) and False else iq, dummy if ik is None else ik,"),
    ("q, k, v, dummy if iq is None else iq, dummy if ik is None else ik,", "q, k, v, dummy if iq is None else iq, dummy if (ik is None) and False else ik,"),
    ("dummy if mass is None else mass, out, lse,", "dummy if (mass is None) and False else mass, out, lse,"),
], _PLACEHOLDER)  # fmt: skip
_add(_M + "triton_ida_kernels", "backward", [
    ("dummy = lse.new_empty(1)", "dummy = None"),
    ("dummy = lse.new_empty(1)", "dummy = lse.new_empty(2)"),
    ("q, k, v, dummy if iq is None else iq, dummy if ik is None else ik,", "q, k, v, dummy if (iq is None) and False else iq, dummy if ik is None else ik,"),
    ("q, k, v, dummy if iq is None else iq, dummy if ik is None else ik,", "q, k, v, dummy if iq is None else iq, dummy if (ik is None) and False else ik,"),
    ("dummy if mass is None else mass, d_out, lse, delta,", "dummy if (mass is None) and False else mass, d_out, lse, delta,"),
    ("*inputs, dq, dummy if diq is None else diq, *sizes, **blocks, **meta", "*inputs, dq, dummy if (diq is None) and False else diq, *sizes, **blocks, **meta"),
    ("*inputs, dk, dv, dummy if dmass is None else dmass, dummy if dik is None else dik,", "*inputs, dk, dv, dummy if (dmass is None) and False else dmass, dummy if dik is None else dik,"),
    ("*inputs, dk, dv, dummy if dmass is None else dmass, dummy if dik is None else dik,", "*inputs, dk, dv, dummy if dmass is None else dmass, dummy if (dik is None) and False else dik,"),
], _PLACEHOLDER)  # fmt: skip
_add(_M + "triton_ida_kernels", "backward", [
    ("diq = torch.empty(b, n_q, dtype=acc, device=q.device) if iq is not None else None", "diq = torch.empty(b, n_q, dtype=acc, device=None) if iq is not None else None"),
    ("diq = torch.empty(b, n_q, dtype=acc, device=q.device) if iq is not None else None", "diq = torch.empty(b, n_q, dtype=acc, ) if iq is not None else None"),
    ("dik = torch.empty(b, n_k, dtype=acc, device=q.device) if iq is not None else None", "dik = torch.empty(b, n_k, dtype=acc, device=None) if iq is not None else None"),
    ("dik = torch.empty(b, n_k, dtype=acc, device=q.device) if iq is not None else None", "dik = torch.empty(b, n_k, dtype=acc, ) if iq is not None else None"),
    ("dmass = torch.empty(b, n_k, dtype=acc, device=q.device) if mass is not None else None", "dmass = torch.empty(b, n_k, dtype=acc, device=None) if mass is not None else None"),
    ("dmass = torch.empty(b, n_k, dtype=acc, device=q.device) if mass is not None else None", "dmass = torch.empty(b, n_k, dtype=acc, ) if mass is not None else None"),
], DEVICE_ONLY)  # fmt: skip
