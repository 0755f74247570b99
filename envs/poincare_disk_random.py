"""`PoincareDiskRandom-v0`: PoincareDisk-v0 with its potential landscape redrawn at every reset.

The physics, task, start distribution, observation [z, p] and action space are PoincareDisk-v0's
(`envs.poincare_disk`); only the Gaussian wells of

    Phi(z) = k/2 d(0, z)^2 - sum_i a_i exp(-d(z, c_i)^2 / (2 w_i^2))

change: at each reset, from the env's seeded RNG (`draw_landscape`),

    c_i ~ uniform (Lebesgue) in the Euclidean ball |c| <= radius   (default radius 0.6)
    a_i ~ U[depths[0], depths[1]]                                  (default [0.3, 0.8])
    w_i = width                                                    (default 0.5, hyperbolic)

for i = 1 .. wells (default 4); the confining term k/2 d(0, z)^2 is PoincareDisk-v0's. The
observation does not show the landscape, so what was seen earlier in an episode is the only way
to know this episode's forces: a world-model memory benchmark. info["landscape"] carries the
episode's wells (for a true-potential ceiling) and `reset(options={"landscape": ...})` fixes them
(for evaluation on given landscapes).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np

from envs.poincare_disk import PoincareDiskConfig, PoincareDiskEnv

__all__ = ["LANDSCAPE_FIELDS", "PoincareDiskRandomEnv", "draw_landscape"]

LANDSCAPE_FIELDS: tuple[str, ...] = ("well_centers", "well_depths", "well_widths")
"""The PoincareDiskConfig fields a landscape sets (the keys of `draw_landscape`'s dict)."""


def _check_draw_arguments(
    dim: int, wells: int, radius: float, depths: tuple[float, float], width: float
) -> tuple[float, float]:
    """Validates draw_landscape's arguments (ValueError naming the argument); -> (low, high)."""

    def fail(msg: str) -> NoReturn:
        raise ValueError(f"PoincareDiskRandom: {msg}")

    def real(x: Any) -> bool:
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)

    for name, value in (("dim", dim), ("wells", wells)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            fail(f"{name} must be a positive int, got {value!r}")
    if not (real(radius) and 0.0 <= radius < 1.0):
        fail(f"radius must lie in [0, 1) (a Euclidean radius in the ball), got {radius!r}")
    if not (isinstance(depths, tuple | list) and len(depths) == 2 and all(real(x) for x in depths)):
        fail(f"depths must be a pair (low, high) of finite floats, got {depths!r}")
    lo, hi = float(depths[0]), float(depths[1])
    if lo > hi:
        fail(f"depths must be (low, high) with low <= high, got {depths!r}")
    if not (real(width) and width > 0):
        fail(f"width must be finite and > 0 (a hyperbolic distance), got {width!r}")
    return lo, hi


def draw_landscape(
    rng: np.random.Generator,
    dim: int,
    wells: int = 4,
    radius: float = 0.6,
    depths: tuple[float, float] = (0.3, 0.8),
    width: float = 0.5,
) -> dict[str, tuple]:
    """One random landscape: `wells` centres uniform (Lebesgue) in the Euclidean ball |c| <=
    radius of R^dim (direction xi / |xi| with xi ~ N(0, I), radius R U^(1/dim), U ~ U[0, 1]),
    depths uniform in [depths[0], depths[1]], widths all `width`.

    Returns PoincareDiskConfig fields (`LANDSCAPE_FIELDS`) as tuples: well_centers [wells][dim],
    well_depths [wells], well_widths [wells], ready for `dataclasses.replace(config, **out)`.
    Raises ValueError for a bad argument.
    """
    lo, hi = _check_draw_arguments(dim, wells, radius, depths, width)
    direction = rng.standard_normal((wells, dim))  # [M, d]
    direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)
    norm = radius * rng.random((wells, 1)) ** (1.0 / dim)  # [M, 1]
    centers = norm * direction  # [M, d]
    well_depths = rng.uniform(lo, hi, size=wells)  # [M]
    return {
        "well_centers": tuple(tuple(c) for c in centers.tolist()),
        "well_depths": tuple(well_depths.tolist()),
        "well_widths": (float(width),) * wells,
    }


