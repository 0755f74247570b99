"""Node 67 against cost for every Wilson-line mode and segment count, on one trained run.

    python -m benchmarks.wilson_lines runs/Pendulum-v1__geodesic__1__1760000000
    python -m benchmarks.wilson_lines RUN_DIR --modes exp:1 magnus4:2 magnus4:4 --rounds 7

The run's agent is loaded once; for each mode the heads' `wilson` and `segments` are switched in
place (the connection and every other parameter stay the trained ones), and seed 003's nodes 67-70
are computed on the same replay-buffer states (agent.inspection.inspection, as `agent.diagnose`
does), node 67 with its random gauge fields as they are. Then, on copies of the agent, each mode's
training update and planning call are timed, the modes taking turns round after round (these
machines are noisy); the table reports the median over rounds and the ratio to the first mode. One
torch thread, as in training.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch

from agent.inspection.inspection import geometric_diagnostics, load_run
from agent.persistence.run_records import sample_batch
from benchmarks.agent_step_cost import plan_calls, time_calls
from world_model.attention.covariant import CovariantAttention

DEFAULT_MODES = (
    "exp:1",
    "first_order:1",
    "path_ordered:8",
    "path_ordered:16",
    "magnus4:2",
    "magnus4:4",
    "magnus4:8",
    "magnus4:12",
    "magnus4:16",
)


def set_wilson(agent, mode: str, segments: int) -> None:
    """Switch every covariant head of the agent's world model to (mode, segments)."""
    heads = [m for m in agent.model.modules() if isinstance(m, CovariantAttention)]
    if not heads:
        raise SystemExit("wilson_lines.py: the run's world model has no covariant heads")
    for head in heads:
        head.config.options.wilson = mode
        head.config.options.segments = segments


def parse_mode(text: str) -> tuple[str, int]:
    mode, _, segments = text.partition(":")
    return mode, int(segments or 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.wilson_lines", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run", metavar="RUN_DIR")
    parser.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), metavar="MODE:S")
    parser.add_argument("--states", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=5, help="updates timed per round")
    parser.add_argument("--plans", type=int, default=5, help="plans timed per round")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    modes = [parse_mode(m) for m in args.modes]
    agent, _ = load_run(args.run, device="cpu")
    batch = sample_batch(agent, args.states)
    nodes = {}
    for mode, segments in modes:
        set_wilson(agent, mode, segments)
        report = geometric_diagnostics(agent, batch, args.states)
        nodes[mode, segments] = {n["node"]: n for n in report["nodes"]}
    agents = {}
    for mode, segments in modes:
        clone = copy.deepcopy(agent)
        set_wilson(clone, mode, segments)
        clone.update()  # warm-up
        agents[mode, segments] = clone
    observations = [agent.env.observation_space.sample() for _ in range(args.plans)]
    times = {key: {"update": [], "plan": []} for key in agents}
    for _ in range(args.rounds):
        for key, clone in agents.items():
            times[key]["update"].append(time_calls(clone.update, args.updates, args.clock))
            clone.planner.reset()
            plans = plan_calls(clone, observations)
            times[key]["plan"].append(time_calls(plans, args.plans, args.clock))
    ref = modes[0]
    med = {k: {n: statistics.median(v) for n, v in t.items()} for k, t in times.items()}
    print(
        f"\n{args.run}: {len(batch.obs[0]) if batch is not None else 0} states; "
        f"{args.rounds} rounds x ({args.updates} updates, {args.plans} plans), 1 thread, "
        f"{args.clock} ms\n"
    )
    print(
        "| wilson | segments | node 67 | relative | 68 | 69 | 70 | update ms | plan ms | "
        f"update / {ref[0]}:{ref[1]} | plan / {ref[0]}:{ref[1]} |"
    )
    print("|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|")
    for key in agents:
        n = nodes[key]
        ok = {i: ("ok" if n[i]["passed"] else "WARN") if i in n else "-" for i in (68, 69, 70)}
        print(
            f"| {key[0]} | {key[1]} | {n[67]['value']:.2e} | "
            f"{n[67]['extra']['relative']:.2e} | {ok[68]} | {ok[69]} | {ok[70]} | "
            f"{med[key]['update']:.1f} | {med[key]['plan']:.1f} | "
            f"{med[key]['update'] / med[ref]['update']:.2f}x | "
            f"{med[key]['plan'] / med[ref]['plan']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
