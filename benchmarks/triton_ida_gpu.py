"""GPU benchmark of the fused inverse-distance kernels (world_model/attention/triton_ida.py)
against the PyTorch reference (world_model/attention/ida.py) and torch.compile of it, printed
as tables; the whole run stays inside --budget seconds (default 330, under 6 minutes).

    python -m benchmarks.triton_ida_gpu                 # everything, on a CUDA device
    python -m benchmarks.triton_ida_gpu --quick         # n <= 4096, d = 64, no sweeps
    python -m benchmarks.triton_ida_gpu --accuracy-cpu  # distance-form accuracy, no GPU needed
                                                        # (Triton's interpreter + emulated TF32)
    python -m benchmarks.triton_ida_gpu --registers     # registers / spills of the kernels for
                                                        # sm_90 (compiled offline, no GPU)

Without a CUDA device (and without --accuracy-cpu) it prints one line and exits.

Sections, in order (each skipped, with a line, once the budget is spent):
1. targets: n = 16384, d = dv = 64, Poincare, one head: fused vs reference, forward and
   backward time and peak memory, against the issue's targets (forward >= 2x, backward >=
   1.5x, memory O(n d)).
2. accuracy of the distance forms on the device: max relative error of |q - k|^2 for pairs at
   distance 1e-1 ... 1e-5 (|q| in [0.5, 0.9], d = 64) against float64, for each form and
   tl.dot precision; the attention's output and gradient error on near pairs and at the
   ball's boundary.
3. scaling: n = 1k ... 32k, d = 32, 64, 128 (dv = d), Poincare: fused, reference and
   torch.compile(reference) (d = 64 only, dynamic shapes, one compile per graph), forward
   and forward + backward: time (median of CUDA-event timings), peak memory above the
   inputs, and for the fused kernels achieved GB/s and TFLOP/s against the H200's ~4.8 TB/s
   HBM, ~67 TFLOP/s FP32 (CUDA cores) and ~495 TFLOP/s dense TF32 (tensor cores).
4. forms and precisions at n = 16384, d = 64 (time; accuracy in section 2).
5. block sizes of the default form at n = 16384, d = 64.
6. a smoke run of `python -m agent.train --world-model geodesic` on CUDA (300 steps).

Counting: FLOPs are nominal per (query, key) pair, forward 3d + 2dv (the squared distance
and the value product), backward 12d + 6dv (both backward kernels recompute the distances and
contract them, both form dO.v, one forms W^T dO); bytes are the tiles the kernels read and
write (K and V once per query block, ...): most is served from L2, so GB/s against the HBM peak
says how far the kernel is from being memory-bound, not what HBM carried.
"""

from __future__ import annotations

import os
import sys

if "--accuracy-cpu" in sys.argv:  # Triton's interpreter must be chosen before triton loads
    os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

from world_model.attention import ida, triton_ida  # noqa: E402
from world_model.attention.triton_ida import KernelConfig  # noqa: E402

PEAK_HBM, PEAK_FP32, PEAK_TF32 = 4.8e12, 67e12, 495e12  # H200: bytes/s, FLOP/s, FLOP/s
EPS = 1e-3
METRIC = "poincare"
DELTAS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)
FORMS = [  # (label, config) compared in sections 2 and 4; the first is the default
    ("difference/ieee", KernelConfig()),
    ("difference/ieee, dot pull", KernelConfig(contraction="dot")),
    ("difference/tf32x3", KernelConfig(precision="tf32x3")),
    ("expanded/ieee", KernelConfig(form="expanded")),
    ("expanded/tf32x3", KernelConfig(form="expanded", precision="tf32x3")),
    ("expanded/tf32", KernelConfig(form="expanded", precision="tf32")),
    ("corrected/ieee", KernelConfig(form="corrected")),
    ("corrected/tf32x3", KernelConfig(form="corrected", precision="tf32x3")),
]
BLOCKS = [(32, 32, 4), (64, 32, 4), (32, 64, 4), (64, 64, 8)]  # (block_q, block_k, warps)
DEVICE = "cuda"
TARGET_N, TARGET_D = 16384, 64  # the issue's target size (sections 1, 4, 5)


class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def spent(self, reserve: float = 0.0) -> bool:
        return self.left() < reserve


