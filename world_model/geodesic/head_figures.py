"""The numbers of the diagnose figures that read the geodesic model's heads
(agent/inspection/figures_data.py collects them for a run, agent/inspection/figures.py draws
them), each read from the heads' forward passes (a head_pass.HeadPass over states the caller
chose), never recomputed from the formula it is drawn against.

- **Disk projection** (`tangent_pca`): for latent d > 2 the plotted points are
  z -> exp_0(V^T log_0 z), V [d, 2] the first two principal directions (covariance
  eigenvectors) of log_0 z over the plotted states, exp_0 the 2-disk's exponential map at the
  origin (geometry/poincare.py). Rays from the origin stay rays and |V^T u| <= |u|, so every
  point stays inside the unit disk, no farther from the origin (in d_H) than the state it
  shows; for d = 2, V = I and the map is the identity.
- **Measured temperature** (node 68, `measured_temperature`): tau = sum s^2 / sum s l over each
  query's valid entries, from the record's scores s and logits l (the least-squares ratio s / l;
  the head divides every entry of a query by one number, so this is that number).
- **Node 67 against Wilson lines** (`wilson_sweep`): world_model.diagnostics.
  gauge_invariance_check for every mode and segment count, on the states of a head pass with
  the queries and banks the node report (reports.py) builds, on shallow copies of the heads
  whose `options.wilson` / `options.segments` are replaced (the trained heads are not touched);
  node 67 is the worse of the kick and drift heads, as in the report.
- **Chiral commitment** (`commitment`): c = Psi^dag Pi Psi / |Psi|^2 summed over the doublets of
  a head's output before the gate (Psi = sum alpha V~, seed 003 Def 285; the fraction of the
  output in the committed subspace), and the gate's relative change
  |chiral_gate(Psi) - Psi| / |Psi| with the head's learned strength kappa (the
  `chirality_strength` the diagnostics log).
- **Texture leakage by level** (node 70): the attention mass each query puts on each level.

`head_figures` computes all but the sweep from one pass over consecutive episodes.
docs/architecture.md ("Levels", "Data flow") describes the banks and levels read here.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from geometry import poincare, wilson_lines
from geometry.doublet import chiral_gate, realified_to_doublet
from world_model.attention.context import MACRO_LEVEL, ContextBank
from world_model.attention.covariant import AttentionRecord, CovariantAttention, CovariantQueries
from world_model.diagnostics import gauge_invariance_check
from world_model.model import Dynamics

from .head_pass import HeadPass
from .integrator import GeodesicCrossAttention

__all__ = [
    "DiskProjection",
    "TrajectoryData",
    "TemperatureData",
    "WilsonData",
    "AttentionData",
    "ChiralityData",
    "HeadFigures",
    "tangent_pca",
    "measured_temperature",
    "mass_by_level",
    "commitment",
    "wilson_sweep",
    "head_figures",
]

SEGMENTS = (1, 2, 4, 8)  # segment counts of the sweep, plus the run's own


# --------------------------------------------------------------------------- projection


@dataclass(frozen=True)
class DiskProjection:
    """z -> exp_0(V^T log_0 z) onto the unit disk (module docstring). basis V [d, 2]."""

    basis: Tensor
    caption: str

    def __call__(self, z: Tensor) -> Tensor:
        """z [..., d] -> [..., 2] inside the unit disk."""
        u = poincare.logmap0(z.detach().double().cpu())  # [..., d] tangent vectors at 0
        return poincare.expmap0(u @ self.basis)  # [..., 2]


def tangent_pca(z: Tensor) -> DiskProjection:
    """The disk projection fitted to the states z [N, d]: V = the two eigenvectors of largest
    eigenvalue of the covariance of log_0 z (float64; each signed so its largest component is
    positive), or the identity for d = 2 (the first axis of the disk for d = 1)."""
    d = z.shape[-1]
    if d <= 2:
        basis = torch.eye(d, 2, dtype=torch.float64)
        return DiskProjection(basis, "the latent disk itself (d = 2)" if d == 2 else "d = 1")
    u = poincare.logmap0(z.detach().double().cpu())  # [N, d]
    centred = u - u.mean(0)
    cov = centred.T @ centred / max(u.shape[0] - 1, 1)  # [d, d]
    _, vectors = torch.linalg.eigh(cov)  # ascending eigenvalues
    basis = vectors[:, [-1, -2]]  # [d, 2]
    lead = basis.abs().argmax(0)  # [2]
    basis = basis * torch.sign(basis[lead, torch.arange(2)])
    return DiskProjection(
        basis, f"exp_0 of the first two principal directions of log_0 z (d = {d})"
    )


# --------------------------------------------------------------------------- per-query read-outs


def _valid(record: AttentionRecord) -> Tensor:
    """[B or 1, 1, N] bool: the entries each query could attend to."""
    if record.mask is None:
        n = record.scores.shape[-1]
        return torch.ones(1, 1, n, dtype=torch.bool, device=record.scores.device)
    return record.mask.unsqueeze(-2)


def measured_temperature(record: AttentionRecord) -> Tensor:
    """tau per query [B, Q] read from what the head did: sum s^2 / sum s l over the query's
    valid entries (scores s, logits l of the record); NaN where every score is 0."""
    valid = _valid(record)
    s = record.scores.detach().masked_fill(~valid, 0.0).double()
    ell = record.logits.detach().masked_fill(~valid, 0.0).double()
    num, den = s.square().sum(-1), (s * ell).sum(-1)  # [B, Q]
    return torch.where(den != 0, num / torch.where(den != 0, den, 1.0), math.nan)


def mass_by_level(record: AttentionRecord, n_levels: int) -> Tensor:
    """The attention mass each query puts on each level: [B, Q, n_levels] (rows sum to 1)."""
    levels = record.entry_levels  # [Bc, N]
    onehot = torch.nn.functional.one_hot(levels, n_levels).to(record.weights.dtype)  # [Bc, N, L]
    return record.weights.detach() @ onehot  # [B, Q, L]


def commitment(
    pre_gate: Tensor, projectors: Tensor, n_colors: int, strength: Tensor | float
) -> tuple[Tensor, Tensor]:
    """(c, change) per query: c = sum_doublets Psi^dag Pi Psi / |Psi|^2 in [0, 1] (Def 285's
    commitment, normalised over the whole output), change = |gate(Psi) - Psi| / |Psi| for
    geometry.doublet.chiral_gate with strength kappa. pre_gate [B, Q, d_k] real (Psi, the
    realified doublets), projectors [B, Q, 2, 2] complex -> ([B, Q], [B, Q])."""
    psi = realified_to_doublet(pre_gate.detach(), n_colors)  # [B, Q, N_f, 2, m] complex
    pi_psi = torch.einsum("bqij,bqcjm->bqcim", projectors.to(psi.dtype), psi)
    committed = (psi.conj() * pi_psi).real.sum((-3, -2, -1))  # [B, Q]
    total = psi.abs().square().sum((-3, -2, -1)).clamp_min(torch.finfo(committed.dtype).tiny)
    gated = chiral_gate(pre_gate.detach(), projectors, n_colors, strength)
    change = (gated - pre_gate).norm(dim=-1) / total.sqrt()
    return committed / total, change


# --------------------------------------------------------------------------- node 67 sweep


def _with_lines(head: CovariantAttention, mode: str, segments: int) -> CovariantAttention:
    """A shallow copy of `head` (same parameters) whose Wilson lines are `mode`, `segments`."""
    options = dataclasses.replace(head.config.options, wilson=mode, segments=segments)
    clone = copy.copy(head)
    clone.config = dataclasses.replace(head.config, options=options)
    return clone


@dataclass
class WilsonData:
    """Node 67 (and per head) for each (mode, segments); the run's own setting."""

    modes: tuple[str, ...]
    segments: tuple[int, ...]
    node67: dict[str, np.ndarray]  # mode -> [len(segments)] (first_order, exp: one value)
    per_head: dict[str, dict[str, np.ndarray]]  # head -> mode -> [len(segments)]
    trained: tuple[str, int]
    threshold: float
    states: int


