"""benchmarks/thermostat_ablation.py's distances between distributions, against scipy's, and its
true-system sampler against the Gibbs momentum law it is compared with."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from benchmarks.thermostat_ablation import (
    ks_normal,
    ks_two_sample,
    true_samples,
    wasserstein1,
)
from envs.poincare_disk import make_config
from geometry import poincare


@pytest.mark.parametrize("shift", [0.0, 0.3])
def test_distances_match_scipy(shift):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=3000), rng.normal(shift, 1.2, size=2000)
    assert ks_two_sample(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)
    want = stats.kstest(a, stats.norm(scale=np.sqrt(0.5)).cdf).statistic
    assert ks_normal(a, 0.5) == pytest.approx(want, abs=1e-12)
    assert wasserstein1(a, b) == pytest.approx(stats.wasserstein_distance(a, b), rel=0.05)


def test_the_true_systems_frame_momentum_is_gibbs():
    """p / lambda(z) of the thermalised true system is N(0, T) per component (the metric is
    conformal): the statistic the models' rollouts are measured by reaches its floor there."""
    cfg = make_config("default")
    z, p = true_samples(cfg, starts=512, burn=200, steps=600, thin=10, seed=0)
    frame = (p / poincare.conformal_factor(z)).numpy().ravel()
    assert frame.var() == pytest.approx(cfg.temperature, rel=0.05)
    assert ks_normal(frame, cfg.temperature) < 0.02
    assert ks_normal(frame, 2 * cfg.temperature) > 0.05  # a hotter law is told apart (0.086)
