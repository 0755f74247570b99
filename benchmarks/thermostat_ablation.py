"""Seed 003's thermostat ablation on PoincareDisk-v0: the exact OU thermostat against the learned
thermostat residual (docs/measurements.md, "Thermostat ablation").

The disk's latent state is the observed (z, p) (identity encoder, benchmarks/world_model_disk.py),
so the model's momenta are the environment's and its stationary distribution can be put beside
the Gibbs density the environment samples (envs/poincare_disk.py: exp(-H / T) with the metric
G(z) = lambda(z)^2 I). Two geodesic world models are trained identically on the same noisy
trajectories of the "default" preset (friction 0.5, T = 0.05), both with the environment's
temperature as their thermostat temperature (the known prior; their friction is learned):

- exact:   the O step is the exact OU update p <- c1 p + c2 lambda(z) xi;
- learned: the same plus the learned residual c2 lambda(z) h(z, p; noise bank), a covariant
           attention head reading fresh noise (IntegratorConfig.learned_thermostat).

Each is then rolled out stochastically with zero action from `--starts` starts for `--burn`
steps, after which every `--thin`-th state of the next `--steps` is kept, and the true system is
simulated the same way. Per model and seed:

- energy: the true energy H(z, p) of the kept states against the true system's (two-sample
  Kolmogorov-Smirnov distance and Wasserstein-1), and its mean;
- momentum in the orthonormal frame u = p / lambda(z): under Gibbs every component is N(0, T)
  whatever z (the metric is conformal), so its variance against T and its KS distance to N(0, T);
- node 68 (metric temperature consistency of the kick head) on data states;
- forecast: the noise-free open-loop error over 50 steps (world_model_disk.open_loop_error).

The true system's row is the same statistics of a second, independent true-system sample: the
floor that finite samples leave. Energy drift in deterministic conservative rollouts is not a
comparison here: the learned residual is scaled by c2 lambda(z), zero when the thermostat is.

    python -m benchmarks.thermostat_ablation                  # 3 seeds, ~1 h (resumable: --out)
    python -m benchmarks.thermostat_ablation --quick          # 1 seed, short training

Per-seed results are saved in --out as they finish; a rerun skips the seeds already there.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from benchmarks.world_model_disk import build, make_data, open_loop_error, train
from envs.poincare_disk import make_config, sample_start, simulate, true_energy
from geometry import poincare

torch.set_num_threads(1)

VARIANTS = {"exact": False, "learned": True}  # name -> IntegratorConfig.learned_thermostat
LR = 1e-2  # world_model_disk.GEODESIC_LR
METRICS = (
    ("energy_ks", "energy KS to the true system"),
    ("energy_w1", "energy W1 to the true system"),
    ("energy_mean", "mean energy"),
    ("frame_var", "var of p / lambda(z) (Gibbs: T)"),
    ("frame_ks", "KS of p / lambda(z) to N(0, T)"),
    ("node68", "node 68"),
    ("forecast", "open-loop error, 50 steps"),
)


def ks_two_sample(a: np.ndarray, b: np.ndarray) -> float:
    """sup_x |F_a(x) - F_b(x)| of two empirical distributions."""
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.abs(fa - fb).max())


def ks_normal(x: np.ndarray, var: float) -> float:
    """sup_x |F_x - Phi(x / sqrt(var))|, the one-sample KS distance to N(0, var)."""
    x = np.sort(x)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0 * var)))
    n = x.size
    upper = np.arange(1, n + 1) / n - cdf
    lower = cdf - np.arange(0, n) / n
    return float(max(upper.max(), lower.max()))


def wasserstein1(a: np.ndarray, b: np.ndarray, points: int = 2000) -> float:
    """W1 of two 1-d samples: the mean gap of their quantile functions on a uniform grid."""
    q = (np.arange(points) + 0.5) / points
    return float(np.abs(np.quantile(a, q) - np.quantile(b, q)).mean())


def true_samples(cfg, starts: int, burn: int, steps: int, thin: int, seed: int):
    """Kept (z, p) [M, d] float64 of the true system, zero action, from sample_start."""
    gen = torch.Generator().manual_seed(seed)
    z0, p0 = sample_start(starts, cfg, gen)
    actions = torch.zeros(starts, burn + steps, cfg.dim, dtype=torch.float64)
    z, p = simulate(z0, p0, actions, cfg, noise=True, generator=gen)
    keep = slice(burn + thin, burn + steps + 1, thin)
    return z[:, keep].reshape(-1, cfg.dim), p[:, keep].reshape(-1, cfg.dim)


@torch.no_grad()
def model_samples(model, cfg, starts: int, burn: int, steps: int, thin: int, seed: int):
    """Kept (z, p) [M, d] of a stochastic zero-action rollout of the model's latent state (the
    observed (z, p): identity encoder), and the fraction of states at the ball's edge."""
    gen = torch.Generator().manual_seed(seed)
    z0, p0 = sample_start(starts, cfg, gen)
    torch.manual_seed(seed)  # the thermostat's draws
    model.eval()
    state = model.encode(torch.cat([z0, p0], dim=-1).float())
    ctx = model.context(state)
    action = torch.zeros(starts, cfg.dim)
    zs, ps = [], []
    for t in range(1, burn + steps + 1):
        state = model.next(state, action, ctx, stochastic=True)
        if t > burn and (t - burn) % thin == 0:
            zs.append(state.z.double())
            ps.append(state.p.double())
    z, p = torch.cat(zs), torch.cat(ps)
    edge = float((z.norm(dim=-1) > 0.99).double().mean())
    return z, p, edge