# --------------------------------------------------------------------------- inputs


def ball(n: int, d: int, seed: int, device, lo: float = 0.0, hi: float = 0.9) -> torch.Tensor:
    """n points in the d-ball with norms uniform in [lo, hi], float64."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    r = lo + (hi - lo) * torch.rand(n, 1, generator=g, dtype=torch.float64)
    return (r * x / x.norm(dim=-1, keepdim=True)).to(device)


def near_pairs(n: int, d: int, delta: float, device, seed: int = 0):
    """q [n, d] with |q| in [0.5, 0.9] and k_i = q_i + delta u_i (|u_i| = 1), float64."""
    q = ball(n, d, seed, device, 0.5, 0.9)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    u = torch.randn(n, d, generator=g, dtype=torch.float64).to(device)
    return q, q + delta * u / u.norm(dim=-1, keepdim=True)


def attention_inputs(n: int, d: int, dv: int, device, dtype=torch.float32, seed: int = 0):
    q, k = ball(n, d, seed, device).to(dtype), ball(n, d, seed + 1, device).to(dtype)
    g = torch.Generator(device="cpu").manual_seed(seed + 2)
    v = torch.randn(n, dv, generator=g).to(device=device, dtype=dtype)
    return q, k, v


def fused_fn(config=triton_ida.DEFAULT_CONFIG):
    def fn(q, k, v):
        return triton_ida.fused_or_none(q, k, v, EPS, METRIC, force=True, config=config)

    return fn


def reference_fn(q, k, v):
    return ida.inverse_distance_attention(q, k, v, EPS, METRIC, check_inputs=False)[0]


# --------------------------------------------------------------------------- timing


def timed(fn, reps: int = 5) -> tuple[float, float]:
    """(median ms, peak MiB above what was allocated before) of fn() on the current device."""
    fn()  # warm-up: compiles
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return sorted(times)[len(times) // 2], peak


def fwd_bwd(f, q, k, v, d_out):
    """Closures timing f's forward and its forward + backward (gradients of q, k, v)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

    def forward():
        with torch.no_grad():
            return f(q, k, v)

    def both():
        return torch.autograd.grad(f(*leaves), leaves, d_out)

    return forward, both


def measure(f, n: int, d: int, dv: int, reps: int = 5) -> dict:
    """Forward and backward (= forward + backward - forward) ms and peak MiB of f at size n,
    or an 'error' entry (out of memory, compile failure)."""
    q, k, v = attention_inputs(n, d, dv, DEVICE)
    d_out = torch.randn(n, dv, device=DEVICE)
    forward, both = fwd_bwd(f, q, k, v, d_out)
    try:
        t_f, m_f = timed(forward, reps)
        t_b, m_b = timed(both, reps)
    except (torch.cuda.OutOfMemoryError, RuntimeError) as err:
        torch.cuda.empty_cache()
        return {"error": type(err).__name__ + ": " + str(err).splitlines()[0][:60]}
    return {"fwd": t_f, "bwd": t_b - t_f, "both": t_b, "mem_f": m_f, "mem_b": m_b}


def counts(n: int, d: int, dv: int, cfg: KernelConfig) -> dict:
    """Nominal FLOPs and tile bytes of the fused forward and backward at n queries = n keys."""
    pairs = n * n
    blocks_q, blocks_k = math.ceil(n / cfg.block_q), math.ceil(n / cfg.block_k)
    fwd_bytes = 4 * (n * (d + dv) + blocks_q * n * (d + dv))
    bwd_bytes = 4 * (n * (2 * d + 2 * dv) + blocks_q * n * (d + dv))  # dq kernel
    bwd_bytes += 4 * (n * (2 * d + 2 * dv) + blocks_k * n * (d + dv))  # dk, dv kernel
    return {
        "fwd_flops": pairs * (3 * d + 2 * dv),
        "bwd_flops": pairs * (12 * d + 6 * dv),
        "fwd_bytes": fwd_bytes,
        "bwd_bytes": bwd_bytes,
    }


