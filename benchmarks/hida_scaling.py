"""Time, memory and error of the HIDA operators (seed 000 M1-M4) against n, and the
all-pairs distance forms of world_model/attention/ida.py, printed as tables.

    python -m benchmarks.hida_scaling            # everything (~2-3 minutes on one CPU thread)
    python -m benchmarks.hida_scaling --quick    # smaller sizes (~30 s)
    python -m benchmarks.hida_scaling --section distance   # or: scaling, all

How it measures:
- time: least wall time over repeated calls in this process, under torch.no_grad (inference),
  float32, one intra-op thread by default (--threads); only ratios and slopes measured in one
  run are meaningful on a shared machine.
- memory: peak resident memory above the starting point, in a forked single-thread child
  (CPU has no allocator counter; a fork of this process measures the same code in isolation,
  minus the child's empty-run baseline). On a GPU, torch.cuda.max_memory_allocated instead.
- error: relative RMS error ||o - o_dense|| / ||o_dense|| against Dense-HIDA on the same
  inputs, where Dense runs; keys on a smooth trajectory in the ball ("trajectory", the memory's
  case: time order = nearness) and i.i.d. in the ball ("iid"); queries are keys moved by a
  geodesic step of length ~0.1; values a smooth function of the key; eps = 0.01 E[d_H^2] (the
  seed's recommendation, §2.8).
- slopes: least-squares slope of log(time) against log(n).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import resource
import time
from functools import partial

import numpy as np
import torch

from geometry import poincare, sphere
from world_model.attention import ida
from world_model.attention.hida import (
    CHIDA,
    FPHIDA,
    LHIDA,
    CHIDAConfig,
    DenseHIDA,
    DenseHIDAConfig,
    FPHIDAConfig,
    LHIDAConfig,
    c_hida_empty_state,
    c_hida_ingest,
    c_hida_read,
)

D, DV = 16, 16
CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")


# --------------------------------------------------------------------------- measuring


def sync():
    if CUDA:
        torch.cuda.synchronize()


def timeit(fn, budget_s: float = 1.5, max_reps: int = 7) -> float:
    """Least seconds over repeated calls after one warm-up call (as many as fit in budget_s,
    2 to max_reps): on a machine shared with other jobs the minimum is the least disturbed."""
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    reps = int(min(max(budget_s / max(first, 1e-6), 2), max_reps))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _child(queue, fn):
    torch.set_num_threads(1)  # OpenMP is not fork-safe with more threads
    base = _rss_bytes()
    fn()
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base)


def _fork_peak(fn) -> float:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn))
    proc.start()
    try:
        peak = queue.get(timeout=600)
    finally:
        proc.join()
    return peak


_BASELINE: list[float] = []


def peak_mib(fn) -> float:
    """Peak memory of fn() in MiB above its starting point."""
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        fn()
        return (torch.cuda.max_memory_allocated() - start) / 2**20
    if not _BASELINE:
        _BASELINE.append(_fork_peak(lambda: None))
    return max(_fork_peak(fn) - _BASELINE[0], 0.0) / 2**20


def slope(ns, ts) -> float:
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def rel_err(out, ref) -> float:
    return float((out - ref).norm() / ref.norm())


def table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n{title}")
    cells = [header] + [[c if isinstance(c, str) else _fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print(line(r))


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-2:
        return f"{x:.2e}"
    return f"{x:.3g}"


# --------------------------------------------------------------------------- data


def trajectory_keys(n: int, d: int = D, seed: int = 0) -> torch.Tensor:
    """A smooth curve in the ball: exp_0 of a sum of 8 sinusoids per coordinate (periods 20 to
    1000 steps), |z| mostly in 0.5-0.95, plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n, dtype=torch.float64).unsqueeze(-1)  # [n, 1]
    out = torch.zeros(n, d, dtype=torch.float64)
    for _ in range(8):
        period = torch.exp(
            math.log(20) + (math.log(1000) - math.log(20)) * torch.rand(d, generator=g)
        )
        phase = 2 * math.pi * torch.rand(d, generator=g)
        out += torch.randn(d, generator=g, dtype=torch.float64) * torch.sin(
            2 * math.pi * t / period + phase
        )
    out = out * (1.5 / math.sqrt(8 * d)) + 0.01 * torch.randn(
        n, d, generator=g, dtype=torch.float64
    )
    return poincare.project(poincare.expmap0(out), 0.99).float()


