"""Does the HIDA episodic memory make the world model better where experience matters?

PoincareDiskRandom-v0 (envs/poincare_disk_random.py) redraws its four wells at every reset, so an
episode's forces can be known only from what that episode has shown. Geodesic world models
(world_model_disk.py's: identity encoder, so the latent is the observed (z, p), the exact geodesic
drift, learned wells) are trained identically on the same noisy episodes, each with its own
landscape: with the fixed prototype table ("none"), with the DMG-grown, GSR-routed pool ("routed",
world_model/memory/routed_prototypes.py), with the episodic memory ("dense": the episode's
empirical residual forces as a potential, world_model/memory/episodic.py), with both
("routed-dense", the agent's default) and with both and the Boris kick's learned curl
("routed-dense-curl", world_model/geodesic/curl.py). Beside them: a warm GRU ("gru", warm_gru.py)
whose filter has read the same 100 transitions; as a floor, predicting no motion; as the ceiling,
the models' integrator (one BAOAB step per env step) given the episode's true potential, friction
and control force (the env itself takes 10 sub-steps per step). Scored, on held-out episodes with
their own landscapes: the noise-free 50-step open-loop error from the state after 100 steps of the
episode, the memory holding those 100 noisy transitions (what an agent would have seen). Normalised
RMS over the 4 observation coordinates, mean over steps 1..50 and at step 50, per seed and mean ±
standard error over seeds. Also, for each geodesic model, the energy drift of its frictionless,
action-free, noise-free rollout over 200 and 1000 steps (max |H_t - H_0| / mean |H_0|,
GeodesicCrossAttention.hamiltonian, the memory's potential included).

`--env fixed` runs the same on PoincareDisk-v0's one landscape (every episode the same wells).

    python -m benchmarks.memory_disk                 # 3 seeds (~35 min on 2 cores)
    python -m benchmarks.memory_disk --seeds 1 --updates 100 --models none dense   # a smoke run

`--out FILE` keeps each finished (seed, model) result in a JSON file and skips it when rerun with
the same settings, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

import geoopt
import numpy as np
import torch

from benchmarks.warm_gru import WarmGRU, train_warm_gru, warm_gru_open_loop
from benchmarks.world_model_disk import smooth_actions  # the same actions
from envs.poincare_disk import make_config, sample_start, simulate
from envs.poincare_disk_random import draw_landscape
from world_model.geodesic import (
    ContextConfig,
    GeodesicConfig,
    GeodesicDynamics,
    GeodesicHeadOptions,
    IntegratorConfig,
)
from world_model.memory.episodic import MemoryInputs
from world_model.memory.routing import clear_optimizer_rows
from world_model.model import EpisodeInputs, WorldModel, WorldModelConfig

WARM = 100  # steps of the episode before the open-loop test (the memory holds them)
TEST = 50  # open-loop steps scored
DRIFT = (200, 1000)  # steps of the energy-drift rollout: its drift after each
GEODESIC = ("none", "routed", "dense", "routed-dense", "routed-dense-curl")
GRU_LRS = (3e-3, 1e-2)


def episodes(n: int, seed: int, redraw: bool = True) -> tuple[torch.Tensor, torch.Tensor, list]:
    """n noisy episodes of WARM + TEST steps, each on its own landscape (redraw) or all on
    PoincareDisk-v0's: obs [n, L + 1, 4], actions [n, L, 2] (float32) and the configs."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    base = make_config("default")
    obs, acts, configs = [], [], []
    for _ in range(n):
        cfg = dataclasses.replace(base, **draw_landscape(rng, base.dim)) if redraw else base
        z0, p0 = sample_start(1, cfg, gen)
        a = smooth_actions(1, WARM + TEST, base.dim, gen)
        z, p = simulate(z0, p0, a, cfg, noise=True, generator=gen)
        obs.append(torch.cat([z, p], -1)[0].float())
        acts.append(a[0].float())
        configs.append(cfg)
    return torch.stack(obs), torch.stack(acts), configs


