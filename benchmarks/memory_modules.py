"""The GeoResolver memory modules of seed 000 §6-§11, measured (world_model/memory/): tables for
HCC, DMG, GSR, HyperGate and associative recall with the unified block.

    python -m benchmarks.memory_modules                   # everything (~5-8 min on 2 shared cores)
    python -m benchmarks.memory_modules --section dmg     # hcc | dmg | gsr | gate | recall | all
    python -m benchmarks.memory_modules --quick           # smaller sizes (~1 min)

What each table is:
- hcc: keys in the ball (uniform directions, radius uniform in [0, 0.95]); bytes and ratio
  against float32, squared reconstruction error against Thm 6.1's 4 (2^-b + 2^-b_r) (fraction of
  keys above it) and the true bound's largest err / bound; retrieval = argmax of Dense-HIDA
  weights is the key's own index, for queries equal to the keys and moved by a geodesic step of
  length 0.05, on uncompressed and on compressed keys (eps = 1e-4).
- dmg: the number of spawns of the surprise rule (world_model/memory/dmg.py ``surprise_scan``)
  on i.i.d. N(0, 1) losses for T = 10^2 ... 10^6 (prefixes of one stream; the rule is causal,
  so a prefix is a run of length T), capacity, pruning and cooldown off, three parameter sets
  fixed before the run; then a stream with change points (surprise bumps 4 e^-(t-c)/50).
- gsr: time per query of the routing step (scoring the pool and taking the top K) and of the
  post-routing step (weights and combining the K values), separately, against the pool size.
- gate: Thm 7.1's bound against sigma_min of autograd Jacobians of the dimension gate, at
  nn.Linear's initialisation and at the trained recall block's gate inputs.
- recall: n key-value pairs (keys N(0, I/d), values N(0, I/dv), d = dv = 16) as the context;
  queries = stored keys + N(0, s^2 I/d) noise at s = 0.1, 0.3, 0.5; an answer is correct when
  the stored value nearest the output is the queried key's. Both models train the same number of
  steps on the same batches (n in {64, 256}, noise level drawn per batch); the softmax baseline
  (dot-product attention with a learned temperature per head) is widened to at least the
  unified block's parameter count. The nearest-neighbour ceiling (nearest stored key to the
  query) is printed beside both.

Time: least wall time of repeated calls, one intra-op thread, torch.no_grad; only ratios within
a run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import geoopt
import torch
from torch import nn
from torch.func import jacrev, vmap

from geometry import poincare, quantize
from world_model.attention.ida import inverse_distance_attention
from world_model.memory.dmg import DMGConfig, surprise_scan
from world_model.memory.gsr import combine_step, local_step, merge_step, selected_weights
from world_model.memory.hcc import compress, suggested_range
from world_model.memory.hypergate import gate_jacobian_bounds
from world_model.memory.routing import PoolConfig
from world_model.memory.unified import UnifiedBlock, UnifiedConfig


def timeit(fn, reps: int = 5) -> float:
    fn()
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def table(title: str, header: list[str], rows: list[list]) -> None:
    fmt = lambda c: c if isinstance(c, str) else (f"{c:.4g}" if isinstance(c, float) else str(c))  # noqa: E731
    cells = [header] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    print(f"\n{title}\n{line(cells[0])}\n|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print(line(r))
    sys.stdout.flush()


# --------------------------------------------------------------------------- HCC


def ball_keys(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    u = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)
    return 0.95 * torch.rand(n, 1, generator=g) * u


def retrieval(queries, keys) -> float:
    eye = torch.eye(keys.shape[0])
    _, w = inverse_distance_attention(queries, keys, eye, 1e-4, "poincare")
    return (w.argmax(-1) == torch.arange(keys.shape[0])).float().mean().item()


def section_hcc(args) -> None:
    g = torch.Generator().manual_seed(args.seed)
    rows = []
    seed_bound = quantize.seed_reconstruction_bound(4, 6)
    for d in (8, 32, 128, 256):
        keys = ball_keys(args.hcc_n, d, g)
        step = torch.randn(keys.shape, generator=g)
        step = args.hcc_noise * step / step.norm(dim=-1, keepdim=True)  # geodesic length
        noisy = poincare.expmap(keys, step / poincare.conformal_factor(keys))
        axis = torch.zeros(1, d)
        axis[0, 0] = 0.99
        base_exact, base_noisy = retrieval(keys, keys), retrieval(noisy, keys)
        configs = [("seed", 1.0), ("zero", 1.0)]
        configs += [("seed", suggested_range(d))] if suggested_range(d) < 1 else []
        for grid, a in configs:
            packed = compress(keys, 4, 6, grid=grid, direction_range=a)
            rec = packed.decompress()
            sq = ((rec - keys) ** 2).sum(-1)
            bound = quantize.reconstruction_bound(keys.double(), 4, 6, grid, a)
            axis_sq = (
                (compress(axis, 4, 6, grid=grid, direction_range=a).decompress() - axis) ** 2
            ).sum()
            rows.append(
                [
                    d,
                    grid,
                    round(a, 3),
                    packed.nbytes,
                    packed.compression_ratio(),
                    sq.mean().item(),
                    sq.max().item(),
                    (sq > seed_bound).float().mean().item(),
                    axis_sq.item(),
                    (sq.sqrt().double() / bound).max().item(),
                    base_exact,
                    retrieval(keys, rec),
                    base_noisy,
                    retrieval(noisy, rec),
                ]
            )
    table(
        f"HCC, b = 4, b_r = 6, n = {args.hcc_n} keys (Thm 6.1 bound on |k - k^|^2: {seed_bound}; "
        f"Thm 6.2's ratio at d = 32: 7.88x); noisy queries: geodesic step {args.hcc_noise}",
        [
            "d",
            "grid",
            "range a",
            "bytes",
            "ratio",
            "mean sq err",
            "max sq err",
            "frac > Thm 6.1",
            "sq err of 0.99 e_1",
            "max err/true bound",
            "acc exact",
            "acc exact HCC",
            "acc noisy",
            "acc noisy HCC",
        ],
        rows,
    )


# --------------------------------------------------------------------------- DMG

DMG_SETTINGS = {
    "A: window mean, kappa 0.25": DMGConfig(window=32, tau_base=0.05, kappa=0.25, gamma=0.5),
    "B: per sample, kappa 1": DMGConfig(
        window=32, tau_base=0.05, kappa=1.0, gamma=0.5, trigger="sample"
    ),
    "C: window mean, kappa 1": DMGConfig(window=32, tau_base=0.05, kappa=1.0, gamma=0.5),
}


def section_dmg(args) -> None:
    g = torch.Generator().manual_seed(args.seed)
    t_max = 10**args.dmg_max_exp
    losses = torch.randn(t_max, generator=g, dtype=torch.float64)
    ts = [10**e for e in range(2, args.dmg_max_exp + 1)]
    rows, timing = {t: [t, round(math.log(t), 2)] for t in ts}, []
    for name, cfg in DMG_SETTINGS.items():
        start = time.perf_counter()
        spawn = surprise_scan(losses, cfg).spawn
        timing.append(f"{name[:1]} {time.perf_counter() - start:.2f} s")
        cum = torch.cumsum(spawn.long(), 0)
        for t in ts:
            rows[t] += [int(cum[t - 1]), int(cum[t - 1]) / t]
    header = ["T", "log T"]
    slopes = []
    for j, name in enumerate(DMG_SETTINGS):
        header += [f"{name[:1]} spawns", f"{name[:1]} /T"]
        pts = [
            (math.log(t), math.log(rows[t][2 + 2 * j]))
            for t in ts
            if t >= 1000 and rows[t][2 + 2 * j]
        ]
        if len(pts) >= 2:
            mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
            b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
            slopes.append(f"{name[:1]} {b:.2f}")
    table(
        "DMG spawns on a stationary N(0, 1) loss stream (W = 32, tau_base = 0.05, gamma = 0.5; "
        + "; ".join(DMG_SETTINGS)
        + f"; scans of 10^{args.dmg_max_exp}: "
        + ", ".join(timing)
        + ")",
        header,
        [rows[t] for t in ts],
    )
    print(
        "log-log slope of spawns against T (T >= 1000; 1 = linear, 0 = log-like): "
        + ", ".join(slopes)
    )
    # change points: every L steps a surprise bump 4 exp(-(t - c)/50) on the same noise
    t_cp, every = 10**args.dmg_max_exp // 10, 10**args.dmg_max_exp // 100
    t_cp, every = max(t_cp, 2000), max(every, 200)
    t = torch.arange(t_cp, dtype=torch.float64)
    since = t % every
    stream = losses[:t_cp] + 4.0 * torch.exp(-since / 50.0) * (t >= every)
    changes = list(range(every, t_cp, every))
    rows = []
    for name, cfg in DMG_SETTINGS.items():
        for cooldown in (0, cfg.window):
            spawn = surprise_scan(
                stream, cfg.__class__(**{**vars(cfg), "cooldown": cooldown})
            ).spawn
            times = torch.nonzero(spawn).flatten()
            near = [times[(times >= c) & (times < c + 200)] for c in changes]
            delays = [int(x[0]) - c for x, c in zip(near, changes, strict=True) if x.numel()]
            inside = sum(x.numel() for x in near)
            rows.append(
                [
                    name,
                    cooldown,
                    f"{sum(x.numel() > 0 for x in near)}/{len(changes)}",
                    inside / len(changes),
                    sorted(delays)[len(delays) // 2] if delays else "-",
                    int(times.numel()) - inside,
                ]
            )
    table(
        f"DMG on a stream with {len(changes)} change points (every {every} steps, T = {t_cp})",
        [
            "setting",
            "cooldown",
            "change points with a spawn <= 200 steps after",
            "spawns per change point",
            "median delay",
            "spawns elsewhere",
        ],
        rows,
    )


# --------------------------------------------------------------------------- GSR


def section_gsr(args) -> None:
    g = torch.Generator().manual_seed(args.seed)
    m, dv, k, nq = 16, 64, 8, 256
    queries = torch.nn.functional.normalize(torch.randn(nq, m, generator=g), dim=-1)
    rows = []
    sizes = [s for s in (1_000, 3_000, 10_000, 30_000, 100_000) if s <= args.gsr_max_pool]
    for pool in sizes:
        protos = torch.nn.functional.normalize(torch.randn(pool, m, generator=g), dim=-1)
        values = torch.randn(pool, dv, generator=g)
        active = torch.ones(pool, dtype=torch.bool)

        def route(protos=protos, active=active):
            return merge_step([local_step(queries, protos, active, k, 1e-2)], k)

        merged = route()

        def post(merged=merged, values=values):
            return combine_step(selected_weights(merged, True), merged.indices, values)

        with torch.no_grad():
            t_route, t_post = timeit(route), timeit(post, reps=20)
        rows.append([pool, 1e6 * t_route / nq, 1e6 * t_post / nq])
    table(
        f"GSR, K = {k}, {nq} queries, sphere dim {m}, values {dv}: microseconds per query",
        ["pool size", "routing (score + top-K)", "post-routing (weights + combine K values)"],
        rows,
    )


# --------------------------------------------------------------------------- HyperGate


def gate_rows(label: str, u: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> list:
    u, w, b = u.double(), w.double(), b.double()
    gate = lambda x: torch.sigmoid(x @ w.T + b) * x  # noqa: E731
    smin = torch.linalg.svdvals(vmap(jacrev(gate))(u))[:, -1]
    sharp, seed_form = gate_jacobian_bounds(u, w, b)
    return [
        label,
        u.shape[0],
        smin.min().item(),
        smin.median().item(),
        seed_form.median().item(),
        sharp.median().item(),
        (seed_form <= 0).float().mean().item(),
        int((smin < sharp - 1e-12).sum()),
    ]


def section_gate(args, trained: list | None = None) -> None:
    torch.manual_seed(args.seed)
    d = 32
    lin = nn.Linear(d, d)
    rows = []
    for scale in (0.01, 0.1, 1.0):
        for bias in (0.0, 2.0):
            u = scale * torch.randn(256, d)
            rows.append(
                gate_rows(
                    f"init, u ~ N(0, {scale}^2), b_g {bias:+}",
                    u,
                    lin.weight.detach(),
                    torch.full((d,), bias) + lin.bias.detach(),
                )
            )
    for label, u, w, b in trained or []:
        rows.append(gate_rows(label, u, w, b))
    table(
        "HyperGate Thm 7.1: sigma_min(dh/du) (autograd) against min sigma(z) - |u|_inf |W_g|_2 / 4",
        [
            "inputs",
            "n",
            "min sigma_min",
            "median sigma_min",
            "median bound",
            "median sharp bound",
            "frac vacuous",
            "violations",
        ],
        rows,
    )


# --------------------------------------------------------------------------- associative recall


class SoftmaxAttention(nn.Module):
    """Dot-product softmax attention with a learned temperature per head, the same call shape."""

    def __init__(self, d: int, dv: int, heads: int, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_proj, self.k_proj = nn.Linear(d, heads * head_dim), nn.Linear(d, heads * head_dim)
        self.v_proj, self.o_proj = nn.Linear(dv, heads * head_dim), nn.Linear(heads * head_dim, dv)
        self.log_temp = nn.Parameter(torch.full((heads,), 0.5 * math.log(head_dim)))

    def forward(self, queries, keys, values, mask=None, *, need_weights=True):
        split = lambda x: x.unflatten(-1, (self.heads, self.head_dim)).transpose(-2, -3)  # noqa: E731
        q, k, v = split(self.q_proj(queries)), split(self.k_proj(keys)), split(self.v_proj(values))
        logits = q @ k.transpose(-1, -2) / self.log_temp.exp()[:, None, None]
        w = torch.softmax(logits, -1)
        out = self.o_proj((w @ v).transpose(-2, -3).flatten(-2))
        return out, (w.mean(-3) if need_weights else None)


def recall_batch(batch, n, nq, sigma, g, d=16, dv=16):
    keys = torch.randn(batch, n, d, generator=g) / math.sqrt(d)
    values = torch.randn(batch, n, dv, generator=g) / math.sqrt(dv)
    idx = torch.randint(0, n, (batch, nq), generator=g)
    q = torch.gather(keys, 1, idx.unsqueeze(-1).expand(-1, -1, d))
    q = q + sigma * torch.randn(batch, nq, d, generator=g) / math.sqrt(d)
    return q, keys, values, idx


def accuracy(out, values, idx) -> float:
    guess = torch.cdist(out, values).argmin(-1)
    return (guess == idx).float().mean().item()


def nearest_neighbour(q, keys, idx) -> float:
    return (torch.cdist(q, keys).argmin(-1) == idx).float().mean().item()


def section_recall(args) -> list:
    torch.manual_seed(args.seed)
    sigmas = (0.1, 0.3, 0.5)
    common = dict(
        query_dim=16,
        value_dim=16,
        out_dim=16,
        heads=2,
        head_dim=16,
        memory_dim=16,
        pool=PoolConfig(capacity=64, initial_active=64),
    )
    models = {
        "unified (seed kernel)": UnifiedBlock(UnifiedConfig(**common, learn_power=False)),
        "unified (learned power)": UnifiedBlock(UnifiedConfig(**common, learn_power=True)),
    }
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    width = 16
    while count(SoftmaxAttention(16, 16, 2, width)) < max(count(m) for m in models.values()):
        width += 1
    models["softmax (learned temperature)"] = SoftmaxAttention(16, 16, 2, width)
    opts = {k: geoopt.optim.RiemannianAdam(m.parameters(), lr=args.lr) for k, m in models.items()}
    g = torch.Generator().manual_seed(args.seed + 1)
    start = time.perf_counter()
    for step in range(args.recall_steps):
        n = (64, 256)[step % 2]
        q, keys, values, idx = recall_batch(8, n, 64, sigmas[step % 3], g)
        target = torch.gather(values, 1, idx.unsqueeze(-1).expand(-1, -1, 16))
        for name, model in models.items():
            out, _ = model(q, keys, values, need_weights=False)
            loss = ((out - target) ** 2).sum(-1).mean()
            opts[name].zero_grad()
            loss.backward()
            opts[name].step()
    train_s = time.perf_counter() - start
    rows = []
    g = torch.Generator().manual_seed(args.seed + 2)
    with torch.no_grad():
        for n in args.recall_n:
            for sigma in sigmas:
                q, keys, values, idx = recall_batch(args.recall_episodes, n, 64, sigma, g)
                accs = [
                    accuracy(m(q, keys, values, need_weights=False)[0], values, idx)
                    for m in models.values()
                ]
                rows.append(
                    [
                        n,
                        sigma,
                        *accs,
                        nearest_neighbour(q, keys, idx),
                        "yes" if accs[0] >= accs[2] else "no",
                        "yes" if accs[1] >= accs[2] else "no",
                    ]
                )
    names = list(models)
    counts = ", ".join(f"{k} {count(m)}" for k, m in models.items())
    power = ", ".join(f"{p:.2f}" for p in models[names[1]].log_power.exp().tolist())
    table(
        f"Associative recall: {args.recall_steps} training steps each ({train_s:.0f} s for all), "
        f"lr {args.lr}; parameters: {counts} (softmax head width {width}); learned powers p_h = "
        f"{power}; {args.recall_episodes * 64} test queries per cell",
        [
            "n",
            "noise",
            "unified, seed kernel",
            "unified, learned power",
            "softmax, learned temp",
            "NN ceiling",
            "seed kernel >= softmax",
            "learned power >= softmax",
        ],
        rows,
    )
    gates = []
    for name in names[:2]:
        block = models[name]
        captured = []
        hook = block.gate.gate.register_forward_hook(
            lambda mod, inp, out, store=captured: store.append(inp[0])
        )
        with torch.no_grad():
            q, keys, values, _ = recall_batch(4, 256, 64, 0.3, g)
            block(q, keys, values, need_weights=False)
        hook.remove()
        u = captured[0].reshape(-1, captured[0].shape[-1])[:256]
        gates.append(
            (f"trained {name}", u, block.gate.gate.weight.detach(), block.gate.gate.bias.detach())
        )
    return gates


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--section", default="all", choices=["hcc", "dmg", "gsr", "gate", "recall", "all"]
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes everywhere")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hcc-n", type=int, default=1024)
    p.add_argument("--hcc-noise", type=float, default=0.5, help="geodesic length of query noise")
    p.add_argument("--dmg-max-exp", type=int, default=6, help="largest T = 10^this")
    p.add_argument("--gsr-max-pool", type=int, default=100_000)
    p.add_argument("--recall-steps", type=int, default=600)
    p.add_argument("--recall-n", type=int, nargs="+", default=[64, 256, 1024, 4096])
    p.add_argument("--recall-episodes", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-2)
    args = p.parse_args(argv)
    if args.quick:
        args.hcc_n, args.dmg_max_exp, args.gsr_max_pool = 256, 5, 10_000
        args.recall_steps, args.recall_n, args.recall_episodes = 100, [64, 256, 1024], 2
    torch.set_num_threads(1)
    print(
        "python -m benchmarks.memory_modules",
        " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
    )
    sections = ["hcc", "dmg", "gsr", "recall", "gate"] if args.section == "all" else [args.section]
    trained = None
    for name in sections:
        start = time.perf_counter()
        if name == "recall":
            trained = section_recall(args)
        elif name == "gate":
            section_gate(args, trained)
        else:
            globals()[f"section_{name}"](args)
        print(f"({name}: {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
