"""The seed's components knocked out one at a time on the disk benchmark: the geodesic world
model's open-loop prediction on PoincareDisk-v0 (benchmarks/world_model_disk.py's setting) for
the full model and each ablation of agent.compare (agent/comparison/ablations.py), trained on
the same noisy trajectories from the same initialisation seed, paired seed by seed.

The model sees the observed (z, p) (identity encoder) and rolls out open loop without history
or episodic memory over the fixed prototype table (world_model_disk.py's model), so
`memory-off`, `routing-dense` and `screening-off` (screening acts on the window's texture entries
only) change nothing here and are left out. Per row and seed: the
noise-free open-loop error (normalised RMS, mean over steps 1..50 and at step 50, from held-out
starts; world_model_disk.open_loop_error) and the time per update; the table gives mean ± s.e.
over seeds and the paired difference against the full model (> 0: the ablation predicts worse).

    python -m benchmarks.ablation_disk                       # every ablation, 3 seeds
    python -m benchmarks.ablation_disk --ablations wilson-off screening-off --seeds 1
    python -m benchmarks.ablation_disk --first-seed 2 --seeds 1     # seed 2 alone (another core)

Each (seed, row) is saved in --out as it finishes; a rerun skips those already there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from agent.comparison.ablations import ABLATIONS, FULL_MODEL
from benchmarks.thermostat_ablation import mean_se
from benchmarks.world_model_disk import GEODESIC_LR, build, make_data, open_loop_error, train

torch.set_num_threads(1)

NOT_HERE = {  # ablations that change nothing in this benchmark's rollouts, and why
    "memory-off": "open-loop rollouts here carry no episode memory",
    "routing-dense": "this benchmark's model reads the fixed prototype table already",
    "screening-off": "screening acts on texture entries (the history window), which these "
    "rollouts do not pass; macro entries are exempt",
}


def rows_of(names: list[str] | None) -> dict[str, dict | None]:
    """{row name: [dynamics] overrides} of the full model (None) and the chosen ablations."""
    chosen = [n for n in (names or ABLATIONS) if n not in NOT_HERE]
    unknown = [n for n in chosen if n not in ABLATIONS]
    if unknown:
        raise SystemExit(f"unknown ablation(s) {unknown}; known: {', '.join(ABLATIONS)}")
    return {FULL_MODEL: None, **{ABLATIONS[n].row: ABLATIONS[n].dynamics for n in chosen}}


def run_row(seed: int, dynamics: dict | None, args) -> dict[str, float]:
    data = make_data("default", 256, 120, seed, noise=True)
    torch.manual_seed(seed)
    model = build("geodesic", dynamics=dynamics)
    model.train()
    update = train(model, data, args.horizon, args.updates, args.batch, seed, GEODESIC_LR)
    err = open_loop_error(model, "default", seed, 50, data)
    return {"mean": err["mean"], "final": err["final"], "update_ms": 1e3 * update}


def print_rows(
    results: dict[str, dict[int, dict]], seeds, cells: tuple[str, ...], paired: tuple[str, ...]
) -> None:
    """One markdown row per row of `results` ({row: {seed: result}}): each key of `cells` as
    mean ± s.e. over `seeds`, each key of `paired` as the mean ± s.e. of row − full model seed
    by seed (— for the full model itself, or without it), then the update time."""
    full = results.get(FULL_MODEL)
    for row, r in results.items():
        values = [mean_se([r[s][k] for s in seeds]) for k in cells]
        if row == FULL_MODEL or full is None:
            values += ["—"] * len(paired)
        else:
            values += [mean_se([r[s][k] - full[s][k] for s in seeds]) for k in paired]
        values.append(mean_se([r[s]["update_ms"] for s in seeds]))
        print(f"| {row} | " + " | ".join(values) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ablations", nargs="*", default=None, help="default: all that apply")
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run from this one on")
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--horizon", type=int, default=20, help="training rollout horizon")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default="runs/ablation_disk", help="per-(seed, row) results")
    args = parser.parse_args()
    rows = rows_of(args.ablations)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, dict]] = {row: {} for row in rows}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for row, dynamics in rows.items():
            path = out / f"{row}__seed{seed}.json"
            if not path.exists():
                result = run_row(seed, dynamics, args)
                path.write_text(json.dumps(result))
                print(f"seed {seed} {row}: open-loop {result['mean']:.4f}", flush=True)
            results[row][seed] = json.loads(path.read_text())
    seeds = sorted(results[FULL_MODEL])
    print(
        f"\nPoincareDisk-v0 (default preset), geodesic world model, seeds {seeds}, "
        f"{args.updates} updates at horizon {args.horizon}: noise-free open-loop error "
        "(normalised RMS), mean ± s.e. over seeds; paired: row − full model (> 0 worse)\n"
    )
    print("| row | open-loop 1-50 | at 50 | paired 1-50 | paired at 50 | update ms |")
    print("|---|---:|---:|---:|---:|---:|")
    print_rows(results, seeds, ("mean", "final"), ("mean", "final"))
    for name, why in NOT_HERE.items():
        print(f"(left out: {name}: {why})")


if __name__ == "__main__":
    main()
