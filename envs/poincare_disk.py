"""A controlled Langevin particle on the Poincare ball: the project's environment with known truth.

State (z, p): position z in B^d (|z| < 1, curvature -1) and momentum p, a covector at z.
Hamiltonian (seed 003 Def 281 metric G = lambda(z)^2 I, Thm 103 Gibbs target):

    H(z, p) = Phi(z) + K(z, p),   K = 1/2 p^T G^-1(z) p = |p|^2 / (2 lambda(z)^2),
    Phi(z)  = k/2 d(0, z)^2 - sum_i a_i exp(-d(z, c_i)^2 / (2 w_i^2)),

a confining term (Phi grows with hyperbolic distance, so the Gibbs density is normalisable) plus
Gaussian wells in hyperbolic distance (so the force field is not radial). Dynamics: underdamped
Langevin with friction gamma, temperature T and the action a in [-1, 1]^d as an external force
covector F(a) = force_gain * a:

    dz = G^-1 p dt,
    dp = (-dPhi/dz - dK/dz + F(a) - gamma p) dt + sqrt(2 gamma T) lambda(z) dW.

With a = 0 its stationary density is exp(-H/T) (seed 003 Thm 103), whose z-marginal is
proportional to lambda(z)^d exp(-Phi(z)/T) (the momentum integral gives det G^(1/2)).

Integrator: per env step of length dt, `substeps` BAOAB sub-steps of h = dt / substeps
(seed 003 Def 287, with the geodesic term carried exactly):
  B  p <- p + h/2 (-dPhi/dz + F(a))
  A  (z, p) <- exact geodesic flow of K for h/2 (`geometry.poincare.geodesic_flow`: exponential
     map plus parallel transport of the velocity; it carries -dK/dz exactly, so no dK/dz kick)
  O  p <- c1 p + c2 lambda(z) xi,  c1 = exp(-gamma h), c2 = sqrt((1 - c1^2) T),  xi ~ N(0, I)
  A, B as above.
With gamma = 0, T = 0 and a = 0 this is kick-flow-kick of exact sub-flows: symplectic and
time-reversible, so H is conserved up to a bounded O(h^2) error with no drift.

Everything is float64 inside; positions are kept at |z| <= max_norm (`geometry.poincare.project`).
`simulate` is the batched, gym-free form of exactly the integrator the env's `step` uses.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from geometry.langevin import baoab_substeps
from geometry.poincare import conformal_factor, dist, kinetic_energy, project, sqnorm
from geometry.potentials import confining_force, confining_potential, gaussian_wells

__all__ = [
    "PRESETS",
    "PoincareDiskConfig",
    "PoincareDiskEnv",
    "potential",
    "potential_grad",
    "true_energy",
    "control_force",
    "gibbs_log_density",
    "integrate_step",
    "simulate",
    "reward_fn",
    "sample_start",
]

DTYPE = torch.float64

# Default landscape, written for d = 2 and embedded in the first two coordinates for d > 2
# (truncated for d = 1): three wells of different depths and widths, off the origin.
_DEFAULT_WELL_CENTERS = ((0.45, 0.10), (-0.30, 0.40), (-0.20, -0.50))
_DEFAULT_GOAL = (0.40, 0.30)


def _embed(point: tuple[float, ...], dim: int) -> tuple[float, ...]:
    return tuple(float(x) for x in (tuple(point) + (0.0,) * dim)[:dim])


@dataclass(frozen=True)
class PoincareDiskConfig:
    """Physics, task and start distribution of `PoincareDisk-v0`. All lengths in the potential
    (well widths) are hyperbolic distances; `start_radius` and `max_norm` are Euclidean radii."""

    dim: int = 2
    """dimension d of the ball B^d (observation 2d, action d)"""
    dt: float = 0.1
    """env step length (time units)"""
    substeps: int = 10
    """BAOAB sub-steps per env step (h = dt / substeps)"""
    friction: float = 0.5
    """gamma >= 0: OU friction rate; 0 with temperature 0 is the conservative system"""
    temperature: float = 0.05
    """T >= 0: bath temperature; the noise is sqrt(2 gamma T), so it needs friction > 0"""
    force_gain: float = 2.0
    """F(a) = force_gain * a, a covector, a in [-1, 1]^d"""
    confinement: float = 0.5
    """k > 0 in Phi's term k/2 d(0, z)^2"""
    well_centers: tuple[tuple[float, ...], ...] | None = None
    """well centres c_i inside the ball (None: three default wells)"""
    well_depths: tuple[float, ...] = (0.6, 0.4, 0.5)
    """a_i (> 0: a well, < 0: a bump)"""
    well_widths: tuple[float, ...] = (0.5, 0.4, 0.6)
    """w_i > 0, in hyperbolic distance"""
    goal: tuple[float, ...] | None = None
    """goal point inside the ball (None: (0.4, 0.3) embedded)"""
    effort_cost: float = 0.01
    """reward = progress in d(z, goal) - effort_cost |a|^2"""
    start_radius: float = 0.5
    """z0 uniform (Lebesgue) in the Euclidean ball of this radius"""
    start_speed: float = 0.2
    """p0 = lambda(z0) start_speed xi: metric-norm velocity ~ start_speed per coordinate"""
    max_norm: float = 1.0 - 1e-5
    """positions are kept at |z| <= max_norm"""

    def __post_init__(self) -> None:
        def fail(msg: str) -> None:
            raise ValueError(f"PoincareDiskConfig: {msg}")

        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            fail(f"dim must be a positive int, got {self.dim!r}")
        if isinstance(self.substeps, bool) or not isinstance(self.substeps, int):
            fail(f"substeps must be an int, got {self.substeps!r}")
        if self.substeps < 1:
            fail(f"substeps must be >= 1, got {self.substeps}")
        for name in ("dt", "confinement"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                fail(f"{name} must be finite and > 0, got {value!r}")
        for name in ("friction", "temperature", "force_gain", "effort_cost", "start_speed"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                fail(f"{name} must be finite and >= 0, got {value!r}")
        if not 0.0 < self.max_norm < 1.0:
            fail(f"max_norm must lie in (0, 1), got {self.max_norm!r}")
        if not 0.0 <= self.start_radius < self.max_norm:
            fail(f"start_radius must lie in [0, max_norm), got {self.start_radius!r}")

        centers = self.well_centers
        if centers is None:
            centers = tuple(_embed(c, self.dim) for c in _DEFAULT_WELL_CENTERS)
        centers = tuple(tuple(float(x) for x in c) for c in centers)
        goal = (
            _embed(_DEFAULT_GOAL, self.dim) if self.goal is None else tuple(map(float, self.goal))
        )
        depths = tuple(float(a) for a in self.well_depths)
        widths = tuple(float(w) for w in self.well_widths)
        if not len(centers) == len(depths) == len(widths):
            fail(
                f"well_centers, well_depths and well_widths need one entry per well, got "
                f"{len(centers)}, {len(depths)} and {len(widths)}"
            )
        for c in (*centers, goal):
            if len(c) != self.dim:
                fail(f"points must have dim = {self.dim} coordinates, got {c}")
            if not all(math.isfinite(x) for x in c) or math.hypot(*c) >= self.max_norm:
                fail(f"points must lie inside the ball |z| < max_norm, got {c}")
        if not all(math.isfinite(a) for a in depths):
            fail(f"well_depths must be finite, got {depths}")
        if not all(math.isfinite(w) and w > 0 for w in widths):
            fail(f"well_widths must be finite and > 0, got {widths}")
        object.__setattr__(self, "well_centers", centers)
        object.__setattr__(self, "well_depths", depths)
        object.__setattr__(self, "well_widths", widths)
        object.__setattr__(self, "goal", goal)

    @property
    def h(self) -> float:
        """Sub-step length dt / substeps."""
        return self.dt / self.substeps

    @property
    def conservative(self) -> bool:
        """No friction and no noise: H is conserved under zero action."""
        return self.friction == 0.0 and self.temperature == 0.0


PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "conservative": {"friction": 0.0, "temperature": 0.0},
}


def make_config(preset: str = "default", **overrides: Any) -> PoincareDiskConfig:
    """A preset ("default": moderately damped and noisy; "conservative": friction 0,
    temperature 0) with field overrides."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    fields = {f.name for f in dataclasses.fields(PoincareDiskConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(
            f"unknown PoincareDiskConfig field(s) {', '.join(unknown)}; "
            f"fields: {', '.join(sorted(fields))}"
        )
    return PoincareDiskConfig(**{**PRESETS[preset], **overrides})


@functools.lru_cache(maxsize=64)
def _landscape(config: PoincareDiskConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(centers [M, d], depths [M], widths [M], goal [d]) as float64 tensors."""
    centers = torch.tensor(config.well_centers, dtype=DTYPE).reshape(-1, config.dim)
    depths = torch.tensor(config.well_depths, dtype=DTYPE)
    widths = torch.tensor(config.well_widths, dtype=DTYPE)
    goal = torch.tensor(config.goal, dtype=DTYPE)
    return centers, depths, widths, goal


def potential(z: Tensor, config: PoincareDiskConfig) -> Tensor:
    """Phi(z) = k/2 d(0, z)^2 - sum_i a_i exp(-d(z, c_i)^2 / (2 w_i^2)) (geometry.potentials:
    confining_potential, gaussian_wells); z [..., d] -> [...]."""
    centers, depths, widths, _ = _landscape(config)
    centers, depths, widths = (t.to(z.dtype) for t in (centers, depths, widths))
    wells, _ = gaussian_wells(z, centers, depths, widths)  # [...] (already signed: -sum ...)
    return config.confinement * confining_potential(z) + wells


def potential_grad(z: Tensor, config: PoincareDiskConfig) -> Tensor:
    """dPhi/dz (a covector), closed form: minus the forces of geometry.potentials,
    dPhi/dz = -(k confining_force(z) + gaussian_wells force), finite at z = c_i and up to
    |z| = max_norm. z [..., d] -> [..., d]."""
    centers, depths, widths, _ = _landscape(config)
    centers, depths, widths = (t.to(z.dtype) for t in (centers, depths, widths))
    _, wells = gaussian_wells(z, centers, depths, widths)  # [..., d]
    return -(config.confinement * confining_force(z) + wells)  # [..., d]


def true_energy(z: Tensor, p: Tensor, config: PoincareDiskConfig) -> Tensor:
    """H(z, p) = Phi(z) + 1/2 p^T G^-1(z) p  (seed 003 Thm 103's exponent times T);
    z, p [..., d] -> [...]."""
    return potential(z, config) + kinetic_energy(z, p).squeeze(-1)


def gibbs_log_density(z: Tensor, config: PoincareDiskConfig) -> Tensor:
    """Unnormalised log of the stationary z-marginal (zero action, T > 0):
    log rho(z) = d log lambda(z) - Phi(z) / T  (seed 003 Thm 103 with the p-integral done);
    z [..., d] -> [...]."""
    if config.temperature <= 0:
        raise ValueError("the Gibbs density needs temperature > 0")
    log_lam = torch.log(conformal_factor(z)).squeeze(-1)
    return config.dim * log_lam - potential(z, config) / config.temperature


def control_force(action: Tensor, config: PoincareDiskConfig) -> Tensor:
    """F(a) = force_gain * clip(a, -1, 1), a covector (the env's action space is [-1, 1]^d)."""
    return config.force_gain * action.clamp(-1.0, 1.0)


def _check_state(z: Tensor, p: Tensor, action: Tensor | None, dim: int) -> None:
    if z.shape[-1] != dim or p.shape != z.shape:
        raise ValueError(
            f"z and p must both have shape [..., {dim}], got {tuple(z.shape)} and {tuple(p.shape)}"
        )
    if action is not None and action.shape != z.shape:
        raise ValueError(f"action must have shape {tuple(z.shape)}, got {tuple(action.shape)}")


def integrate_step(
    z: Tensor,
    p: Tensor,
    action: Tensor,
    config: PoincareDiskConfig,
    *,
    noise: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """One env step: `substeps` BAOAB sub-steps (module docstring; seed 003 Def 287 with the
    geodesic drift exact). z, p, action [..., d] -> (z', p') [..., d]. With noise=False the O part
    is the friction decay p <- c1 p alone (the noise-free replay of the same system).

    The closing B of a sub-step and the opening B of the next act at the same z, so the force is
    evaluated once per sub-step; without friction the two A half-flows are one flow of length h.
    """
    _check_state(z, p, action, config.dim)
    applied = control_force(action, config)  # [..., d], constant over the env step
    return baoab_substeps(
        z,
        p,
        lambda x: applied - potential_grad(x, config),
        config.h,
        config.substeps,
        gamma=config.friction,
        temperature=config.temperature,
        generator=generator,
        noise=noise,
        max_norm=config.max_norm,
    )


def _as_tensor(x: Any, name: str) -> Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
    if not t.is_floating_point():
        t = t.to(DTYPE)
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains non-finite values")
    return t.to(DTYPE)


def simulate(
    z0: Tensor | np.ndarray,
    p0: Tensor | np.ndarray,
    actions: Tensor | np.ndarray,
    config: PoincareDiskConfig | None = None,
    *,
    noise: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Roll the true system out from a batch of starts under a batch of action sequences.

    z0, p0 [B, d]; actions [B, T, d] in [-1, 1] (clipped). Returns (z_traj, p_traj), each
    [B, T + 1, d] float64, index 0 the start. noise=False replays the same starts and actions
    without noise (friction kept): deterministic, for scoring world models noise-free. With
    noise=True the draws come from `generator` (torch's global RNG if None); a batch of one
    with the env's generator reproduces the env's `step` exactly (same function, same draws).
    """
    config = config or PoincareDiskConfig()
    z, p, acts = _as_tensor(z0, "z0"), _as_tensor(p0, "p0"), _as_tensor(actions, "actions")
    if (
        z.dim() != 2
        or acts.dim() != 3
        or acts.shape[0] != z.shape[0]
        or acts.shape[2] != z.shape[1]
    ):
        raise ValueError(
            f"expected z0, p0 [B, d] and actions [B, T, d], got {tuple(z.shape)}, "
            f"{tuple(p.shape)} and {tuple(acts.shape)}"
        )
    _check_state(z, p, None, config.dim)
    if (z.norm(dim=-1) >= 1.0).any():
        raise ValueError("z0 must lie inside the unit ball")
    z = project(z, config.max_norm)
    zs, ps = [z], [p]
    for t in range(acts.shape[1]):
        z, p = integrate_step(z, p, acts[:, t], config, noise=noise, generator=generator)
        zs.append(z)
        ps.append(p)
    return torch.stack(zs, dim=1), torch.stack(ps, dim=1)  # [B, T + 1, d] each


def reward_fn(z: Tensor, z_next: Tensor, action: Tensor, config: PoincareDiskConfig) -> Tensor:
    """r = d(z, goal) - d(z', goal) - effort_cost |clip(a)|^2; [..., d] -> [...]."""
    goal = _landscape(config)[3].to(z.dtype)
    progress = dist(z, goal) - dist(z_next, goal)
    return progress - config.effort_cost * sqnorm(action.clamp(-1.0, 1.0), keepdim=False)


def sample_start(
    n: int, config: PoincareDiskConfig, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """n starts: z0 uniform in the Euclidean ball of radius start_radius, p0 = lambda(z0)
    start_speed xi (velocity G^-1 p0 of metric norm ~ start_speed per coordinate). -> [n, d]."""
    d = config.dim
    direction = torch.randn(n, d, generator=generator, dtype=DTYPE)
    direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    radius = config.start_radius * torch.rand(n, 1, generator=generator, dtype=DTYPE) ** (1.0 / d)
    z0 = radius * direction  # [n, d]
    xi = torch.randn(n, d, generator=generator, dtype=DTYPE)
    p0 = conformal_factor(z0) * config.start_speed * xi  # [n, d]
    return z0, p0


class PoincareDiskEnv(gym.Env):
    """`PoincareDisk-v0`: steer the Langevin particle on B^d toward a goal.

    Observation [z, p] (float32, 2d); action a in [-1, 1]^d (force F = force_gain a); reward =
    decrease of the hyperbolic distance to the goal minus effort_cost |a|^2; no termination
    (the registration's TimeLimit truncates, 200 steps by default). Keyword arguments: `preset`
    ("default" | "conservative"), `config` (a PoincareDiskConfig), any config field as an
    override, and `noise` (False: the same system with the noise switched off). `reset(options=
    {"state": (z, p)})` starts from a given state. info carries the true energy and distance.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        render_mode: str | None = None,
        *,
        preset: str = "default",
        config: PoincareDiskConfig | None = None,
        noise: bool = True,
        **overrides: Any,
    ):
        if config is None:
            config = make_config(preset, **overrides)
        elif overrides:
            config = dataclasses.replace(config, **overrides)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}"
            )
        self.config = config
        self.noise = bool(noise)
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": max(1, round(1.0 / config.dt))}
        d = config.dim
        high = np.concatenate([np.ones(d), np.full(d, np.inf)]).astype(np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(d,), dtype=np.float32)
        self._generator = torch.Generator()
        self._generator.manual_seed(0)
        self._z = torch.zeros(1, d, dtype=DTYPE)
        self._p = torch.zeros(1, d, dtype=DTYPE)
        self._background: np.ndarray | None = None

    # -- state ---------------------------------------------------------------------------
    @property
    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """The float64 (z, p), each [d] (the observation is its float32 rounding)."""
        return self._z[0].numpy().copy(), self._p[0].numpy().copy()

    @property
    def generator(self) -> torch.Generator:
        """The torch generator of the thermal noise (seeded from the env's RNG at reset)."""
        return self._generator

    def _obs(self) -> np.ndarray:
        return torch.cat([self._z[0], self._p[0]]).numpy().astype(np.float32)

    def _info(self) -> dict[str, float]:
        goal = _landscape(self.config)[3]
        return {
            "energy": float(true_energy(self._z, self._p, self.config)[0]),
            "distance_to_goal": float(dist(self._z[0], goal)),
        }

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._generator.manual_seed(int(self.np_random.integers(0, 2**63 - 1)))
        state = (options or {}).get("state")
        if state is None:
            self._z, self._p = sample_start(1, self.config, self._generator)
        else:
            z, p = (_as_tensor(x, "state").reshape(1, -1) for x in state)
            _check_state(z, p, None, self.config.dim)
            if z.norm() >= 1.0:
                raise ValueError("options['state'] position must lie inside the unit ball")
            self._z, self._p = project(z, self.config.max_norm), p
        return self._obs(), self._info()

    def step(self, action: np.ndarray):
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (self.config.dim,):
            raise ValueError(f"action must have shape ({self.config.dim},), got {np.shape(action)}")
        if not np.isfinite(a).all():
            raise ValueError(f"action must be finite, got {a}")
        a_t = torch.from_numpy(a).reshape(1, -1)
        z_prev = self._z
        with torch.no_grad():
            self._z, self._p = integrate_step(
                self._z, self._p, a_t, self.config, noise=self.noise, generator=self._generator
            )
            reward = float(reward_fn(z_prev, self._z, a_t, self.config)[0])
        return self._obs(), reward, False, False, self._info()

    # -- rendering -----------------------------------------------------------------------
    def render(self) -> np.ndarray | None:
        """rgb_array: the disk shaded by Phi (first two coordinates, others 0), the goal (red
        ring) and the particle (white dot); uint8 [size, size, 3]."""
        if self.render_mode != "rgb_array":
            return None
        size = 200
        if self._background is None:
            self._background = _potential_image(self.config, size)
        img = self._background.copy()
        goal = np.asarray(self.config.goal, dtype=np.float64)
        z = self._z[0].numpy()
        _draw_disk(img, _to_pixel(goal, size), 6, (220, 40, 40), ring=True)
        _draw_disk(img, _to_pixel(z, size), 5, (255, 255, 255), ring=False)
        return img


def _to_pixel(point: np.ndarray, size: int) -> tuple[float, float]:
    x = point[0] if point.size > 0 else 0.0
    y = point[1] if point.size > 1 else 0.0
    return (x + 1) * 0.5 * (size - 1), (1 - y) * 0.5 * (size - 1)  # (col, row)


def _draw_disk(img: np.ndarray, center: tuple[float, float], radius: float, rgb, ring: bool):
    rows, cols = np.mgrid[0 : img.shape[0], 0 : img.shape[1]]
    r = np.hypot(cols - center[0], rows - center[1])
    mask = (np.abs(r - radius) < 1.5) if ring else (r <= radius)
    img[mask] = rgb


def _potential_image(config: PoincareDiskConfig, size: int) -> np.ndarray:
    from matplotlib import colormaps  # lazy: only rendering needs matplotlib

    axis = np.linspace(-1.0, 1.0, size)
    x, y = np.meshgrid(axis, -axis)  # row 0 is y = +1
    inside = x**2 + y**2 < 0.995**2
    grid = np.zeros((size, size, config.dim))
    grid[..., 0] = x
    if config.dim > 1:
        grid[..., 1] = y
    grid[~inside] = 0.0
    with torch.no_grad():
        phi = potential(torch.from_numpy(grid), config).numpy()
    lo, hi = np.quantile(phi[inside], [0.01, 0.9])
    shade = np.clip((phi - lo) / max(hi - lo, 1e-12), 0.0, 1.0)
    img = (colormaps["viridis"](shade)[..., :3] * 255).astype(np.uint8)
    img[~inside] = 255
    return img