@torch.no_grad()
def wilson_sweep(
    heads: HeadPass,
    integ: GeodesicCrossAttention,
    modes: tuple[str, ...] = wilson_lines.WILSON_MODES,
    segments: tuple[int, ...] = SEGMENTS,
) -> WilsonData:
    """gauge_invariance_check for every mode and segment count on the states and banks of
    `heads`: the kick head over the force bank (generator seed 0) and the drift head over the
    correction bank (seed 1), as the node report; node 67 is the worse of the two. Each bank is
    checked part by part (prototypes, window: the context's force_parts / correction_parts)
    with the same seed, hence the same gauge fields: the largest deviation over all (query,
    entry) pairs is the joined bank's, without the shared prototypes' Wilson lines computed
    once per state. first_order, exp (and the ablation "none") do not depend on segments: one
    value each, at the run's segment count."""
    options = integ.kick_head.config.options
    trained = (options.wilson, options.segments)
    segments = tuple(sorted(set(segments) | {options.segments}))
    if options.wilson not in modes:  # a run trained with another mode (an ablation's "none")
        modes = (*modes, options.wilson)
    ctx = heads.context
    checks: list[tuple[str, CovariantAttention, CovariantQueries, tuple[ContextBank, ...], int]]
    checks = [("kick", integ.kick_head, heads.kick_queries, ctx.force_parts, 0)]
    if heads.drift_queries is not None:
        checks.append(("drift", integ.drift_head, heads.drift_queries, ctx.correction_parts, 1))
    per_head: dict[str, dict[str, list[float]]] = {name: {} for name, *_ in checks}
    node67: dict[str, np.ndarray] = {}
    threshold = 1e-3
    for mode in modes:
        counts = segments if mode in ("path_ordered", "magnus4") else (options.segments,)
        values = []
        for count in counts:
            worst = 0.0
            for name, head, queries, parts, seed in checks:
                clone = _with_lines(head, mode, count)
                head_worst = 0.0
                for bank in parts:
                    report = gauge_invariance_check(
                        clone, queries, bank, generator=torch.Generator().manual_seed(seed)
                    )
                    head_worst, threshold = max(head_worst, report.value), report.threshold
                per_head[name].setdefault(mode, []).append(head_worst)
                worst = max(worst, head_worst)
            values.append(worst)
        node67[mode] = np.array(values)
    return WilsonData(
        tuple(modes),
        segments,
        node67,
        {h: {m: np.array(v) for m, v in d.items()} for h, d in per_head.items()},
        trained,
        threshold,
        int(heads.z.shape[0]),
    )