def build(name: str, capacity: int = WARM) -> WorldModel:
    """A geodesic model: `name` in GEODESIC (none: the fixed table; routed: the DMG pool; dense:
    the episodic memory over the fixed table; routed-dense: the memory over the DMG pool, the
    agent's default; routed-dense-curl: the default with the Boris kick's learned curl)."""
    dt = make_config("default").dt
    memory = "dense" if "dense" in name else "none"
    routing = "gsr" if "routed" in name else "dense"
    dyn = GeodesicDynamics(
        4,
        2,
        GeodesicConfig(
            latent_dim=2,
            encoder="identity",
            head=GeodesicHeadOptions(d_k=8, kernel="softmax"),
            integrator=IntegratorConfig(
                dt=dt, drift_correction=False, potential_wells=32, curl=name.endswith("-curl")
            ),
            context=ContextConfig(
                prototypes=64,
                feature_dim=16,
                memory=memory,
                memory_capacity=capacity,
                routing=routing,
                spawn_window=1024,  # 32 updates of 32
                prune_idle=100,
            ),
        ),
    )
    return WorldModel(4, 2, dyn, WorldModelConfig(hidden_dim=64, hidden_layers=1))


def memory_inputs(obs: torch.Tensor, acts: torch.Tensor, rows, starts, capacity: int):
    """Each sample's memory: the `capacity` transitions of its episode before its start."""
    b = len(rows)
    k = starts[:, None] - capacity + torch.arange(capacity)  # [B, C] time of each entry
    valid = k >= 0
    k = k.clamp_min(0)
    r = rows[:, None].expand(-1, capacity)
    return MemoryInputs(
        obs=obs[r, k].flatten(0, 1),
        action=acts[r, k].flatten(0, 1),
        next_obs=obs[r, k + 1].flatten(0, 1),
        index=torch.arange(b * capacity).view(b, capacity).T.contiguous(),
        mask=valid.T.contiguous(),
    )


def train(model, obs, acts, std, updates, batch, horizon, seed, lr=1e-2) -> float:
    """world_model_disk.py's losses (latent consistency x 20 + decoded error over the horizon),
    the memory built for every sampled start. Returns the median seconds per update."""
    torch.manual_seed(seed)
    params = [p for g in model.model_parameter_groups().values() for p in g]
    opt = geoopt.optim.RiemannianAdam(params, lr=lr)
    capacity = model.memory_capacity
    n, length = acts.shape[:2]
    times = []
    for step in range(updates):
        rows = torch.randint(0, n, (batch,))
        starts = torch.randint(0, length - horizon + 1, (batch,))
        idx = starts[:, None] + torch.arange(horizon + 1)
        o, a = obs[rows[:, None], idx], acts[rows[:, None], idx[:, :-1]]
        begin = time.perf_counter()
        memory = memory_inputs(obs, acts, rows, starts, capacity) if capacity else None
        with torch.no_grad():
            targets = model.encode(o[:, 1:].flatten(0, 1), target=True).unflatten((batch, horizon))
        root = state = model.encode(o[:, 0])
        ctx = model.context(state, EpisodeInputs(memory=memory))
        decode, consistency, first = 0.0, 0.0, None
        for t in range(horizon):
            state = model.next(state, a[:, t], ctx, stochastic=True)
            target = targets.map(lambda x, t=t: x[:, t])
            errors = model.consistency_loss(state, target)  # [B]
            first = errors.detach() if first is None else first
            consistency = consistency + errors.mean()
            decode = decode + ((model.decode(state) - o[:, t + 1]) / std).square().mean()
        loss = (20.0 * consistency + decode) / horizon
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 10.0)
        opt.step()
        for param, written in model.dynamics.genesis(root.detach(), first):  # the agent's DMG step
            clear_optimizer_rows(opt, param, written)
        model.update_targets(q_tau=0.01, encoder_tau=0.01)
        times.append(time.perf_counter() - begin)
        for g in opt.param_groups:  # cosine decay
            g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * (step + 1) / updates))
    return float(np.median(times))


def truth(obs, acts, configs, substeps: int | None = None) -> torch.Tensor:
    """The noise-free continuation from the state at WARM under the same actions [n, T + 1, 4]
    (with `substeps` BAOAB sub-steps per step instead of the env's: the ceiling)."""
    out = []
    for i, cfg in enumerate(configs):
        if substeps is not None:
            cfg = dataclasses.replace(cfg, substeps=substeps)
        s = obs[i, WARM].double()
        z, p = simulate(s[None, :2], s[None, 2:], acts[i : i + 1, WARM:].double(), cfg, noise=False)
        out.append(torch.cat([z, p], -1)[0].float())
    return torch.stack(out)