def rates(r: dict, n: int, d: int, dv: int, cfg: KernelConfig) -> str:
    """GB/s and TFLOP/s of the fused forward / backward, and the FP32 / TF32 peak fractions."""
    c = counts(n, d, dv, cfg)
    gbs_f, gbs_b = c["fwd_bytes"] / r["fwd"] / 1e6, c["bwd_bytes"] / max(r["bwd"], 1e-6) / 1e6
    tf_f, tf_b = c["fwd_flops"] / r["fwd"] / 1e9, c["bwd_flops"] / max(r["bwd"], 1e-6) / 1e9
    return (
        f"{gbs_f:7.0f} / {gbs_b:7.0f} GB/s ({100 * gbs_f * 1e9 / PEAK_HBM:4.1f}% HBM)  "
        f"{tf_f:5.1f} / {tf_b:5.1f} TFLOP/s ({100 * tf_f * 1e12 / PEAK_FP32:4.1f}% FP32, "
        f"{100 * tf_f * 1e12 / PEAK_TF32:4.1f}% TF32)"
    )


def row(label: str, r: dict) -> str:
    if "error" in r:
        return f"  {label:<28} {r['error']}"
    return (
        f"  {label:<28} fwd {r['fwd']:9.3f} ms  bwd {r['bwd']:9.3f} ms  "
        f"peak {r['mem_f']:9.1f} / {r['mem_b']:9.1f} MiB"
    )


# --------------------------------------------------------------------------- sections


def section_targets(budget: Budget) -> None:
    n, d = TARGET_N, TARGET_D
    print(f"\n1. targets at n = {n}, d = dv = {d}, {METRIC}, eps = {EPS}")
    fused = measure(fused_fn(), n, d, d)
    ref = measure(reference_fn, n, d, d)
    print(row("fused (default config)", fused))
    print(row("reference (PyTorch eager)", ref))
    if "error" in fused or "error" in ref:
        return
    inputs_mib = 4 * n * (3 * d) / 2**20
    sf, sb = ref["fwd"] / fused["fwd"], ref["bwd"] / fused["bwd"]
    print(f"  forward  speed-up {sf:5.2f}x (target >= 2):   {'PASS' if sf >= 2 else 'FAIL'}")
    print(f"  backward speed-up {sb:5.2f}x (target >= 1.5): {'PASS' if sb >= 1.5 else 'FAIL'}")
    print(
        f"  fused peak memory {fused['mem_b']:.1f} MiB for {inputs_mib:.1f} MiB of inputs "
        f"(reference {ref['mem_b']:.0f} MiB): O(n d) "
        f"{'PASS' if fused['mem_b'] < 20 * inputs_mib else 'FAIL'}"
    )


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32 (10 mantissa bits, round to nearest even), as a tensor core
    reads it."""
    i = x.contiguous().view(torch.int32)
    i = (i + 0x0FFF + ((i >> 13) & 1)) & ~0x1FFF
    return i.view(torch.float32)


def emulated_sq(q: torch.Tensor, k: torch.Tensor, kind: str) -> torch.Tensor:
    """|q|^2 + |k|^2 - 2 q.k in float32 with the dot's operands as a tensor core reads them."""
    if kind == "tf32":
        qk = round_tf32(q) @ round_tf32(k).T
    elif kind == "tf32x3":
        qh, kh = round_tf32(q), round_tf32(k)
        ql, kl = round_tf32(q - qh), round_tf32(k - kh)
        qk = qh @ kh.T + (qh @ kl.T + ql @ kh.T)
    else:  # bf16
        qk = (q.bfloat16().float() @ k.bfloat16().float().T).float()
    scale = q.square().sum(-1)[:, None] + k.square().sum(-1)[None, :]
    return (scale - 2.0 * qk).clamp_min(0.0), scale