# --------------------------------------------------------------------------- all the data


@dataclass
class TrajectoryData:
    """Episodes on the disk: per episode the encoded z [T, d] and its projection xy [T, 2]; the
    attention each state received as a texture entry (window) [T] and each macro entry
    (prototype) received, averaged over the plotted queries and the heads that read them."""

    projection: DiskProjection
    z: list[np.ndarray]
    xy: list[np.ndarray]
    texture_attention: list[np.ndarray]
    prototype_z: np.ndarray  # [M, d]
    prototype_xy: np.ndarray  # [M, 2]
    prototype_attention: np.ndarray  # [M]
    heads: tuple[str, ...]


@dataclass
class TemperatureData:
    """Per head: |z| of each query [n], the measured tau [n]; the curve sqrt(d_k)/lambda(r)."""

    z_norm: dict[str, np.ndarray]
    tau: dict[str, np.ndarray]
    curve_r: np.ndarray
    curve_tau: np.ndarray
    d_k: int
    mode: str  # the heads' temperature option (metric / constant)


@dataclass
class AttentionData:
    """One state's weights per head over its entries [N] (NaN where masked), the entries'
    labels and levels; node 70's mass per level over all plotted states (per head, [n, L]).
    `state`: the state's index among the plotted ones, step `episode_step` of `episode`."""

    state: int
    episode: int
    episode_step: int
    weights: dict[str, np.ndarray]
    labels: list[str]
    levels: np.ndarray
    mass: dict[str, np.ndarray]
    node70: float
    threshold: float


