"""Langevin dynamics on the Poincare ball with position-dependent mass G(z) = lambda(z)^2 I, and
its Boris-BAOAB splitting (seed 003 Def 278, Def 287, Thm 103), as pure functions.

    H(z, p) = Phi(z) + K(z, p),   K = 1/2 p^T G^-1(z) p
    dz = G^-1 p dt
    dp = (-dPhi/dz - dK/dz + F) dt - gamma p dt + sqrt(2 gamma T) G^{1/2} dW

Its stationary density (F = 0) is rho(z, p) ~ exp(-H/T), whose z-marginal is
lambda(z)^d exp(-Phi(z)/T) (the Gaussian integral over p contributes sqrt(det G) = lambda^d).

One BAOAB step of size h:
    B  p += h/2 (-dPhi/dz + F)                  kick by the potential (and external) force
       (Boris: with a Lorentz force F_L z', half the force, the rotation `boris_rotation` for
       h/2, the other half; `baoab`'s `rotate`)
    A  (z, p) <- geodesic_flow(z, p, h/2)       exact flow of K: carries -dK/dz exactly
    O  p <- c1 p + c2 lambda(z) xi              exact OU: c1 = e^(-gamma h), c2 = sqrt((1-c1^2) T)
    A, B as above.

Seed 003's Def 287 kicks with grad Phi only and drifts z += h/2 G^-1 p: without the
kinetic-energy gradient it does not target the Gibbs density (docs/architecture.md, where the
seeds are wrong). The geodesic term must be carried exactly once; `drift` selects how, so that
tests can show both the right choice and what goes wrong:
    "geodesic"  A is the exact geodesic flow (the default, closed form)
    "kick"      A is the Euclidean drift z += h/2 G^-1 p, and -dK/dz joins the kick (explicit, O(h))
    "none"      Euclidean drift and no -dK/dz: the seed listing's step (wrong stationary law)
    "doubled"   geodesic flow AND -dK/dz in the kick (the term counted twice; also wrong)

One composition, `baoab`, with its substeps passed in as callables (kick, drift, thermostat); it
is the step of every integrator in the project: `baoab_step` (this module's reference),
`baoab_rollout` / `baoab_substeps` (the disk environment's simulator) and the geodesic world
model's step (world_model/geodesic/integrator.py). The position terms of the closing kick (what
a kick at z needs that does not depend on p) are the next step's opening ones: `baoab` returns
them as an explicit carry, and a rollout passes them back in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, TypeVar

import torch
from torch import Tensor

from . import poincare as P

__all__ = [
    "Drift",
    "ou_coefficients",
    "ou_step",
    "drift_step",
    "boris_rotation",
    "baoab",
    "baoab_rollout",
    "baoab_step",
    "baoab_substeps",
    "hamiltonian",
]

Drift = Literal["geodesic", "kick", "none", "doubled"]
ForceFn = Callable[[Tensor], Tensor]  # z [..., d] -> -dPhi/dz [..., d] (plus any external force)
T = TypeVar("T")  # the position terms a kick at z needs (a force, or a model's cached terms)
R = TypeVar("R")  # what the first half-drift hands to the second


def ou_coefficients(gamma: float | Tensor, h: float, temperature: float | Tensor):
    """c1 = exp(-gamma h), c2 = sqrt((1 - c1^2) T)  (seed 003 Thm 103, thermalisation)."""
    if isinstance(gamma, Tensor) or isinstance(temperature, Tensor):
        gamma = torch.as_tensor(gamma)
        c1 = torch.exp(-gamma * h)
        # 1 - c1^2 = -expm1(-2 gamma h) keeps its digits at small gamma; the floor keeps the
        # gradient finite where gamma reaches 0 (sqrt'(0) is infinite; the floor passes none)
        var = (-torch.expm1(-2 * gamma * h) * temperature).clamp_min(1e-30)
        return c1, torch.sqrt(var)
    c1 = math.exp(-gamma * h)
    return c1, math.sqrt(max((1 - c1 * c1) * temperature, 0.0))


def ou_step(z: Tensor, p: Tensor, c1, c2, noise: Tensor | None) -> Tensor:
    """Exact OU update of the momentum at fixed z, mass G = lambda^2 I (seed 003 Def 287 step 3):
    p <- c1 p + c2 lambda(z) xi. noise = None gives the conditional mean c1 p (deterministic mode).
    Leaves N(0, T G(z)) invariant. z, p, noise [..., d] -> [..., d]."""
    if noise is None:
        return c1 * p
    return c1 * p + c2 * P.conformal_factor(z) * noise


def drift_step(z: Tensor, p: Tensor, t: float, drift: Drift) -> tuple[Tensor, Tensor]:
    """The A step for time t: exact geodesic flow, or a Euclidean drift of z at fixed p."""
    if drift in ("geodesic", "doubled"):
        return P.geodesic_flow(z, p, t)
    return z + t * p * P.inverse_metric_factor(z), p


def boris_rotation(z: Tensor, p: Tensor, two_form: Tensor, t: float) -> Tensor:
    """The Lorentz force's part of a kick of time t at fixed z, integrated by Boris' rotation
    (seed 003 Def 278's beta_curl G^-1 F z' term, in the momentum): dp/dt = F G^-1(z) p with F a
    2-form (antisymmetric [..., d, d]; beta_curl inside it), so with G = lambda^2 I,
    dp/dt = Omega p, Omega = F / lambda(z)^2 antisymmetric. The implicit midpoint rule
    p' - p = t Omega (p + p') / 2 gives the Cayley transform p' = (I - A)^-1 (I + A) p,
    A = t Omega / 2: orthogonal, so |p|_G (= |p| / lambda at fixed z) is preserved exactly, as
    the exact flow does (a magnetic force does no work). Solved as the SPD system
    (I - A^2) p' = (I + A)^2 p (I - A^2 = I + A^T A; (I - A) and (I + A) commute) by Cholesky:
    no LU. That form squares A's condition: in float32 the identity is lost beside A^2 once
    |A| ~ 1e3 (a rotation by nearly pi per half-kick; a learned curl's F is bounded by its
    weights). z, p [..., d], two_form [..., d, d] -> p' [..., d]."""
    a = (0.5 * t) * P.inverse_metric_factor(z).unsqueeze(-1) * two_form  # A [..., d, d]
    ap = (a @ p.unsqueeze(-1)).squeeze(-1)  # A p
    rhs = p + 2.0 * ap + (a @ ap.unsqueeze(-1)).squeeze(-1)  # (I + A)^2 p
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    factor = torch.linalg.cholesky(eye - a @ a)  # I + A^T A: eigenvalues >= 1
    return torch.cholesky_solve(rhs.unsqueeze(-1), factor).squeeze(-1)