def section_distance_accuracy(device, emulate: bool, d: int = 64, n: int = 64) -> None:
    print(
        f"\n2a. max relative error of |q - k|^2 (float32, d = {d}, |q| in [0.5, 0.9]) for pairs "
        "at distance delta, against float64"
    )
    rows = {}
    for delta in DELTAS:
        q, k = near_pairs(n, d, delta, device, seed=7)
        q32, k32 = q.float(), k.float()
        exact = (q32.double() - k32.double()).square().sum(-1)  # [n], the pairs (i, i)
        by_differences = triton_ida.fused_pair_sq(q32, k32, force=True).diagonal().double()
        for label, cfg in FORMS:
            if (device == "cpu" and cfg.precision != "ieee") or cfg.contraction == "dot":
                continue  # the interpreter's dot is float32 whatever the precision
            sq = triton_ida.fused_pair_sq(q32, k32, cfg, force=True).diagonal().double()
            rows.setdefault(label, []).append(((sq - exact).abs() / exact).max().item())
        if emulate:
            for kind in ("tf32", "tf32x3", "bf16"):
                sq, scale = emulated_sq(q32, k32, kind)
                sq = sq.diagonal().double()
                rows.setdefault(f"expanded/{kind} (emulated)", []).append(
                    ((sq - exact).abs() / exact).max().item()
                )
                near = sq < KernelConfig().near * scale.diagonal()
                corrected = torch.where(near, by_differences, sq)  # per pair (kernel: per tile)
                rows.setdefault(f"corrected/{kind} (emulated)", []).append(
                    ((corrected - exact).abs() / exact).max().item()
                )
    print("  " + f"{'form/precision':<28}" + "".join(f"{f'd={x:.0e}':>10}" for x in DELTAS))
    for label, errs in rows.items():
        print("  " + f"{label:<28}" + "".join(f"{e:10.1e}" for e in errs))


def section_attention_accuracy(device, configs, d: int = 16, n: int = 48) -> None:
    print(
        f"\n2b. attention on near pairs (keys = queries moved by delta, d = {d}, eps = 1e-6), "
        "max error of out / of the gradients of q, k, v relative to their largest entry, "
        "against the float64 reference; 'reference/float32' is the reference itself in float32 "
        "(the softmax backward's dO.v_j - delta_i cancels when one weight is ~1)"
    )
    print("  " + f"{'form/precision':<28}" + "".join(f"{f'd={x:.0e}':>20}" for x in DELTAS[::2]))
    for label, cfg in [("reference/float32", "reference")] + list(configs):
        cells = []
        for delta in DELTAS[::2]:
            q, k = near_pairs(n, d, delta, device, seed=11)
            g = torch.Generator().manual_seed(13)
            v = torch.randn(n, 8, generator=g, dtype=torch.float64).to(device)
            cot = torch.randn(n, 8, generator=g, dtype=torch.float64).to(device)
            errs = []
            for f, dtype in ((None, torch.float64), (cfg, torch.float32)):
                # both on the float32-rounded points (rounding moves delta = 1e-5 by ~1%)
                leaves = [t.float().to(dtype).requires_grad_(True) for t in (q, k, v)]
                if f is None or f == "reference":
                    out = ida.inverse_distance_attention(*leaves, 1e-6, METRIC)[0]
                else:
                    out = triton_ida.fused_or_none(*leaves, 1e-6, METRIC, force=True, config=f)
                grads = torch.autograd.grad(out, leaves, cot.to(dtype))
                errs.append([out.detach().double()] + [g.double() for g in grads])
            worst_out = ((errs[1][0] - errs[0][0]).abs().max() / errs[0][0].abs().max()).item()
            worst_grad = max(
                ((a - b).abs().max() / b.abs().max()).item()
                for a, b in zip(errs[1][1:], errs[0][1:], strict=True)
            )
            cells.append(f"{worst_out:8.1e} / {worst_grad:8.1e}")
        print("  " + f"{label:<28}" + "".join(f"{c:>20}" for c in cells))


