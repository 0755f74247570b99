"""Diagnostic nodes 67-70 of seed 003 for a covariant attention head, as functions of a forward
pass (its :class:`~world_model.attention.covariant.AttentionRecord`, and for node 67 the head and
its inputs, since the check re-runs the scores in another gauge).

- 67 GaugeInvarianceCheck:              max |s(z, z') - s_Omega(z, z')|, threshold 1e-3
- 68 MetricTemperatureConsistencyCheck: |tau(z) lambda(z) - sqrt(d_k)|, threshold 0.01 sqrt(d_k)
- 69 ChiralityViolationCheck:           ||Pi - Pi^2||_F over non-degenerate Pi, threshold 1e-6
- 70 TextureLeakageCheck:               sum_{texture z'} alpha(macro query, z'), threshold e^-1

Every node reports the worst case over the batch as its value (mean and counts in ``extra``). A
value at or above the threshold gives one warning line naming the node, the seed's trigger and
its remedy (:attr:`NodeReport.warning`); :func:`run_diagnostics` emits those lines as
:class:`CovariantDiagnosticWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor

from geometry import gauge_transforms, lie_algebra
from geometry.doublet import apply_in_channels

from .attention.context import MACRO_LEVEL, ContextBank
from .attention.covariant import AttentionRecord, CovariantAttention, CovariantQueries

__all__ = [
    "CovariantDiagnosticWarning",
    "NodeReport",
    "NODE_SPECS",
    "gauge_invariance_check",
    "metric_temperature_consistency_check",
    "chirality_violation_check",
    "texture_leakage_check",
    "run_diagnostics",
    "reports_nodes",
]


def reports_nodes(dynamics: object) -> bool:
    """Whether `dynamics` reports nodes 67-70 (a `node_reports` method: the geodesic model
    does, the GRU does not); what agent.diagnose, the figures and the training loop ask."""
    return callable(getattr(dynamics, "node_reports", None))


class CovariantDiagnosticWarning(UserWarning):
    """A diagnostic node of seed 003 crossed its threshold."""


@dataclass(frozen=True)
class _NodeSpec:
    name: str
    trigger: str
    remedy: str


NODE_SPECS: dict[int, _NodeSpec] = {
    67: _NodeSpec(
        "GaugeInvarianceCheck",
        "Wilson line approximation is too coarse for the curvature scale.",
        "use higher-order path-ordered product or reduce context distance.",
    ),
    68: _NodeSpec(
        "MetricTemperatureConsistencyCheck",
        "Temperature and metric are desynchronized.",
        "recalibrate temperature module or check metric computation.",
    ),
    69: _NodeSpec(
        "ChiralityViolationCheck",
        "Projector is not idempotent.",
        "renormalize value gradient; check for numerical precision issues.",
    ),
    70: _NodeSpec(
        "TextureLeakageCheck",
        "Texture is leaking to macro level.",
        "increase string tension sigma; check hierarchical level assignment.",
    ),
}


@dataclass(frozen=True)
class NodeReport:
    """One node's result: value (worst case over the batch) against the seed's threshold."""

    node: int
    value: float
    threshold: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return NODE_SPECS[self.node].name

    @property
    def passed(self) -> bool:
        return self.value < self.threshold

    @property
    def warning(self) -> str | None:
        """One line naming the node, the trigger and the seed's remedy; None when healthy."""
        if self.passed:
            return None
        spec = NODE_SPECS[self.node]
        return (
            f"Node {self.node} {spec.name}: {self.value:.3e} >= threshold {self.threshold:.3e}. "
            f"{spec.trigger} Remedy: {spec.remedy}"
        )


def _valid_pairs(record: AttentionRecord) -> Tensor:
    """[B or 1, 1 or Q, N] bool: the (query, entry) pairs that took part."""
    if record.mask is None:
        return torch.ones(
            1, 1, record.weights.shape[-1], dtype=torch.bool, device=record.weights.device
        )
    return record.mask.unsqueeze(-2)


# --------------------------------------------------------------------------- node 67


def gauge_invariance_check(
    head: CovariantAttention,
    queries: CovariantQueries,
    context: ContextBank,
    n_transforms: int = 3,
    scale: float = 0.5,
    n_factors: int = 3,
    generator: torch.Generator | None = None,
    threshold: float = 1e-3,
) -> NodeReport:
    """Node 67: Delta_gauge = max_Omega max |s(z, z') - s_Omega(z, z')|  (seed 003 Thm 98).

    For each of `n_transforms` random smooth gauge fields Omega(z) of the head's gauge group
    (geometry.gauge_transforms.random_gauge_field with unit couplings, in the head's minimal
    representation and acting on every channel alike; `scale` sets how fast it varies)
    the *connection* is transformed, A -> Omega A Omega^T + Omega dOmega^T, the Wilson lines are
    recomputed from it, the local fields are rotated at their own points, psi -> Omega(z) psi,
    and the scores are re-run. Exact transport gives 0; the first-order line I + H does not.
    extra: the relative deviation (over max |s|) and the number of transforms.
    """
    cfg = head.config
    dtype = head.connection_c0.dtype
    group = lie_algebra.gauge_generators(
        head.rep_dim, cfg.options.n_colors, cfg.options.hypercharge, dtype=torch.float64
    )
    group = group.stacked(1.0, 1.0, 1.0).to(dtype=dtype, device=head.connection_c0.device)
    with torch.no_grad():
        base = head.scores(queries, context)  # [B, Q, N]
        valid = (
            torch.ones_like(base, dtype=torch.bool)
            if context.mask is None
            else context.mask.unsqueeze(-2).expand_as(base)
        )
        conn = head.connection()
        worst = 0.0
        for _ in range(n_transforms):
            omega_field = gauge_transforms.random_gauge_field(
                group, cfg.d, n_factors, scale, generator
            )

            def rotate(positions: Tensor, psi: Tensor, f=omega_field) -> Tensor:
                return apply_in_channels(gauge_transforms.gauge_omega(f, positions), psi)

            moved = head.scores(
                queries,
                context,
                connection=gauge_transforms.gauge_transform_connection(conn, omega_field),
                field_map=rotate,
            )
            dev = (moved - base).abs().masked_fill(~valid, 0.0)
            worst = max(worst, float(dev.max()) if dev.numel() else 0.0)
        size = float(base.abs().masked_fill(~valid, 0.0).max()) if base.numel() else 0.0
    return NodeReport(
        67,
        worst,
        threshold,
        {"relative": worst / size if size > 0 else 0.0, "n_transforms": float(n_transforms)},
    )


