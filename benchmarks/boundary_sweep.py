"""Boundary sweep: a seeded sweep of float32 inputs through every geometry function and every
attention operator (issue 26, deliverable 4), counting non-finite values and gradients.

    python -m benchmarks.boundary_sweep                      # 10^6 inputs per row
    python -m benchmarks.boundary_sweep --inputs 100000 --seed 1 --only geodesic wilson_lines.
    python -m benchmarks.boundary_sweep --skip "wilson_lines.wilson_line[" gauge_omega geodesic

The rows, the draws and the checks are the Hypothesis tests' (tests/geometry/
test_boundary_fuzz.py: points with |z| = 1 - 10^-u up to 1 - 1e-5, tangent vectors from 1e-8
to 1e4 and exactly 0; tests/world_model/test_attention_boundary_fuzz.py: the operators and the
geodesic model's step with |z| up to GeodesicConfig.max_norm); here each row sees `--inputs`
samples in batches of `--batch`, the same batches for every row. Per row the table counts the
samples with a non-finite output, with a non-finite gradient (w.r.t. the inputs, and the
parameters: a parameter's gradient is shared by its batch, so a non-finite one counts every
sample of the batch), and outside the documented contract (a max_norm clamp, +inf where
documented), and gives the largest |z| the row read. One torch thread. Exit status 1 when any
count is not 0.
"""

from __future__ import annotations

import argparse
import time

import torch

from tests.geometry import test_boundary_fuzz as geometry_fuzz
from tests.world_model import test_attention_boundary_fuzz as attention_fuzz

HEADER = (
    "| function / operator | inputs | non-finite values | non-finite gradients "
    "| outside contract | max norm | s |"
)


def rows(
    only: list[str] | None = None, skip: list[str] | None = None
) -> list[tuple[geometry_fuzz.Case, float]]:
    """(case, largest gap u of its draws) for every row whose name contains one of `only` (all
    rows when None) and none of `skip`."""
    table = [(c, 5.0) for c in geometry_fuzz.CASES]
    table += [(c, attention_fuzz.MAX_GAP) for c in attention_fuzz.CASES]
    return [
        (c, gap)
        for c, gap in table
        if (not only or any(o in c.name for o in only)) and not any(s in c.name for s in skip or ())
    ]


def sweep(
    n_inputs: int,
    seed: int,
    batch: int,
    only: list[str] | None = None,
    skip: list[str] | None = None,
) -> list[dict]:
    """Counts per row over n_inputs seeded samples (see the module docstring)."""
    table = rows(only, skip)
    stats = [
        dict(name=c.name, inputs=0, values=0, grads=0, contract=0, max_norm=0.0, seconds=0.0)
        for c, _ in table
    ]
    generator = torch.Generator().manual_seed(seed)
    done = 0
    while done < n_inputs:
        n = min(batch, n_inputs - done)
        draws = {}  # one draw per range of |z|, shared by the rows of that range
        state = generator.get_state()
        for gap in sorted({gap for _, gap in table}):
            generator.set_state(state)  # the same samples, rescaled to each range
            draws[gap] = geometry_fuzz.random_draw(n, generator, gap)
        for (case, gap), row in zip(table, stats, strict=True):
            start = time.perf_counter()
            flags = geometry_fuzz.evaluate(case, draws[gap])
            row["seconds"] += time.perf_counter() - start
            row["inputs"] += n
            row["values"] += int(flags.values.sum())
            row["grads"] += int(flags.grads.sum())
            row["contract"] += int(flags.contract.sum())
            row["max_norm"] = max(row["max_norm"], flags.max_norm)
        done += n
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.boundary_sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--inputs", type=int, default=1_000_000, help="samples per row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=10_000, help="samples per batch")
    parser.add_argument("--only", nargs="+", metavar="TEXT", help="rows whose name contains")
    parser.add_argument("--skip", nargs="+", metavar="TEXT", help="but not these")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    stats = sweep(args.inputs, args.seed, args.batch, args.only, args.skip)
    wall = time.perf_counter() - start
    print(
        f"\nboundary sweep: {args.inputs} inputs per row, seed {args.seed}, batches of "
        f"{args.batch}, 1 thread; |z| up to {geometry_fuzz.R_MAX} (geometry), "
        f"{attention_fuzz.R_MODEL} (attention operators, the model's max_norm)\n"
    )
    print(HEADER)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in stats:
        print(
            f"| {row['name']} | {row['inputs']} | {row['values']} | {row['grads']} | "
            f"{row['contract']} | {row['max_norm']:.8f} | {row['seconds']:.1f} |"
        )
    bad = {k: sum(r[k] for r in stats) for k in ("values", "grads", "contract")}
    print(
        f"\n{len(stats)} rows; non-finite values {bad['values']}, non-finite gradients "
        f"{bad['grads']}, outside contract {bad['contract']}; wall {wall:.0f} s"
    )
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
