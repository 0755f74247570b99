"""Paired differences of two methods seed by seed: mean, median and a percentile-bootstrap 95%
interval of the mean difference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["BOOTSTRAP_RESAMPLES", "paired_differences", "mean_or_none", "standard_error"]

BOOTSTRAP_RESAMPLES = 10_000


def paired_differences(
    differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float, float | None, float | None]:
    """Per-seed differences [n] -> (mean, median, 95% CI low, high): the percentile bootstrap of
    the mean (resampling seeds with replacement, a fixed generator so a table is reproducible);
    no interval for n = 1."""
    d = np.asarray(differences, dtype=float)  # [n]
    if d.size == 0:
        raise ValueError("paired_differences needs at least one difference")
    mean, median = float(d.mean()), float(np.median(d))
    if d.size < 2:
        return mean, median, None, None
    draws = np.random.default_rng(seed).integers(0, d.size, size=(resamples, d.size))
    low, high = np.percentile(d[draws].mean(axis=1), [2.5, 97.5])  # [resamples] -> 2
    return mean, median, float(low), float(high)


def mean_or_none(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def standard_error(values: Sequence[float]) -> float | None:
    """std(ddof=1) / sqrt(n) of [n] values; None for n < 2."""
    x = np.asarray(values, dtype=float)
    return float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else None
