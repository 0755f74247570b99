"""world_model.diagnostics: nodes 67-70 of seed 003 on real forward passes of the covariant head.

Each node is shown to read ~0 where the mathematics says it must, and to move (with one warning
line naming the node and the seed's remedy) when the thing it watches is broken on purpose.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from geometry import gauge_transforms, lie_algebra, poincare, screening
from geometry.doublet import apply_in_channels
from tests.world_model.test_covariant import (
    FULL_OPTIONS,
    _perturb_calibration,
    make_bank,
    make_head,
    make_queries,
)
from world_model import diagnostics as dg
from world_model.attention.context import ContextBank
from world_model.attention.covariant import CovariantQueries

F64 = torch.float64


def _node67(wilson, segments=1, scale=0.25, dtype=F64, seed=0):
    head = make_head(dtype, wilson=wilson, segments=segments, seed=seed)
    bank = make_bank(b=1, n=4, dtype=dtype, min_norm=0.5)
    q = make_queries(b=1, q=2, dtype=dtype, min_norm=0.5)
    gen = torch.Generator().manual_seed(11)
    return dg.gauge_invariance_check(head, q, bank, n_transforms=1, scale=scale, generator=gen)


def test_node67_is_zero_for_path_ordered_lines_and_not_for_first_order():
    """Gauge fields act on the connection (A -> Omega A Omega^T + Omega dOmega^T), the lines are
    recomputed, the fields rotated at their own points. Measured (float64, points at
    0.5 <= |z| <= 0.9, max |s| = 2.4, gauge-field scale 0.25): path-ordered with S = 16 / 64 /
    256 segments 7.9e-5 / 4.9e-6 / 3.1e-7 (O(S^-2)); matrix_exp of the integrated connection
    3.0e-3; first order I + H 1.1e-2. The seed's 1e-3 is an absolute threshold, so what it
    flags depends on the scale of the scores (extra["relative"] is scale-free)."""
    po = {s: _node67("path_ordered", segments=s) for s in (16, 64, 256)}
    first, expo = _node67("first_order"), _node67("exp")
    assert po[256].value < 1e-5, po[256]
    assert po[256].passed and po[256].warning is None
    ratios = [po[16].value / po[64].value, po[64].value / po[256].value]
    assert all(12 < r < 20 for r in ratios), ratios  # second order in the segments
    assert first.value > 1e-3 > 1e3 * po[256].value and not first.passed
    assert expo.value > 1e3 * po[256].value
    assert first.warning.startswith("Node 67 GaugeInvarianceCheck: ")
    assert "Remedy: use higher-order path-ordered product" in first.warning


def test_node67_falls_at_fourth_order_for_magnus_lines():
    """The default lines (fourth-order Magnus pieces): node 67 falls ~16x per doubling of the
    segments (measured on this bank, gauge-field scale 0.25: 8.2e-5 / 4.7e-6 / 2.9e-7 /
    1.8e-8 at S = 2 / 4 / 8 / 16), against exp's 3.0e-3 and path-ordered's 3.2e-4 at S = 8."""
    m4 = {s: _node67("magnus4", segments=s) for s in (2, 4, 8, 16)}
    ratios = [m4[s].value / m4[2 * s].value for s in (2, 4, 8)]
    assert all(r >= 12.0 for r in ratios), ratios
    assert m4[2].passed and m4[2].value < _node67("path_ordered", segments=8).value
    assert _node67("exp").value > 1e3 * m4[8].value


def test_node67_needs_the_connection_transformed_not_just_the_fields():
    """Rotating the fields without transforming the connection is not a gauge transformation:
    the same exact (path-ordered) head then shows an O(1) deviation. (The seed's 'rotate at
    the common reference frame' variant would test nothing either.)"""
    head = make_head(wilson="path_ordered", segments=64)
    bank, q = make_bank(b=1, n=6), make_queries(b=1, q=3)

    group = lie_algebra.gauge_generators(head.rep_dim, 2, dtype=F64).stacked(1.0, 1.0, 1.0)
    field = gauge_transforms.random_gauge_field(
        group, 3, scale=0.25, generator=torch.Generator().manual_seed(3)
    )

    def rotate(z, psi):
        return apply_in_channels(gauge_transforms.gauge_omega(field, z), psi)

    with torch.no_grad():
        base = head.scores(q, bank)
        fields_only = head.scores(q, bank, field_map=rotate)
        both = head.scores(
            q,
            bank,
            connection=gauge_transforms.gauge_transform_connection(head.connection(), field),
            field_map=rotate,
        )
    valid = bank.mask.unsqueeze(-2)
    assert ((fields_only - base).abs() * valid).max() > 1e-1
    assert ((both - base).abs() * valid).max() < 1e-3


def test_node68_reads_tau_from_the_logits_and_catches_calibration_drift():
    bank, q = make_bank(dtype=torch.float32), make_queries(dtype=torch.float32)
    root = math.sqrt(16)
    exact = make_head(torch.float32)  # temperature = "metric"
    rep = dg.metric_temperature_consistency_check(exact(q, bank)[1])
    assert rep.value < 1e-5 * root and rep.passed, rep
    calibrated = make_head(torch.float32)  # its temperature drifts by _perturb_calibration
    rep0 = dg.metric_temperature_consistency_check(calibrated(q, bank)[1])
    assert rep0.value < 1e-5 * root, rep0  # calibration starts at the exact temperature
    _perturb_calibration(calibrated, scale=0.05, slope=-0.02)
    _, rec = calibrated(q, bank)
    rep1 = dg.metric_temperature_consistency_check(rec)
    lam = poincare.conformal_factor(q.positions.double()).squeeze(-1)
    closed = root * (torch.exp(0.05 - 0.02 * torch.log(lam / 2)) - 1).abs().max()
    assert rep1.value == pytest.approx(float(closed), rel=1e-4)
    assert rep1.value > 0.01 * root and "Node 68 MetricTemperatureConsistencyCheck" in rep1.warning
    # a record that claims the exact tau but whose logits used another one is still caught
    forged = dataclasses.replace(rec, tau=poincare.metric_temperature(q.positions, 16).squeeze(-1))
    rep2 = dg.metric_temperature_consistency_check(forged)
    assert rep2.value == pytest.approx(rep1.value, rel=1e-4)
    assert rep2.extra["read_vs_recorded"] > 1e-3
    # a constant temperature is inconsistent with the metric: sqrt(d_k) (lambda - 1)
    constant = make_head(torch.float32, temperature="constant")
    rep3 = dg.metric_temperature_consistency_check(constant(q, bank)[1])
    assert rep3.value == pytest.approx(float(root * (lam.max() - 1)), rel=1e-4)


def _seed_listing_real_projector(n: torch.Tensor) -> torch.Tensor:
    """The seed 003 listing's ChiralProjector: sigma_2 replaced by the real [[0, -1], [1, 0]]."""
    n_hat = n / n.norm(dim=-1, keepdim=True)
    s = torch.tensor(
        [[[0.0, 1.0], [1.0, 0.0]], [[0.0, -1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, -1.0]]],
        dtype=n.dtype,
    )
    return 0.5 * (torch.eye(2, dtype=n.dtype) + torch.einsum("...a,aij->...ij", n_hat, s))


def test_node69_idempotent_projectors_degenerate_fraction_and_the_seeds_real_proxy():
    head = make_head(torch.float32, **FULL_OPTIONS)
    bank, q = make_bank(dtype=torch.float32), make_queries(dtype=torch.float32)
    q_all, grad = q, q.value_grad.clone()
    grad[0, 1] = 0.0  # a flat value landscape at one query: degenerate direction
    q = dataclasses.replace(q, value_grad=grad)
    out, rec = head(q, bank)
    rep = dg.chirality_violation_check(rec)
    assert rep.value < 1e-6 and rep.passed, rep  # float32, complex Pauli matrices
    assert rep.extra["degenerate_fraction"] == pytest.approx(1 / 6)
    assert rec.degenerate[0, 1] and (rec.projectors[0, 1] == 0).all()
    # the listing's real sigma_2 proxy: Pi - Pi^2 = (n_2^2 / 2) I, so ||.||_F = n_2^2 / sqrt(2)
    n = head.value_grad_proj(q_all.value_grad).detach().double()  # every direction defined
    proxy = _seed_listing_real_projector(n).to(torch.complex128)
    fake = dataclasses.replace(rec, projectors=proxy, degenerate=torch.zeros_like(rec.degenerate))
    rep_proxy = dg.chirality_violation_check(fake)
    n_hat = n / n.norm(dim=-1, keepdim=True)
    assert rep_proxy.value == pytest.approx(float((n_hat[..., 1] ** 2).max() / math.sqrt(2)))
    assert rep_proxy.value > 1e-2
    assert rep_proxy.warning.startswith("Node 69 ChiralityViolationCheck: ")
    assert "Remedy: renormalize value gradient" in rep_proxy.warning
    no_grad_v = dataclasses.replace(q, value_grad=None)
    with pytest.raises(ValueError, match="node 69 needs a forward pass with queries.value_grad"):
        dg.chirality_violation_check(head(no_grad_v, bank)[1])


def test_node70_falls_as_the_macro_string_tension_rises():
    """Macro queries over a bank with macro and texture entries. Measured leakage for
    sigma(0) = 0, 1, 4, 16, 64 (this data): strictly falling, from above e^-1 to below it;
    equal to sum_texture alpha0 S / sum alpha0 S from the unscreened weights alpha0."""
    head = make_head(**FULL_OPTIONS)
    bank = make_bank(b=2, n=10, mask=False, seed=5)
    q = make_queries(b=2, q=4, seed=6)
    q = dataclasses.replace(q, levels=torch.zeros_like(q.levels))  # kick head: macro queries
    with torch.no_grad():
        head.screening_coupling.zero_()
        _, bare = head(q, bank)
    area = screening.pairwise_string_area(q.positions, bank.positions)
    texture = (bank.levels != 0).unsqueeze(-2)
    leaks = []
    for sigma in [0.0, 1.0, 4.0, 16.0, 64.0]:
        with torch.no_grad():
            head.screening_coupling[0] = math.sqrt(sigma)
            _, rec = head(q, bank)
        rep = dg.texture_leakage_check(rec)
        screened = bare.weights * torch.where(texture, torch.exp(-sigma * area), 1.0)
        expected = (screened * texture).sum(-1) / screened.sum(-1)
        assert rep.value == pytest.approx(float(expected.max()), rel=1e-9)
        assert rep.extra["mean"] == pytest.approx(float(expected.mean()), rel=1e-9)
        leaks.append(rep.value)
    assert all(a > b for a, b in zip(leaks, leaks[1:], strict=False)), leaks
    assert leaks[0] > math.exp(-1) > leaks[-1], leaks
    with torch.no_grad():
        head.screening_coupling[0] = 0.0
    rep = dg.texture_leakage_check(head(q, bank)[1])
    assert "Node 70 TextureLeakageCheck" in rep.warning and "increase string tension" in rep.warning
    # only macro queries count; texture queries alone make the node inapplicable
    texture_q = dataclasses.replace(q, levels=torch.ones_like(q.levels))
    with pytest.raises(ValueError, match="node 70 needs macro-level"):
        dg.texture_leakage_check(head(texture_q, bank)[1])


def test_run_diagnostics_emits_one_line_per_crossed_threshold():
    bank = make_bank(b=2, n=10, mask=False, seed=5)
    q = make_queries(b=2, q=4, seed=6)
    sick = make_head(wilson="first_order", **FULL_OPTIONS)
    _perturb_calibration(sick, scale=0.2)
    with torch.no_grad():
        sick.screening_coupling.zero_()
    with pytest.warns(dg.CovariantDiagnosticWarning) as caught:
        reports = dg.run_diagnostics(sick, q, bank, generator=torch.Generator().manual_seed(0))
    lines = [str(w.message) for w in caught]
    assert [r.node for r in reports] == [67, 68, 69, 70]
    assert [line.split(":")[0] for line in lines] == [
        "Node 67 GaugeInvarianceCheck",
        "Node 68 MetricTemperatureConsistencyCheck",
        "Node 70 TextureLeakageCheck",
    ]
    assert all("Remedy: " in line and "\n" not in line for line in lines)

    options = {**FULL_OPTIONS, "string_tension": (64.0, 0.01)}
    healthy = make_head(wilson="path_ordered", segments=64, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reports = dg.run_diagnostics(healthy, q, bank, generator=torch.Generator().manual_seed(0))
    assert all(r.passed for r in reports), reports
    assert np.isfinite([r.value for r in reports]).all()


def test_record_detaches_and_texture_only_queries_skip_node_70():
    head = make_head(**FULL_OPTIONS)
    bank = make_bank()
    q = make_queries()
    _, rec = head(q, bank)
    assert rec.weights.requires_grad and not rec.detach().weights.requires_grad
    texture_q = CovariantQueries(
        q.positions, q.features, q.velocity, q.velocity_features, None, torch.ones_like(q.levels)
    )
    reports = dg.run_diagnostics(head, texture_q, ContextBank.cat([bank]), emit=False)
    assert [r.node for r in reports] == [67, 68]


def test_reports_nodes_tells_the_geodesic_model_from_the_gru():
    from world_model.registry import build_dynamics

    geodesic = build_dynamics("geodesic", 3, 1)
    gru = build_dynamics("gru", 3, 1)
    assert dg.reports_nodes(geodesic) and not dg.reports_nodes(gru)
    assert not dg.reports_nodes(SimpleNamespace(node_reports=None))  # an attribute, not a method