@torch.no_grad()
def energy_drift(model, obs, acts, true) -> dict[str, float]:
    """max_t |H_t - H_0| / mean_b |H_0| of a frictionless, action-free, noise-free rollout from
    the test states, each reading its episode's memory, after each of DRIFT's step counts:
    {"drift": after 200, "drift_1000": after 1000}."""
    integ = model.dynamics.integrator
    n = obs.shape[0]
    capacity = model.memory_capacity
    memory = None
    if capacity:
        memory = memory_inputs(obs, acts, torch.arange(n), torch.full((n,), WARM), capacity)
    state = model.encode(true[:, 0])
    ctx = model.context(state, EpisodeInputs(memory=memory))
    saved = integ.friction_raw.detach().clone()
    integ.friction_raw.fill_(-1.0)  # relu: friction 0
    ctx.ou = integ.ou_coefficients()
    h0 = integ.hamiltonian(state.z, state.p, ctx)
    worst = torch.zeros_like(h0)
    zero = torch.zeros(n, acts.shape[-1])
    out = {}
    for step in range(1, DRIFT[-1] + 1):
        state = model.next(state, zero, ctx, stochastic=False)
        worst = torch.maximum(worst, (integ.hamiltonian(state.z, state.p, ctx) - h0).abs())
        if step in DRIFT:
            key = "drift" if step == DRIFT[0] else f"drift_{step}"
            out[key] = float(worst.max() / h0.abs().mean())
    integ.friction_raw.copy_(saved)
    return out


@torch.no_grad()
def open_loop(model, obs, acts, true, std) -> dict[str, float]:
    model.eval()
    n = obs.shape[0]
    capacity = model.memory_capacity
    memory = None
    if capacity:
        memory = memory_inputs(obs, acts, torch.arange(n), torch.full((n,), WARM), capacity)
    state = model.encode(true[:, 0])
    ctx = model.context(state, EpisodeInputs(memory=memory))
    pred = [model.decode(state)]
    for t in range(TEST):
        state = model.next(state, acts[:, WARM + t], ctx, stochastic=False)
        pred.append(model.decode(state))
    return _score(torch.stack(pred, 1), true, std)


def _score(pred, true, std) -> dict[str, float]:
    err = ((pred - true) / std).square().mean(-1).sqrt()  # [n, T + 1]
    return {"mean": float(err[:, 1:].mean()), "final": float(err[:, -1].mean())}


def run_gru(obs, acts, std, val, test, args, seed) -> dict[str, float]:
    """The warm GRU with the better of GRU_LRS on validation episodes, scored on the test ones."""
    best = None
    for lr in GRU_LRS:
        torch.manual_seed(seed)
        model = WarmGRU(4, 2, args.gru_width, std)
        sec = train_warm_gru(
            model, obs, acts, args.updates, args.batch, args.horizon, WARM, seed, lr
        )
        v_obs, v_acts, v_true = val
        score = _score(warm_gru_open_loop(model, v_obs, v_acts, v_true, WARM, WARM), v_true, std)
        if best is None or score["mean"] < best[0]:
            best = (score["mean"], model, sec, lr)
    _, model, sec, lr = best
    t_obs, t_acts, t_true = test
    score = _score(warm_gru_open_loop(model, t_obs, t_acts, t_true, WARM, WARM), t_true, std)
    score.update(update_ms=1e3 * sec, lr=lr, params=sum(p.numel() for p in model.parameters()))
    return score


def gru_score(obs, acts, std, t_obs, t_acts, true, args, seed, redraw) -> dict[str, float]:
    v_obs, v_acts, v_cfgs = episodes(args.test_episodes, 20_000 + seed, redraw)
    val = (v_obs, v_acts, truth(v_obs, v_acts, v_cfgs))
    return run_gru(obs, acts, std, val, (t_obs, t_acts, true), args, seed)


