"""PCG against Cholesky for the kernel ridge systems of XAKER attention (seed 001 §4-§6).

For each problem (an ill-conditioned and a well-conditioned SPD kernel system) and each size n,
solve (K + lam I) X = V (V: `--rhs` columns, one head's values) to relative residual `--tol`
with each preconditioner, and report the PCG iterations and the wall time *including the
preconditioner's build*, next to torch.linalg.cholesky + cholesky_solve (factorisation
included). Float64 throughout (tol 1e-6 on a kappa >= 1e4 system is below float32's reach).

    python -m benchmarks.krr_pcg            # n = 64, 256, 1024, 4096 (a few minutes)
    python -m benchmarks.krr_pcg --quick    # n = 64, 256, 1024, fewer training steps

Problems:
  ill:  rbf kernel (sigma 1) on keys in 16 tight clusters (d = 4, spread 0.1), lam = 1e-3
  well: exp kernel (the seed's default: L2-normalised keys, temp 1), d = 16, lam = 1
The condition number kappa(K + lam I) is measured with eigvalsh.

Preconditioners (world_model/attention/krr_precond.py): identity; diagonal (Jacobi); fast with
the seed's fixed random basis lr_base at rank 64, untrained and trained; fast with the Nystrom
(pivoted-Cholesky) basis at rank 64 (untrained and trained) and 128, and at rank 128 with the
seed-style diagonal correction; CCCP (Tyler, O(n^3) eigh; n <= 1024). "trained": the importance
vector and scale trained with full-batch Adam (lr 0.02) to minimise the mean log relative
residual after 5 PCG iterations over 4 training draws of the problem at n = 256; all timings
are on a held-out draw. A method that does not converge within the cap at some n is skipped at
larger n (the seed's random basis knows nothing of K and fails on the ill-conditioned problem).

Timings are the best of 5 (n <= 256), 3 (n = 1024) or 1-2 (n = 4096) wall-clock runs, with
torch on one thread (torch.set_num_threads(1)) for every method alike: on a shared 2-core machine
multi-threaded small ops wait on descheduled threads and the timings become noise. Never more
than one thread (batched LU is wrong after set_num_threads(k >= 2), PyTorch issue 142815).
Compare the times as ratios within one run.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import torch

from world_model.attention.kernel_matrix import kernel_matrix
from world_model.attention.krr_precond import (
    DiagonalPreconditioner,
    IdentityPreconditioner,
    LowRankPreconditioner,
    Preconditioner,
    TylerPreconditioner,
)
from world_model.attention.krr_solver import cholesky_spd_solve, pcg

DTYPE = torch.float64
CCCP_MAX_N = 1024
TRAIN_ITERS = 5
LN10 = math.log(10.0)


@dataclass
class Problem:
    name: str
    lam: float
    description: str

    def keys(self, n: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        if self.name == "ill":
            centres = 2.0 * torch.randn(16, 4, generator=g, dtype=DTYPE)
            label = torch.randint(16, (n,), generator=g)
            return centres[label] + 0.1 * torch.randn(n, 4, generator=g, dtype=DTYPE)
        return torch.randn(n, 16, generator=g, dtype=DTYPE)

    def kernel(self, n: int, seed: int) -> torch.Tensor:
        k = self.keys(n, seed)
        return kernel_matrix(k, k, "rbf" if self.name == "ill" else "exp")  # [n, n]


PROBLEMS = [
    Problem("ill", 1e-3, "rbf, 16 tight clusters in d=4, lam=1e-3"),
    Problem("well", 1.0, "exp (normalised keys, temp 1), d=16, lam=1"),
]


def rhs(n: int, m: int, seed: int) -> torch.Tensor:
    return torch.randn(n, m, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def log_residual(pre: Preconditioner, K, v, lam: float) -> torch.Tensor:
    """Mean over columns of log(|v - A x| / |v|) after TRAIN_ITERS PCG iterations."""
    x = pcg(K, v, lam, pre.prepare(K, lam), 0.0, TRAIN_ITERS).x
    return torch.log((v - (K @ x + lam * x)).norm(dim=0) / v.norm(dim=0)).mean()


def train(pre: Preconditioner, problem: Problem, steps: int, m: int) -> tuple[float, ...]:
    """Full-batch Adam (lr 0.02) on the preconditioner's parameters (importance, scale): the
    mean log relative residual after TRAIN_ITERS PCG iterations over 4 training draws at
    n = 256 (seeds 100-103). Returns that loss before / after, and on a held-out draw."""
    data = [(problem.kernel(256, 100 + i), rhs(256, m, 200 + i)) for i in range(4)]
    held_out = (problem.kernel(256, 0), rhs(256, m, 1))

    def loss_fn():
        return torch.stack([log_residual(pre, K, v, problem.lam) for K, v in data]).mean()

    with torch.no_grad():
        before = (float(loss_fn()), float(log_residual(pre, *held_out, problem.lam)))
    opt = torch.optim.Adam(pre.parameters(), lr=0.02)
    for _ in range(steps):
        loss = loss_fn()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = (float(loss_fn()), float(log_residual(pre, *held_out, problem.lam)))
    return (*before, *after)


def timed(fn, repeats: int, *fn_args):
    """(fn(*fn_args), best wall time of `repeats` calls): on a shared CPU the minimum is the
    least disturbed estimate of the cost (as timeit advises)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*fn_args)
        times.append(time.perf_counter() - t0)
    return out, min(times)