def baoab(
    z: Tensor,
    p: Tensor,
    h: float,
    position: Callable[[Tensor], T],
    kick: Callable[[Tensor, Tensor, T], Tensor],
    drift: Callable[[Tensor, Tensor, float, T | None, R | None], tuple[Tensor, Tensor, R | None]],
    thermostat: Callable[[Tensor, Tensor], Tensor] | None,
    terms: T | None = None,
    rotate: Callable[[Tensor, Tensor, float, T], Tensor] | None = None,
) -> tuple[Tensor, Tensor, T]:
    """One B-A-O-A-B step of size h, composed from its substeps (seed 003 Def 287,
    docs/seed_map.md; module doc). z, p [..., d].

    position(z) -> terms    what a kick at z needs that does not depend on p (a force, or a
                            model's cached terms). The closing kick's terms at z' are the next
                            step's opening ones: they are returned, and a rollout passes them
                            back as `terms` (None: evaluated at z).
    kick(z, p, terms) -> F  the kick's force covector [..., d]; B is p <- p + h/2 F.
    drift(z, p, t, terms, reuse) -> (z', p', reuse')
                            the A step for time t (with any projection). The first half-drift
                            gets the position terms at z and reuse None; the second gets terms
                            None and what the first returned as reuse' (a quantity a drift
                            reads once per step); a drift with nothing to hand on returns None.
    thermostat(z, p) -> p   the O step; None: O is the identity, and the two half-drifts are
                            one drift of length h (exact for a flow, by its group property).
    rotate(z, p, t, terms) -> p
                            the velocity-dependent (Lorentz) part of the kick for time t
                            (`boris_rotation`); given, each B is Boris' kick: half the force,
                            the rotation for h/2, the other half. None: B is p + h/2 F.

    Returns (z', p', position(z'))."""

    def half_kick(x: Tensor, q: Tensor, terms: T) -> Tensor:  # B
        f = kick(x, q, terms)
        if rotate is None:
            return q + 0.5 * h * f
        return rotate(x, q + 0.25 * h * f, 0.5 * h, terms) + 0.25 * h * f

    if terms is None:
        terms = position(z)
    p = half_kick(z, p, terms)  # B
    if thermostat is None:
        z, p, _ = drift(z, p, h, terms, None)  # A A (O = identity)
    else:
        z, p, reuse = drift(z, p, 0.5 * h, terms, None)  # A
        p = thermostat(z, p)  # O
        z, p, _ = drift(z, p, 0.5 * h, None, reuse)  # A
    terms = position(z)
    p = half_kick(z, p, terms)  # B
    return z, p, terms