def statistics_of(z, p, cfg, reference_energy: np.ndarray) -> dict[str, float]:
    finite = torch.isfinite(z).all(-1) & torch.isfinite(p).all(-1)
    z, p = z[finite], p[finite]
    energy = true_energy(z, p, cfg).numpy()
    frame = (p / poincare.conformal_factor(z)).numpy().ravel()  # components of p / lambda(z)
    return {
        "energy_ks": ks_two_sample(energy, reference_energy),
        "energy_w1": wasserstein1(energy, reference_energy),
        "energy_mean": float(energy.mean()),
        "frame_var": float(frame.var()),
        "frame_ks": ks_normal(frame, cfg.temperature),
        "nonfinite": float((~finite).double().mean()),
        "energy": energy,
        "frame": frame,
    }


def node68(model, data) -> float:
    """Node 68 of the kick head on 64 data states (world_model.geodesic.reports)."""
    batch = SimpleNamespace(obs=data.obs[:64, 0][None], history_obs=None, history_mask=None)
    with torch.no_grad():
        reports, _ = model.dynamics.node_reports(batch)
    return next(r.value for r in reports if r.node == 68)


def run_seed(seed: int, args) -> dict:
    cfg = make_config("default")
    data = make_data("default", 256, 120, seed, noise=True)
    sampling = (args.starts, args.burn, args.steps, args.thin)
    truth_z, truth_p = true_samples(cfg, *sampling, 30_000 + seed)
    reference = true_energy(truth_z, truth_p, cfg).numpy()
    floor_z, floor_p = true_samples(cfg, *sampling, 40_000 + seed)
    rows = {"true system": statistics_of(floor_z, floor_p, cfg, reference)}
    rows["true system"].update(node68=math.nan, forecast=math.nan, edge=0.0)
    for name, learned in VARIANTS.items():
        torch.manual_seed(seed)
        integrator = {"thermostat_temperature": cfg.temperature, "learned_thermostat": learned}
        model = build("geodesic", integrator=integrator)
        model.train()
        start = time.perf_counter()
        update = train(model, data, args.horizon, args.updates, args.batch, seed, LR)
        trained = time.perf_counter() - start
        z, p, edge = model_samples(model, cfg, *sampling, 50_000 + seed)
        row = statistics_of(z, p, cfg, reference)
        row.update(
            node68=node68(model, data),
            forecast=open_loop_error(model, "default", seed, 50, data)["mean"],
            edge=edge,
            friction=float(model.dynamics.integrator.friction.detach()),
            update_ms=1e3 * update,
            train_s=trained,
        )
        rows[name] = row
        print(
            f"seed {seed} {name}: energy KS {row['energy_ks']:.3f}, frame var "
            f"{row['frame_var']:.4f} (T = {cfg.temperature}), forecast {row['forecast']:.3f}, "
            f"friction {row['friction']:.3f} (true {cfg.friction}), {trained:.0f} s",
            flush=True,
        )
    return rows