@dataclass
class ChiralityData:
    """Along one episode, per head: the commitment c [T], the gate's relative change [T], the
    degenerate steps [T] and the head's kappa."""

    commitment: dict[str, np.ndarray]
    change: dict[str, np.ndarray]
    degenerate: dict[str, np.ndarray]
    kappa: dict[str, float]


def _received(heads: HeadPass, bank: ContextBank, columns: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Distinct macro entries of the force bank and the attention they received: columns [N]
    bool (the macro ones) -> (z [M, d], weight summed over the plotted queries and averaged
    over the heads, divided by the number of queries [M]). Entries are identified by position,
    so a routed pool's per-root selections add up; masked entries are left out."""
    records = list(heads.records().values())
    b, d = heads.z.shape
    positions = bank.positions.detach().as_subclass(Tensor)  # a plain tensor (no geoopt)
    pos = positions[:, columns].expand(b, -1, -1).reshape(-1, d)  # [B M, d]
    weight = sum(r.weights[:, 0, columns].detach().reshape(-1) for r in records) / len(records)
    if bank.mask is not None:
        keep = bank.mask[:, columns].expand(b, -1).reshape(-1)
        pos, weight = pos[keep], weight[keep]
    unique, inverse = torch.unique(pos, dim=0, return_inverse=True)
    total = torch.zeros(unique.shape[0], dtype=weight.dtype, device=weight.device)
    total.index_add_(0, inverse, weight)
    return unique.cpu().double().numpy(), (total / b).cpu().double().numpy()


def _trajectories(heads: HeadPass, lengths: list[int], window: int) -> TrajectoryData:
    projection = tangent_pca(heads.z)
    bank = heads.context.force_bank
    macro = bank.levels[0] == MACRO_LEVEL  # [N]; the same in every row
    proto_z, proto_att = _received(heads, bank, macro)
    records = list(heads.records().values())
    tex = sum(r.weights[:, 0, ~macro] for r in records) / len(records)  # [B, W]
    tex = tex.detach().cpu().double().numpy()
    z_all = heads.z.detach().cpu()
    xy_all = projection(z_all)
    b = z_all.shape[0]
    zs, xys, texture = [], [], []
    start = 0
    for n in lengths:
        zs.append(z_all[start : start + n].double().numpy())
        xys.append(xy_all[start : start + n].numpy())
        received = np.zeros(n)
        w = tex[start : start + n]  # [T, W]
        for j in range(window):  # window slot j of step t holds step t - (W - j)
            lag = window - j
            if lag < n:
                received[: n - lag] += w[lag:, j]
        texture.append(received / b)
        start += n
    proto_xy = projection(torch.from_numpy(proto_z)).numpy()
    return TrajectoryData(
        projection, zs, xys, texture, proto_z, proto_xy, proto_att, tuple(heads.records())
    )


def _temperature(heads: HeadPass, mode: str) -> TemperatureData | None:
    records = {k: r for k, r in heads.records().items() if r.tau is not None}
    if not records:
        return None
    norms = heads.z.detach().norm(dim=-1).double().cpu().numpy()
    z_norm, tau = {}, {}
    for name, record in records.items():
        t = measured_temperature(record)[:, 0].cpu().numpy()  # [B]
        keep = np.isfinite(t)
        z_norm[name], tau[name] = norms[keep], t[keep]
    d_k = heads.kick.d_k
    top = max(0.95, float(norms.max()) if norms.size else 0.0)
    r = torch.linspace(0.0, top, 200, dtype=torch.float64)
    points = torch.nn.functional.pad(r.unsqueeze(-1), (0, heads.z.shape[-1] - 1))  # [200, d]
    curve = poincare.metric_temperature(points, d_k).squeeze(-1)
    return TemperatureData(z_norm, tau, r.numpy(), curve.numpy(), d_k, mode)


def _attention(heads: HeadPass, lengths: list[int], n_levels: int) -> AttentionData:
    """The middle step of the last plotted episode."""
    episode, episode_step = len(lengths) - 1, lengths[-1] // 2
    step = sum(lengths[:-1]) + episode_step
    bank = heads.context.force_bank
    row = min(step, bank.levels.shape[0] - 1)  # the bank's row of that state (1: shared)
    levels = bank.levels[row].cpu().numpy()  # [N]
    macro_count = int((levels == MACRO_LEVEL).sum())
    window = len(levels) - macro_count
    labels = [f"P{j}" for j in range(macro_count)] + [f"t-{window - j}" for j in range(window)]
    weights, mass = {}, {}
    for name, record in heads.records().items():
        valid = _valid(record)
        w = record.weights[step, 0].detach().double().cpu().numpy()
        ok = valid[min(step, valid.shape[0] - 1), 0].cpu().numpy()
        weights[name] = np.where(ok, w, np.nan)
        mass[name] = mass_by_level(record, n_levels)[:, 0].detach().double().cpu().numpy()
    leak = mass["kick"][:, 1:].sum(-1)  # the macro queries' mass on colour-charged levels
    node70 = float(leak.max()) if leak.size else 0.0
    return AttentionData(
        step, episode, episode_step, weights, labels, levels, mass, node70, math.exp(-1)
    )


def _chirality(
    heads: HeadPass, episode: slice, integ: GeodesicCrossAttention
) -> ChiralityData | None:
    if heads.kick.projectors is None:
        return None
    out = ChiralityData({}, {}, {}, {})
    parts = {"kick": (heads.kick, heads.kick_pre_gate, integ.kick_head)}
    if heads.drift is not None and heads.drift.projectors is not None:
        parts["drift"] = (heads.drift, heads.drift_pre_gate, integ.drift_head)
    for name, (record, pre, head) in parts.items():
        kappa = head.chirality_strength.detach()
        c, change = commitment(
            pre[episode], record.projectors[episode], head.config.options.n_colors, kappa
        )
        out.commitment[name] = c[:, 0].double().cpu().numpy()
        out.change[name] = change[:, 0].double().cpu().numpy()
        out.degenerate[name] = record.degenerate[episode, 0].cpu().numpy()
        out.kappa[name] = float(kappa)
    return out


@dataclass
class HeadFigures:
    """What `head_figures` reads of one head pass; a part is None where the model has nothing to
    show, with the reason in `notes`."""

    trajectories: TrajectoryData
    temperature: TemperatureData | None
    attention: AttentionData
    chirality: ChiralityData | None
    notes: list[str] = field(default_factory=list)


def head_figures(dyn: Dynamics, heads: HeadPass, lengths: list[int]) -> HeadFigures:
    """The figures' numbers of one pass of the heads of `dyn` (a GeodesicDynamics) over
    consecutive episodes of `lengths` steps, their states in order: the episodes on the disk,
    the measured temperature, the attention at the last episode's middle step and node 70's
    mass per level, the chiral commitment along the last episode."""
    integ = dyn.integrator
    options = integ.kick_head.config.options
    out = HeadFigures(
        trajectories=_trajectories(heads, lengths, dyn.history_length),
        temperature=_temperature(heads, options.temperature),
        attention=_attention(heads, lengths, integ.kick_head.config.n_levels),
        chirality=_chirality(heads, slice(sum(lengths[:-1]), sum(lengths)), integ),
    )
    if out.temperature is None:
        out.notes.append(
            f"attention kernel {options.kernel!r} has no temperature: no node-68 figure"
        )
    if out.chirality is None:
        out.notes.append("no chiral projector (dynamics.context.value_gradient is off)")
    return out