def solve_pcg(pre: Preconditioner, K, v, lam: float, tol: float, max_iter: int):
    """Build the preconditioner (rebuild_every = 1: every call builds) and run PCG."""
    return pcg(K, v, lam, pre.prepare(K, lam), tol, max_iter)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n <= 1024, 6 training steps")
    parser.add_argument("--rhs", type=int, default=16, help="right-hand sides (value dim)")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=600)
    parser.add_argument("--train-steps", type=int, default=None)
    args = parser.parse_args()
    if args.rhs < 1 or args.max_iter < 1 or not 0 < args.tol < 1:
        parser.error("--rhs and --max-iter must be >= 1 and --tol in (0, 1)")
    sizes = [64, 256, 1024] if args.quick else [64, 256, 1024, 4096]
    steps = args.train_steps if args.train_steps is not None else (6 if args.quick else 20)
    m = args.rhs
    max_n = max(sizes)
    torch.set_num_threads(1)  # see the module docstring; never k >= 2
    print(
        f"KRR systems (K + lam I) X = V, V [n, {m}], tol {args.tol:g}, float64, PCG cap "
        f"{args.max_iter} iterations, 1 thread; times include the preconditioner build / "
        "factorisation; cells: iterations, time, time / cholesky_solve's"
    )

    for problem in PROBLEMS:
        methods: dict[str, Preconditioner | None] = {
            "identity": IdentityPreconditioner(),
            "diagonal (Jacobi)": DiagonalPreconditioner(),
            "fast random r=64": LowRankPreconditioner(rank=64, basis="random", max_len=max_n),
            "fast random r=64 trained": LowRankPreconditioner(
                rank=64, basis="random", max_len=max_n
            ),
            "fast nystrom r=64": LowRankPreconditioner(rank=64),
            "fast nystrom r=64 trained": LowRankPreconditioner(rank=64),
            "fast nystrom r=128": LowRankPreconditioner(rank=128),
            "fast nystrom r=128 +diag": LowRankPreconditioner(rank=128, diag_correction=True),
            "cccp (Tyler)": TylerPreconditioner(),
        }
        print(f"\n=== problem '{problem.name}': {problem.description}")
        for name in ("fast random r=64 trained", "fast nystrom r=64 trained"):
            t0 = time.perf_counter()
            tr0, ho0, tr1, ho1 = train(methods[name], problem, steps, m)
            print(
                f"  trained {name!r}: {steps} full-batch Adam steps in "
                f"{time.perf_counter() - t0:.1f} s; mean log10 residual after {TRAIN_ITERS} "
                f"iterations, train {tr0 / LN10:.2f} -> {tr1 / LN10:.2f}, held-out n=256 "
                f"{ho0 / LN10:.2f} -> {ho1 / LN10:.2f}"
            )

        rows: dict[str, list[str]] = {name: [] for name in [*methods, "cholesky_solve"]}
        kappas, summary, failed = [], {}, {}
        for n in sizes:
            K = problem.kernel(n, seed=0)  # held-out draw
            v = rhs(n, m, seed=1)
            ev = torch.linalg.eigvalsh(K)
            kappas.append((ev[-1] + problem.lam) / (ev[0].clamp_min(0) + problem.lam))
            repeats = 5 if n <= 256 else (3 if n <= 1024 else 1)
            with torch.no_grad():
                _, t_chol = timed(cholesky_spd_solve, max(repeats, 2), K, v, problem.lam)
                rows["cholesky_solve"].append(f"{1e3 * t_chol:.3g} ms")
                result = {}
                for name, pre in methods.items():
                    if isinstance(pre, TylerPreconditioner) and n > CCCP_MAX_N:
                        rows[name].append("skipped: O(n^3) build")
                        continue
                    if name in failed:
                        rows[name].append(f"skipped: failed n={failed[name]}")
                        continue
                    fn_args = (pre, K, v, problem.lam, args.tol, args.max_iter)
                    out, t = timed(solve_pcg, repeats, *fn_args)
                    it = int(out.iters.max())
                    conv = bool(out.converged.all())
                    result[name] = (it if conv else math.inf, t)
                    if not conv:
                        failed.setdefault(name, n)
                    label = f"{it:4d}" if conv else f">{args.max_iter}"
                    rows[name].append(f"{label} it {1e3 * t:7.3g} ms {t / t_chol:6.3g}x")
            summary[n] = (result, t_chol)

        kap = "  ".join(f"n={n}: {float(k):.3g}" for n, k in zip(sizes, kappas, strict=True))
        print(f"  kappa(K + lam I) by eigvalsh: {kap}")
        width = 26
        print(f"  {'method':<28}" + "".join(f"{'n = ' + str(n):>{width}}" for n in sizes))
        for name, cells in rows.items():
            print(f"  {name:<28}" + "".join(f"{c:>{width}}" for c in cells))

        for n in sizes:
            result, t_chol = summary[n]
            ident = result["identity"][0]
            cheap = {k: r for k, r in result.items() if not k.startswith("cccp")}
            for label, pool in (("fewest iterations", result), ("without an O(n^3) build", cheap)):
                best = min(pool, key=lambda k: pool[k][0])
                print(
                    f"  n={n:5d}: {label}: {best!r}, {pool[best][0]} = "
                    f"{pool[best][0] / ident:.3f} x identity's {ident} iterations"
                )
            fastest = min(result, key=lambda k: result[k][1])
            beats = result[fastest][1] < t_chol
            print(
                f"  n={n:5d}: fastest PCG {fastest!r} at {result[fastest][1] / t_chol:.2f} x "
                f"Cholesky's time: it {'beats' if beats else 'loses to'} cholesky_solve"
            )


if __name__ == "__main__":
    main()