def iid_keys(n: int, d: int = D, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    return (0.95 * torch.rand(n, 1, generator=g) ** (1.0 / d)) * u


def nearby_queries(keys: torch.Tensor, length: float = 0.1, seed: int = 1) -> torch.Tensor:
    """Each key moved along a random geodesic by hyperbolic length ~length."""
    g = torch.Generator().manual_seed(seed)
    xi = torch.randn(keys.shape, generator=g) / math.sqrt(keys.shape[-1])
    return poincare.expmap(keys, length * xi / poincare.conformal_factor(keys))


def smooth_values(keys: torch.Tensor, dv: int = DV, seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = 3.0 * torch.randn(keys.shape[-1], dv, generator=g)
    return torch.sin(poincare.logmap0(keys) @ w)


def seed_eps(keys: torch.Tensor) -> float:
    """eps = 0.01 E[d_H^2] over pairs of keys (seed 000 §2.8's recommendation)."""
    sample = keys[torch.randperm(keys.shape[0], generator=torch.Generator().manual_seed(0))[:512]]
    return 0.01 * float(ida.squared_distance_matrix(sample, sample, "poincare").mean())


# --------------------------------------------------------------------------- distance forms


def _naive_f32_sqdist(x, y):
    """|x|^2 + |y|^2 - 2 x.y in float32: what torch.cdist computes for > 25 points."""
    return (x.square().sum(-1)[:, None] + y.square().sum(-1)[None, :] - 2 * x @ y.T).clamp_min(0)


def _points(metric: str, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g, dtype=torch.float64)
    if metric == "sphere":
        return sphere.normalize(x)
    x = x / x.norm(dim=-1, keepdim=True)
    return x * (0.5 + 0.45 * torch.rand(n, 1, generator=g, dtype=torch.float64))


def distance_section(quick: bool) -> None:
    print("\n=== All-pairs distance forms of inverse-distance attention (float32) ===")
    sizes = [1024] if quick else [1024, 4096]
    for metric in ida.METRICS:
        rows = []
        for n in sizes:
            x = _points(metric, n, 0).float().to(DEVICE)
            y = _points(metric, n, 1).float().to(DEVICE)
            v = torch.randn(n, DV, device=DEVICE)
            base = None
            for form in ida.FORMS:
                if form == "difference" and n > 2048:
                    rows.append([n, form, None, None, None, None])
                    continue

                def fwd(x=x, y=y, v=v, metric=metric, form=form):
                    with torch.no_grad():
                        ida.inverse_distance_attention(x, y, v, 1e-3, metric, form=form)

                def fwd_bwd(x=x, y=y, v=v, metric=metric, form=form):
                    q, k = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
                    out, _ = ida.inverse_distance_attention(q, k, v, 1e-3, metric, form=form)
                    out.square().sum().backward()

                tf, tb = timeit(fwd), timeit(fwd_bwd)
                if form == "expanded":
                    base = (tf, tb)
                rows.append([n, form, tf * 1e3, tb * 1e3, tf / base[0], tb / base[1]])
        table(
            f"[{metric}] dense IDA, d = {D}: time (ms) and ratio to 'expanded'",
            ["n", "form", "fwd ms", "fwd+bwd ms", "fwd ratio", "fwd+bwd ratio"],
            rows,
        )

    rows = []
    for metric in ida.METRICS:
        for r in (1e-5, 1e-3, 1e-1):
            x = _points(metric, 256, 2)
            u = torch.randn(
                x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)
            )
            y = x + r * u / u.norm(dim=-1, keepdim=True)
            if metric == "sphere":
                y = sphere.normalize(y)
            x32, y32 = x.float(), y.float()
            ref = ida.squared_distance_matrix(x32.double(), y32.double(), metric, "difference")
            ref = ref.diagonal()
            row = [metric, r]
            for form in ida.FORMS:
                got = ida.squared_distance_matrix(x32, y32, metric, form).diagonal().double()
                row.append(float(((got - ref) / ref).abs().max()))
            e_ref = (x32.double() - y32.double()).square().sum(-1)
            naive = _naive_f32_sqdist(x32, y32).diagonal().double()
            cd = torch.cdist(x32, y32).square().diagonal().double()
            row += [
                float(((naive - e_ref) / e_ref).abs().max()),
                float(((cd - e_ref) / e_ref).abs().max()),
            ]
            rows.append(row)
    table(
        "Accuracy near coincident points: max relative error of d^2 (float32 inputs; reference: "
        "float64 explicit differences on the same rounded points). Last two columns: |x - y|^2 "
        "alone, float32 |x|^2 + |y|^2 - 2x.y and default torch.cdist (matmul path)",
        [
            "metric",
            "|x - y|",
            "expanded",
            "cdist",
            "difference",
            "naive f32 |x-y|^2",
            "cdist(mm) |x-y|^2",
        ],
        rows,
    )

    rows = []
    for metric in ida.METRICS:
        k = _points(metric, 256, 4).float()
        for eps in (1e-4, 1e-7):
            row = [metric, eps]
            ref_w = ida.inverse_distance_weights(
                ida.squared_distance_matrix(k.double(), k.double(), metric, "difference"), eps
            ).diagonal()
            for form in ida.FORMS:
                w = ida.inverse_distance_weights(
                    ida.squared_distance_matrix(k, k, metric, form), eps
                )
                row.append(float((w.diagonal().double() - ref_w).abs().max()))
            naive = ida.inverse_distance_weights(_naive_f32_sqdist(k, k), eps).diagonal()
            row.append(
                float((naive.double() - ref_w).abs().max()) if metric == "euclidean" else None
            )
            row.append(float(1 - ref_w.min()))
            rows.append(row)
    table(
        "Exact retrieval (query = key, 256 keys): max |W_jj - W_jj(float64)| per form; last: "
        "1 - min W_jj in float64",
        ["metric", "eps", "expanded", "cdist", "difference", "naive f32 (euclid)", "1 - W_jj ref"],
        rows,
    )


# --------------------------------------------------------------------------- operators vs n


def _ops(n: int, eps: float, keys: torch.Tensor, m: int, c: int):
    fp = FPHIDA(FPHIDAConfig(eps=eps, query_chunk=2048, check_inputs=False))
    lh = LHIDA(LHIDAConfig(n_anchors=m, dim=D, eps=eps, check_inputs=False))
    lh.init_anchors_from_keys(keys, generator=torch.Generator().manual_seed(5))
    ch = CHIDA(CHIDAConfig(n_summaries=c, key_dim=D, value_dim=DV, eps=eps, ingest_chunk=1024,
                           check_inputs=False))  # fmt: skip
    dense = DenseHIDA(DenseHIDAConfig(eps=eps, query_chunk=1024, check_inputs=False))
    return dense, fp, lh.to(DEVICE), ch.to(DEVICE)


def _c_ingest_all(keys, values, c, chunk=1024):
    """C-HIDA state after streaming all keys in time order, chunk keys at a time."""
    state = c_hida_empty_state((), c, keys.shape[-1], values.shape[-1], like=values)
    for s in range(0, keys.shape[0], chunk):
        state, _ = c_hida_ingest(state, keys[s : s + chunk], values[s : s + chunk])
    return state


def scaling_section(quick: bool) -> None:
    print("\n=== HIDA operators against n (n queries, n keys; float32; no grad) ===")
    m, c = 64, 64
    dense_ns = [2**9, 2**10, 2**11] if quick else [2**9, 2**10, 2**11, 2**12]
    fp_ns = [2**9, 2**10, 2**11, 2**13, 2**15] if quick else [*dense_ns, 2**14, 2**16]
    lc_ns = [*dense_ns, 2**14, 2**17] if quick else [*dense_ns, 2**14, 2**17, 2**20]
    all_ns = sorted(set(dense_ns + fp_ns + lc_ns))
    results = {name: {} for name in ("Dense", "FP", "L", "C")}
    errors = {}

    def runs_at(n):
        """The timed calls at size n, and what they need."""
        keys = trajectory_keys(n).to(DEVICE)
        queries = nearby_queries(keys.cpu()).to(DEVICE)
        values = smooth_values(keys.cpu()).to(DEVICE)
        eps = seed_eps(keys.cpu())
        dense, fp, lh, ch = _ops(n, eps, keys.cpu(), m, c)
        args = (queries, keys, values)
        runs = {}
        if n in dense_ns:
            runs["Dense"] = partial(dense, *args, need_weights=False)
        if n in fp_ns:
            runs["FP"] = partial(fp, *args, need_weights=False)
        if n in lc_ns:
            runs["L"] = partial(lh, *args, need_weights=False)
            runs["C"] = partial(_c_ingest_all, keys, values, c)
        return runs, (queries, keys, values, eps), (dense, fp, lh, ch)

    for n in all_ns:  # pass 1: times and errors, in this process
        runs, (queries, keys, values, eps), (dense, fp, lh, ch) = runs_at(n)
        for name, fn in runs.items():
            with torch.no_grad():
                results[name][n] = dict(time=timeit(fn))
                if name == "C":  # the per-token costs with n entries stored
                    state, q_new = fn(), queries[:1024]
                    read = timeit(partial(c_hida_read, q_new, state, eps)) / len(q_new)
                    step = partial(c_hida_ingest, state, q_new, values[: len(q_new)])
                    results[name][n].update(read=read, ingest=timeit(step) / len(q_new))
        if n in dense_ns:
            with torch.no_grad():
                ref, _ = dense(queries, keys, values, need_weights=False)
                errors[("Dense", "trajectory", n)] = float(ref.norm() / values.norm())
                for name, op in (("FP", fp), ("L", lh), ("C", ch)):
                    out, _ = op(queries, keys, values, need_weights=False)
                    errors[(name, "trajectory", n)] = rel_err(out, ref)
                ik = iid_keys(n).to(DEVICE)
                iq, iv = nearby_queries(ik.cpu()).to(DEVICE), smooth_values(ik.cpu()).to(DEVICE)
                ieps = seed_eps(ik.cpu())
                idense, ifp, ilh, ich = _ops(n, ieps, ik.cpu(), m, c)
                iref, _ = idense(iq, ik, iv, need_weights=False)
                errors[("Dense", "iid", n)] = float(iref.norm() / iv.norm())
                for name, op in (("FP", ifp), ("L", ilh), ("C", ich)):
                    out, _ = op(iq, ik, iv, need_weights=False)
                    errors[(name, "iid", n)] = rel_err(out, iref)
        print(f"  n = {n} timed", flush=True)
    for n in all_ns:  # pass 2: peak memory, in forked children (after all timing)
        runs, _, _ = runs_at(n)
        for name, fn in runs.items():
            with torch.no_grad():
                results[name][n]["mem"] = peak_mib(fn)

    for name, note in (
        ("Dense", "expect slope 2; last columns: how far Dense's output shrinks to the mean"),
        ("FP", "w = g = ceil(log2 n); expect n log n (slope ~1.1)"),
        ("L", f"m = {m} anchors (random keys); expect slope 1"),
    ):
        ns = sorted(results[name])
        rows = []
        for n in ns:
            r = results[name][n]
            rows.append([
                n, r["time"] * 1e3, r["time"] / n * 1e6, r["mem"],
                errors.get((name, "trajectory", n)), errors.get((name, "iid", n)),
            ])  # fmt: skip
        s = slope(ns, [results[name][n]["time"] for n in ns])
        last = ("|o_dense|/|v| (traj)", "|o_dense|/|v| (iid)") if name == "Dense" else (
            "err vs Dense (traj)", "err vs Dense (iid)")  # fmt: skip
        table(
            f"{name}-HIDA ({note}); fitted log-log slope of time: {s:.2f}",
            ["n", "time ms", "us per query", "peak MiB", *last],
            rows,
        )
    ns = sorted(results["C"])
    per_key = [results["C"][n]["ingest"] for n in ns]
    per_read = [results["C"][n]["read"] for n in ns]
    big = [i for i, n in enumerate(ns) if n >= 1000]  # the target's range: 1e3 ... 1e6 entries
    key_spread = max(per_key[i] for i in big) / min(per_key[i] for i in big)
    read_spread = max(per_read[i] for i in big) / min(per_read[i] for i in big)
    rows = [
        [n, results["C"][n]["time"] * 1e3, results["C"][n]["time"] / n * 1e6, pk * 1e6, pr * 1e6,
         results["C"][n]["mem"],
         errors.get(("C", "trajectory", n)), errors.get(("C", "iid", n))]
        for n, pk, pr in zip(ns, per_key, per_read, strict=True)
    ]  # fmt: skip
    table(
        f"C-HIDA (c = {c} summaries): stream n keys in chunks of 1024 (total, and per key); then, "
        "with n entries stored, ingest 1024 more keys and read 1024 queries (per token): "
        f"max/min over n >= 1000 = {key_spread:.2f} (ingest), {read_spread:.2f} (read); target "
        "<= 1.5 from ~1e3 to ~1e6 stored entries",
        ["n stored", "stream ms", "us per key (stream)", "us per key at n", "us per query at n",
         "peak MiB", "err vs Dense (traj)", "err vs Dense (iid)"],
        rows,
    )  # fmt: skip
    lns = sorted(results["L"])
    print(
        f"\nTargets: L-HIDA slope {slope(lns, [results['L'][n]['time'] for n in lns]):.2f} "
        f"(target <= 1.1); C-HIDA per-key ingest spread {key_spread:.2f}x, "
        f"per-query read spread {read_spread:.2f}x (target <= 1.5x)"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (~30 s)")
    parser.add_argument("--section", choices=["distance", "scaling", "all"], default="all")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op CPU threads (default 1: with more, OpenMP barriers make timings on a "
        "machine shared with other jobs swing by 100x; never use >= 2 where batched LU runs)",
    )
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"device: {DEVICE}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    start = time.perf_counter()
    if args.section in ("distance", "all"):
        distance_section(args.quick)
    if args.section in ("scaling", "all"):
        scaling_section(args.quick)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