def _fixed_landscape(landscape: Any) -> dict[str, Any]:
    """The validated keys of options["landscape"] (a subset of LANDSCAPE_FIELDS)."""
    if not isinstance(landscape, Mapping):
        raise ValueError(
            f"options['landscape'] must be a mapping with keys from {', '.join(LANDSCAPE_FIELDS)}, "
            f"got {type(landscape).__name__}"
        )
    unknown = sorted(set(landscape) - set(LANDSCAPE_FIELDS))
    if unknown:
        raise ValueError(
            f"options['landscape'] has unknown key(s) {', '.join(map(str, unknown))}; "
            f"keys: {', '.join(LANDSCAPE_FIELDS)}"
        )
    return dict(landscape)


class PoincareDiskRandomEnv(PoincareDiskEnv):
    """`PoincareDisk-v0` whose wells are redrawn at every reset (module docstring).

    Keyword arguments: `wells`, `radius`, `depths`, `width` (the distribution, see
    `draw_landscape`) and everything PoincareDiskEnv takes (`preset`, `config`, config field
    overrides, `noise`) except the landscape fields, which the draw sets. `reset(seed=s)` draws
    the landscape, then the noise seed and the start, all from the env's RNG, so the same seed
    gives the same landscape and start; resets without a seed draw new ones.
    `reset(options={"landscape": {...}})` replaces the drawn well_centers / well_depths /
    well_widths by the given ones (the draw is still made, so the start is the seed's own);
    `options={"state": (z, p)}` works as in PoincareDisk-v0. info["landscape"] holds the
    episode's wells as lists (keys `LANDSCAPE_FIELDS`; it can be passed back as options).
    Before the first reset the landscape is the draw of np.random.default_rng(0).
    """

    def __init__(
        self,
        render_mode: str | None = None,
        *,
        wells: int = 4,
        radius: float = 0.6,
        depths: tuple[float, float] = (0.3, 0.8),
        width: float = 0.5,
        **kwargs: Any,
    ):
        fixed = sorted(set(kwargs) & set(LANDSCAPE_FIELDS))
        if fixed:
            raise ValueError(
                f"PoincareDiskRandom: {', '.join(fixed)} cannot be set, the landscape is drawn "
                "at every reset (set wells, radius, depths, width, or pass "
                "reset(options={'landscape': ...}))"
            )
        super().__init__(render_mode, **kwargs)
        self._draw = dict(wells=wells, radius=radius, depths=depths, width=width)
        _check_draw_arguments(self.config.dim, **self._draw)
        if radius >= self.config.max_norm:
            raise ValueError(
                f"PoincareDiskRandom: radius must be < max_norm = {self.config.max_norm}, "
                f"got {radius!r}"
            )
        self._set_landscape(draw_landscape(np.random.default_rng(0), self.config.dim, **self._draw))

    @property
    def landscape_config(self) -> PoincareDiskConfig:
        """The current episode's PoincareDiskConfig: PoincareDisk-v0's with this episode's wells
        (the config the dynamics, reward and rendering use)."""
        return self.config

    def _set_landscape(self, landscape: dict[str, Any]) -> None:
        try:
            self.config = dataclasses.replace(self.config, **landscape)
        except (TypeError, ValueError) as err:
            raise ValueError(f"invalid landscape: {err}") from None
        self._background = None  # the rendered potential belongs to the previous landscape

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = super()._info()
        info["landscape"] = {
            "well_centers": [list(c) for c in self.config.well_centers],  # [M][d]
            "well_depths": list(self.config.well_depths),  # [M]
            "well_widths": list(self.config.well_widths),  # [M]
        }
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        gym.Env.reset(self, seed=seed)  # seeds np_random; the parent's reset(seed=None) keeps it
        landscape = draw_landscape(self.np_random, self.config.dim, **self._draw)
        fixed = (options or {}).get("landscape")
        if fixed is not None:
            landscape.update(_fixed_landscape(fixed))
        self._set_landscape(landscape)
        return super().reset(seed=None, options=options)