# --------------------------------------------------------------------------- node 68


def metric_temperature_consistency_check(
    record: AttentionRecord, rel_threshold: float = 0.01
) -> NodeReport:
    """Node 68: Delta_tau = max |tau(z) lambda(z) - sqrt(d_k)|  (seed 003 Thm 99), threshold
    0.01 sqrt(d_k).

    tau is read from what the head actually did: the least-squares ratio of the scores to the
    logits it fed the softmax, tau = sum s^2 / sum s l over each query's valid entries (so a
    drifting calibration, or a head dividing by something else, shows); rows whose scores are
    all 0 fall back to the recorded tau. extra: the mean deviation and the largest gap between
    the read and the recorded tau.
    """
    if record.tau is None:
        raise ValueError("node 68 needs a softmax head (this kernel has no temperature)")
    record = record.detach()
    valid = _valid_pairs(record)
    s = record.scores.masked_fill(~valid, 0.0)
    ell = record.logits.masked_fill(~valid, 0.0)
    num, den = s.square().sum(-1), (s * ell).sum(-1)  # [B, Q]
    ok = den.abs() > torch.finfo(den.dtype).tiny
    tau_read = torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), record.tau)
    root = math.sqrt(record.d_k)
    dev = (tau_read * record.conformal - root).abs()
    return NodeReport(
        68,
        float(dev.max()),
        rel_threshold * root,
        {
            "mean": float(dev.mean()),
            "read_vs_recorded": float((tau_read - record.tau).abs().max()),
        },
    )


# --------------------------------------------------------------------------- node 69


def chirality_violation_check(record: AttentionRecord, threshold: float = 1e-6) -> NodeReport:
    """Node 69: chi_viol = max ||Pi - Pi^2||_F over the non-degenerate projectors (seed 003
    Def 285). Degenerate directions (|P grad V| below geometry.su2.DEGENERATE_NORM) carry Pi = 0
    by design and are not counted; their fraction is reported beside the value."""
    if record.projectors is None:
        raise ValueError(
            "node 69 needs a forward pass with queries.value_grad (no projectors recorded)"
        )
    record = record.detach()
    proj = record.projectors  # [..., 2, 2]
    degenerate = (
        record.degenerate
        if record.degenerate is not None
        else torch.zeros(proj.shape[:-2], dtype=torch.bool, device=proj.device)
    )
    viol = torch.linalg.matrix_norm(proj - proj @ proj)  # Frobenius, [...]
    live = viol[~degenerate]
    return NodeReport(
        69,
        float(live.max()) if live.numel() else 0.0,
        threshold,
        {
            "degenerate_fraction": float(degenerate.float().mean()) if degenerate.numel() else 0.0,
            "n_projectors": float(degenerate.numel()),
        },
    )


# --------------------------------------------------------------------------- node 70


def texture_leakage_check(record: AttentionRecord, threshold: float = math.exp(-1.0)) -> NodeReport:
    """Node 70: l_texture = sum over colour-charged entries (level != 0) of the weight a
    macro-level query puts on them, after screening and renormalisation (seed 003 Def 286,
    Thm 102); the value is the largest over the macro queries, extra has the mean."""
    record = record.detach()
    macro = record.query_levels == MACRO_LEVEL  # [B, Q]
    if not bool(macro.any()):
        raise ValueError("node 70 needs macro-level (level 0) queries in the forward pass")
    texture = (record.entry_levels != MACRO_LEVEL).unsqueeze(-2)  # [Bc, 1, N]
    leak = (record.weights * texture).sum(-1)[macro]  # [n_macro]
    return NodeReport(
        70,
        float(leak.max()),
        threshold,
        {"mean": float(leak.mean()), "n_macro_queries": float(leak.numel())},
    )


# --------------------------------------------------------------------------- all nodes


def run_diagnostics(
    head: CovariantAttention,
    queries: CovariantQueries,
    context: ContextBank,
    record: AttentionRecord | None = None,
    generator: torch.Generator | None = None,
    emit: bool = True,
) -> list[NodeReport]:
    """Nodes 67-70 for one forward pass (re-run here if `record` is None). Nodes that do not
    apply (68 for kernels without a temperature, 69 without value_grad, 70 without macro
    queries) are left out. With `emit`, each crossed threshold is issued once as a
    CovariantDiagnosticWarning."""
    if record is None:
        with torch.no_grad():
            _, record = head(queries, context)
    reports = [gauge_invariance_check(head, queries, context, generator=generator)]
    if record.tau is not None:
        reports.append(metric_temperature_consistency_check(record))
    if record.projectors is not None:
        reports.append(chirality_violation_check(record))
    if bool((record.query_levels == MACRO_LEVEL).any()):
        reports.append(texture_leakage_check(record))
    if emit:
        for rep in reports:
            if rep.warning is not None:
                warnings.warn(rep.warning, CovariantDiagnosticWarning, stacklevel=2)
    return reports