def section_boundary_accuracy(device, configs, d: int = 8, n: int = 40) -> None:
    print(
        f"\n2c. attention at the ball's boundary (|x| = 1 - 1e-4, d = {d}, half the queries on "
        "keys, eps = 1e-3): max error of out / of the gradients, relative, against float64"
    )
    q = ball(n, d, 17, device, 1 - 1e-4, 1 - 1e-4).float()
    k = ball(n, d, 18, device, 1 - 1e-4, 1 - 1e-4).float()
    k[: n // 2] = q[: n // 2]
    g = torch.Generator().manual_seed(19)
    v = torch.randn(n, 4, generator=g).to(device)
    cot = torch.randn(n, 4, generator=g, dtype=torch.float64).to(device)
    want = None
    for label, cfg in [("reference/float64", None)] + list(configs):
        dtype = torch.float64 if cfg is None else torch.float32
        leaves = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
        if cfg is None:
            out = ida.inverse_distance_attention(*leaves, EPS, METRIC)[0]
        else:
            out = triton_ida.fused_or_none(*leaves, EPS, METRIC, force=True, config=cfg)
        got = [out.detach().double()] + [
            t.double() for t in torch.autograd.grad(out, leaves, cot.to(dtype))
        ]
        if want is None:
            want = got
            continue
        errs = [
            ((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, want, strict=True)
        ]
        print(f"  {label:<28} {errs[0]:8.1e} / {max(errs[1:]):8.1e}")


def section_registers(configs, dims=(64,)) -> None:
    """Registers and spilled (stack) bytes per thread of the three kernels, compiled offline
    for sm_90 by triton's bundled ptxas (no GPU needed); Poincare, no masses."""
    import re
    import tempfile

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from world_model.attention import triton_ida_kernels as kernels

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    scalars = dict.fromkeys(("n_q", "n_k", "dim", "dim_v"), "i32")
    scalars.update(dict.fromkeys(("eps", "near", "series_t"), "fp32"))
    print("\nregisters / spill bytes per thread, sm_90 (forward, backward dq, backward dk dv)")
    for label, cfg in configs:
        for d in dims:
            cells = []
            for kernel in (kernels._ida_forward, kernels._ida_backward_q, kernels._ida_backward_kv):
                const = dict(
                    POINCARE=True, HAS_MASS=False, FORM=kernels.FORMS[cfg.form],
                    PREC=cfg.precision, ACC=tl.float32, BLOCK_Q=cfg.block_q,
                    BLOCK_K=cfg.block_k, BLOCK_D=d, BLOCK_DV=d,
                )  # fmt: skip
                if kernel is not kernels._ida_forward:
                    const["BY_DIFF"] = cfg.contraction == "difference"
                sig = {
                    a: "constexpr" if a in const else scalars.get(a, "*fp32")
                    for a in kernel.arg_names
                }
                binary = triton.compile(
                    ASTSource(kernel, sig, constexprs=const),
                    target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.num_warps},
                )  # fmt: skip
                with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                    f.write(binary.asm["cubin"])
                    f.flush()
                    usage = subprocess.run(
                        [str(cuobjdump), "-res-usage", f.name], capture_output=True, text=True
                    ).stdout
                m = re.search(r"REG:(\d+) STACK:(\d+)", usage)
                cells.append(f"{m[1]:>3} / {m[2]:>5}" if m else "   ?")
            blocks = f"{cfg.block_q}x{cfg.block_k} w{cfg.num_warps}"
            print(f"  {label:<28} {blocks:<12} d={d:<4}" + "   ".join(cells), flush=True)


def section_scaling(budget: Budget, sizes, dims, reserve: float) -> None:
    print(f"\n3. scaling ({METRIC}, one head, dv = d); fused = default config")
    compiled = {}
    for d in dims:
        for n in sizes:
            if budget.spent(reserve):
                print(f"  n = {n}, d = {d}: skipped (time budget)")
                continue
            print(f" n = {n}, d = {d}")
            fused = measure(fused_fn(), n, d, d)
            print(row("fused", fused))
            if "error" not in fused:
                print("  " + " " * 28 + rates(fused, n, d, d, triton_ida.DEFAULT_CONFIG))
            ref = measure(reference_fn, n, d, d, reps=3)
            print(row("reference", ref))
            if d == 64 and not budget.spent(reserve + 60):
                if "fn" not in compiled:
                    compiled["fn"] = torch.compile(reference_fn, dynamic=True)
                print(row("torch.compile(reference)", measure(compiled["fn"], n, d, d, reps=3)))
            if "error" not in fused and "error" not in ref:
                print(
                    f"  {'speed-up over reference':<28} fwd {ref['fwd'] / fused['fwd']:6.2f}x"
                    f"       bwd {ref['bwd'] / fused['bwd']:6.2f}x"
                )


def section_configs(budget: Budget, title: str, configs, reserve: float) -> None:
    n, d = TARGET_N, TARGET_D
    print(f"\n{title} (n = {n}, d = dv = {d}, {METRIC})")
    for label, cfg in configs:
        if budget.spent(reserve):
            print(f"  {label}: skipped (time budget)")
            continue
        r = measure(fused_fn(cfg), n, d, d)
        print(row(label, r))
        if "error" not in r:
            print("  " + " " * 28 + rates(r, n, d, d, cfg))


def section_agent(seconds: float) -> None:
    print("\n6. agent.train smoke run on CUDA (geodesic world model, 300 steps)")
    print(
        "  (agent.train has no autocast flag: float32. Its geodesic heads' inverse-distance "
        "kernel lives in world_model/attention/covariant_kernels.py, which does not call "
        "DenseHIDA: this run shows the CUDA path of training, not the fused kernels.)"
    )
    with tempfile.TemporaryDirectory() as logdir:
        cmd = [
            sys.executable, "-m", "agent.train", "--env", "Pendulum-v1",
            "--world-model", "geodesic", "--attention", "inverse_distance", "--steps", "300",
            "--device", "cuda", "--logdir", logdir, "--train.seed_steps", "100",
            "--train.eval_every", "0", "--train.eval_episodes", "1", "--train.progress", "false",
        ]  # fmt: skip
        start = time.monotonic()
        try:
            run = subprocess.run(
                cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(seconds, 10)
            )
        except subprocess.TimeoutExpired:
            print(f"  timed out after {seconds:.0f} s")
            return
        tail = (run.stdout + run.stderr).strip().splitlines()[-6:]
        status = "ok" if run.returncode == 0 else f"exit {run.returncode}"
        print(f"  {status} in {time.monotonic() - start:.0f} s; last lines:")
        for line in tail:
            print("    " + line[:160])


# --------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="n <= 4096, d = 64, no sweeps")
    p.add_argument("--budget", type=float, default=330.0, help="seconds for the whole run")
    p.add_argument("--no-train", action="store_true", help="skip the agent.train smoke run")
    p.add_argument(
        "--accuracy-cpu", action="store_true", help="section 2 only, under Triton's interpreter"
    )
    p.add_argument(
        "--registers", action="store_true", help="register use of the kernels for sm_90, no GPU"
    )
    args = p.parse_args()
    if args.registers:
        blocks = [
            (f"blocks {bq}x{bk}", KernelConfig(block_q=bq, block_k=bk, num_warps=w))
            for bq, bk, w in BLOCKS
        ]
        section_registers(FORMS[:3] + blocks[1:])
        return
    if args.accuracy_cpu:
        torch.manual_seed(0)
        section_distance_accuracy("cpu", emulate=True)
        ieee = [(label, cfg) for label, cfg in FORMS if cfg.precision == "ieee"]
        small = [
            (label, KernelConfig(form=c.form, contraction=c.contraction, block_q=16, block_k=16))
            for label, c in ieee
        ]
        section_attention_accuracy("cpu", small)
        section_boundary_accuracy("cpu", small)
        return
    if not torch.cuda.is_available():
        print("triton_ida_gpu: no CUDA device; nothing measured (--accuracy-cpu runs on CPU)")
        return
    budget = Budget(args.budget)
    agent_reserve = 0.0 if args.no_train else 75.0
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    section_targets(budget)
    section_distance_accuracy(DEVICE, emulate=False)
    section_attention_accuracy(DEVICE, FORMS)
    section_boundary_accuracy(DEVICE, FORMS)
    sizes = (1024, 4096) if args.quick else (1024, 4096, 16384, 32768)
    dims = (64,) if args.quick else (32, 64, 128)
    section_scaling(budget, sizes, dims, reserve=agent_reserve + (0 if args.quick else 90))
    if not args.quick:
        section_configs(budget, "4. forms and precisions", FORMS[1:], agent_reserve + 45)
        blocks = [
            (f"blocks {bq}x{bk}, {w} warps", KernelConfig(block_q=bq, block_k=bk, num_warps=w))
            for bq, bk, w in BLOCKS[1:]
        ]
        section_configs(budget, "5. block sizes (difference/ieee)", blocks, agent_reserve)
    if not args.no_train:
        section_agent(max(budget.left(), 60.0))
    print(f"\ntotal {args.budget - budget.left():.0f} s")


if __name__ == "__main__":
    main()