def geodesic_score(name, obs, acts, std, t_obs, t_acts, true, args, seed) -> dict[str, float]:
    """Train the geodesic model `name` and score it (open loop, drift, cost, gate, pool)."""
    torch.manual_seed(seed)
    model = build(name)
    sec = train(model, obs, acts, std, args.updates, args.batch, args.horizon, seed)
    score = open_loop(model, t_obs, t_acts, true, std)
    score.update(energy_drift(model, t_obs, t_acts, true))
    gate = model.dynamics.integrator.memory
    score["update_ms"] = 1e3 * sec
    score["gate"] = float(gate.gate.detach()) if gate is not None else float("nan")
    score["params"] = sum(p.numel() for p in model.dynamics.parameters())
    pool = getattr(model.dynamics.prototypes, "pool", None)
    if pool is not None:
        score["active"] = pool.active_count()
        score["spawns"] = int(model.dynamics.prototypes.dmg.spawns)
    return score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--models", nargs="+", default=["none", "routed", "dense", "routed-dense", "gru"],
        choices=[*GEODESIC, "gru"],
    )  # fmt: skip
    parser.add_argument("--env", choices=["random", "fixed"], default="random")
    parser.add_argument("--episodes", type=int, default=64, help="training episodes")
    parser.add_argument("--test-episodes", type=int, default=64)
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=16, help="training rollout horizon")
    parser.add_argument("--gru-width", type=int, default=64)
    parser.add_argument("--out", type=Path, help="JSON file of finished results (resumable)")
    args = parser.parse_args(argv)
    done = json.loads(args.out.read_text()) if args.out and args.out.exists() else {}
    settings = f"{args.env} e{args.episodes} t{args.test_episodes} u{args.updates} "
    settings += f"b{args.batch} h{args.horizon} w{args.gru_width} potential-memory gsr-mass"

    def cached(seed, name, compute, *inputs):
        key = f"{settings} seed {seed} {name}"
        if key not in done:
            done[key] = compute(*inputs)
            if args.out:
                args.out.write_text(json.dumps(done, indent=1))
        print(f"seed {seed} {name}: {done[key]}", flush=True)
        return done[key]

    torch.set_num_threads(1)
    redraw = args.env == "random"
    results: dict[str, list[dict]] = {}
    for seed in args.seeds:
        obs, acts, _ = episodes(args.episodes, seed, redraw)
        t_obs, t_acts, t_cfgs = episodes(args.test_episodes, 10_000 + seed, redraw)
        std = obs.flatten(0, 1).std(0).clamp_min(1e-3)
        true = truth(t_obs, t_acts, t_cfgs)
        still = true[:, :1].expand_as(true)
        results.setdefault("no motion (floor)", []).append(_score(still, true, std))
        ceiling = _score(truth(t_obs, t_acts, t_cfgs, substeps=1), true, std)
        results.setdefault("true potential, 1 step (ceiling)", []).append(ceiling)
        data = (obs, acts, std, t_obs, t_acts, true, args, seed)
        for name in args.models:
            if name == "gru":
                score = cached(seed, name, gru_score, *data, redraw)
                results.setdefault("warm GRU", []).append(score)
            else:
                score = cached(seed, name, geodesic_score, name, *data)
                results.setdefault(f"geodesic, memory {name}", []).append(score)
    land = "PoincareDiskRandom-v0" if redraw else "PoincareDisk-v0"
    print(
        f"\n{land}, seeds {args.seeds}: noise-free {TEST}-step open-loop error after {WARM} "
        "steps (normalised RMS; mean ± s.e. over seeds); energy drift over "
        f"{DRIFT[0]} and {DRIFT[1]} frictionless steps (the worst seed)\n"
    )
    print(
        f"| model | mean error 1..50 | error at 50 | per seed (mean) | drift {DRIFT[0]} "
        f"| drift {DRIFT[1]} | gate | update ms |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for name, rows in results.items():
        cells = []
        for key in ("mean", "final"):
            vals = [r[key] for r in rows]
            se = statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) > 1 else float("nan")
            cells.append(f"{statistics.mean(vals):.4f} ± {se:.4f}")
        per = ", ".join(f"{r['mean']:.4f}" for r in rows)
        drifts = [
            f"{max(r[key] for r in rows):.1e}" if key in rows[0] else ""
            for key in ("drift", f"drift_{DRIFT[1]}")
        ]
        gate = f"{statistics.mean(r['gate'] for r in rows):.2f}" if "gate" in rows[0] else ""
        ms = (
            f"{statistics.mean(r['update_ms'] for r in rows):.0f}" if "update_ms" in rows[0] else ""
        )
        row = [name, *cells, per, *drifts, gate, ms]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