def baoab_rollout(
    z: Tensor,
    p: Tensor,
    h: float,
    n_steps: int,
    position: Callable[[Tensor], T],
    kick: Callable[[Tensor, Tensor, T], Tensor],
    drift: Callable[[Tensor, Tensor, float, T | None, R | None], tuple[Tensor, Tensor, R | None]],
    thermostat: Callable[[Tensor, Tensor], Tensor] | None,
    terms: T | None = None,
) -> tuple[Tensor, Tensor, T | None]:
    """`n_steps` steps of :func:`baoab`, carrying each step's closing position terms into the
    next step's opening kick (one position evaluation per step). `terms`: the position terms at
    z when known. Returns (z', p', the position terms at z'; `terms` when n_steps = 0)."""
    for _ in range(n_steps):
        z, p, terms = baoab(z, p, h, position, kick, drift, thermostat, terms)
    return z, p, terms


def _projected_drift(drift: Drift, max_norm: float):
    """drift_step followed by the projection to |z| <= max_norm, as a baoab drift."""

    def step(z: Tensor, p: Tensor, t: float, _terms, _reuse) -> tuple[Tensor, Tensor, None]:
        z, p = drift_step(z, p, t, drift)
        return P.project(z, max_norm), p, None

    return step


def baoab_step(
    z: Tensor,
    p: Tensor,
    force: ForceFn,
    h: float,
    gamma: float = 0.0,
    temperature: float = 0.0,
    noise: Tensor | None = None,
    drift: Drift = "geodesic",
    max_norm: float = 1 - 1e-5,
) -> tuple[Tensor, Tensor]:
    """One B-A-O-A-B step of size h for the Langevin SDE above (module doc). force(z) returns the
    conservative force -dPhi/dz (add external forces inside it). noise: standard normal [..., d]
    for the O step, or None for its mean. Positions are projected to |z| <= max_norm after each
    drift. z, p [..., d] -> (z, p) [..., d]."""
    c1, c2 = ou_coefficients(gamma, h, temperature)
    kinetic_kick = drift in ("kick", "doubled")  # -dK/dz joins the kick

    def kick(x: Tensor, q: Tensor, f: Tensor) -> Tensor:
        return f - P.kinetic_energy_grad(x, q) if kinetic_kick else f

    z, p, _ = baoab(
        z,
        p,
        h,
        force,
        kick,
        _projected_drift(drift, max_norm),
        lambda x, q: ou_step(x, q, c1, c2, noise),
    )
    return z, p


def baoab_substeps(
    z: Tensor,
    p: Tensor,
    force: ForceFn,
    h: float,
    n_steps: int,
    gamma: float = 0.0,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    noise: bool = True,
    max_norm: float = 1 - 1e-5,
) -> tuple[Tensor, Tensor]:
    """`n_steps` geodesic BAOAB steps of size h (the same map as repeating :func:`baoab_step`
    with drift="geodesic"), run by :func:`baoab_rollout` with two exact savings: the closing kick
    of a step and the opening kick of the next act at the same z, so force(z) is evaluated once
    per step (the carried position terms); and when the O step is the identity (gamma = 0) the
    two half-flows are one flow of length h (the flow's group property). Noise xi ~ N(0, I) is
    drawn from `generator` per step when noise and T > 0. z, p [..., d] -> (z, p) [..., d]."""
    c1, c2 = ou_coefficients(gamma, h, temperature)

    def thermostat(x: Tensor, q: Tensor) -> Tensor:
        xi = None
        if noise and c2 > 0.0:
            xi = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        return ou_step(x, q, c1, c2, xi)

    z, p, _ = baoab_rollout(
        z,
        p,
        h,
        n_steps,
        force,
        lambda _x, _q, f: f,
        _projected_drift("geodesic", max_norm),
        thermostat if gamma > 0.0 else None,
    )
    return z, p


def hamiltonian(z: Tensor, p: Tensor, potential: Callable[[Tensor], Tensor]) -> Tensor:
    """H = Phi(z) + 1/2 p^T G^-1 p. potential(z) [..., d] -> [..., 1] or [...]."""
    phi = potential(z)
    if phi.dim() == z.dim() - 1:
        phi = phi.unsqueeze(-1)
    return phi + P.kinetic_energy(z, p)  # [..., 1]