def mean_se(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:.4g}"
    return f"{m:.4g} ± {statistics.stdev(values) / math.sqrt(len(values)):.2g}"


def print_table(results: dict[int, dict], temperature: float) -> None:
    seeds = sorted(results)
    names = ["true system", *VARIANTS]
    print(f"\nseeds {seeds}: mean ± s.e. over seeds; T = {temperature}\n")
    print("| metric | " + " | ".join(names) + " | learned − exact (paired) |")
    print("|---|" + "---:|" * (len(names) + 1))
    for key, label in METRICS:
        cells = [mean_se([results[s][n][key] for s in seeds]) for n in names]
        diff = [results[s]["learned"][key] - results[s]["exact"][key] for s in seeds]
        print(f"| {label} | " + " | ".join(cells) + f" | {mean_se(diff)} |")


def draw(rows: dict, temperature: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_e, ax_u) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    lo, hi = np.quantile(rows["true system"]["energy"], [0.001, 0.995])
    bins = np.linspace(lo, hi, 60)
    for name, style in (("true system", "k-"), ("exact", "C0-"), ("learned", "C3--")):
        h, edges = np.histogram(rows[name]["energy"], bins=bins, density=True)
        ax_e.plot(0.5 * (edges[1:] + edges[:-1]), h, style, label=name, lw=1.4)
        h, edges = np.histogram(rows[name]["frame"], bins=np.linspace(-1, 1, 61), density=True)
        ax_u.plot(0.5 * (edges[1:] + edges[:-1]), h, style, label=name, lw=1.4)
    u = np.linspace(-1, 1, 200)
    gibbs = np.exp(-(u**2) / (2 * temperature)) / math.sqrt(2 * math.pi * temperature)
    ax_u.plot(u, gibbs, ":", color="grey", label=f"Gibbs N(0, T={temperature})")
    ax_e.set(xlabel="true energy H(z, p)", ylabel="density", title="stationary energy")
    ax_u.set(xlabel="p / λ(z), one component", title="momentum in the orthonormal frame")
    ax_e.legend(fontsize=8)
    ax_u.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"figure: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=800)
    parser.add_argument(
        "--horizon", type=int, default=20, help="training rollout horizon (world_model_disk: 50)"
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--starts", type=int, default=256)
    parser.add_argument("--burn", type=int, default=300, help="steps before sampling")
    parser.add_argument("--steps", type=int, default=1000, help="steps sampled after burn-in")
    parser.add_argument("--thin", type=int, default=5, help="keep every thin-th state")
    parser.add_argument("--quick", action="store_true", help="1 seed, 300 updates, horizon 20")
    parser.add_argument("--out", default="runs/thermostat_ablation", help="per-seed results")
    parser.add_argument("--figure", default=None, help="PNG of the first seed's distributions")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.updates, args.horizon = 1, 300, 20
        args.out += "_quick"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for seed in range(args.seeds):
        path = out / f"seed{seed}.npz"
        if not path.exists():
            rows = run_seed(seed, args)
            arrays = {f"{n}/{k}": v for n, r in rows.items() for k, v in r.items()}
            np.savez_compressed(path, **arrays)  # written last: a killed seed reruns
        saved = np.load(path)
        results[seed] = {}
        for key in saved.files:
            name, field = key.split("/")
            value = saved[key]
            results[seed].setdefault(name, {})[field] = value if value.ndim else float(value)
    temperature = make_config("default").temperature
    print_table(results, temperature)
    for name in VARIANTS:
        rows = [results[s][name] for s in sorted(results)]
        mean = {k: mean_se([r[k] for r in rows]) for k in ("friction", "edge", "nonfinite")}
        print(
            f"{name}: learned friction {mean['friction']} (true 0.5), states at |z| > 0.99 "
            f"{mean['edge']}, non-finite {mean['nonfinite']}, update "
            f"{mean_se([r['update_ms'] for r in rows])} ms"
        )
    if args.figure:
        draw(results[0], temperature, Path(args.figure))
    print(json.dumps({"out": str(out)}))


if __name__ == "__main__":
    main()
