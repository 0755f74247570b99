"""GeodesicCrossAttention: the world model as one Boris-BAOAB step of latent Langevin dynamics on
the Poincare ball, written as covariant attention heads (seed 003 Def 287, docs/seed_map.md;
layers and data flow: docs/architecture.md).

Latent state (z, p): a position z in the ball B^d (|z| <= max_norm) and a momentum covector p at
z; mass G(z) = lambda(z)^2 I. One environment step of length h (geometry.langevin.baoab, with
the model's substeps passed in):

    B  p <- p + h/2 (F_attn(z) + F_conf(z) + F_ctrl(z, a))   kick head over the force bank
    A  (z, p) <- drift(z, p, h/2)                            drift head over the correction bank
    O  p <- c1 p + c2 lambda(z) xi                           exact OU, c1 = e^(-gamma h),
                                                             c2 = sqrt((1 - c1^2) T_c)
    A, B as above.

- Kick (Prop 101, keys as a gradient bank): F_attn = -grad Phi of the kick head's scalar read-out
  (force = 'potential'), or lambda(z) W(attention output), the head's output read as a force in
  an orthonormal frame (force = 'field'); F_conf = -kappa grad(d_H(0, z)^2 / 2)
  (geometry.potentials.confining_force), a known confining term with learned kappa >= 0 (a
  softmax-weighted force is bounded, so a learned model would otherwise confine weakly near the
  boundary); F_ctrl(z, a) the action's control force (a covector: linear in a, plus an optional
  MLP gain of (z, log_0 z)). Optionally (potential_wells) the kick also carries the force of
  learned Gaussian wells in hyperbolic distance (geometry.potentials.gaussian_wells).
- Drift (Prop 102, values as displacement corrections): the geodesic flow with an attention
  correction delta to the velocity: z' = exp_z(t (v + delta)), v = G^-1 p, with v parallel-
  transported to z' and p' = G(z') v'. With delta = 0 this is exactly
  geometry.poincare.geodesic_flow. The correction is read once per step, at the first
  half-drift's start, and reused by the second.
- **The geodesic term is carried exactly once, by the drift.** The seed's steps kick with grad Phi
  and drift z += h/2 G^-1 p; with a position-dependent mass that misses -dK/dz and does not target
  the Gibbs density (docs/architecture.md, where the seeds are wrong; tests/geometry/
  test_langevin.py measures it). Here the drift is the exact kinetic flow (exp map + parallel
  transport), and the kick never adds -dK/dz: the model is geometry.langevin.baoab_step with
  attention forces (tests/world_model/test_geodesic.py checks both, and that the term is not
  doubled).
- O: closed-form OU at a learned friction gamma = relu(raw) (zero is reachable) and a fixed
  temperature T_c. **Stochastic in training** (`next(..., stochastic=True)` draws xi ~ N(0, I));
  **deterministic when planning** (`stochastic=False` takes the OU mean c1 p). An optional learned
  thermostat head adds a residual read from a bank of fresh noise vectors (zero in the mean).

The two kicks use one head and the two drifts another, and the closing kick's position terms
(attention force, Wilson lines, control gain M(z)) at z_{t+1} are the next step's opening ones:
the integrator returns them as an explicit carry, and GeodesicDynamics.next hands it on in the
returned state's `carry` field (a StepCarry, used only with the context it was computed for).

Modules: `config` (GeodesicConfig and its sections), `context` (GeodesicContext and the bank
assembly), `integrator` (GeodesicCrossAttention: the BAOAB substeps as heads), `dynamics`
(GeodesicState, GeodesicDynamics), `reports` (nodes 67-70 and the logged diagnostics),
`head_pass` (one pass of the kick and drift heads at some states) and `head_figures` (the numbers
the diagnose figures read of a pass).
"""

from geometry.potentials import confining_force

from .config import (
    ContextConfig,
    GeodesicConfig,
    GeodesicHeadOptions,
    IntegratorConfig,
    migrate_flat_dynamics,
)
from .context import GeodesicContext
from .dynamics import GeodesicDynamics, GeodesicState, StepCarry
from .integrator import GeodesicCrossAttention, PositionTerms

__all__ = [
    "GeodesicState",
    "StepCarry",
    "PositionTerms",
    "GeodesicConfig",
    "GeodesicHeadOptions",
    "IntegratorConfig",
    "ContextConfig",
    "migrate_flat_dynamics",
    "GeodesicContext",
    "GeodesicCrossAttention",
    "GeodesicDynamics",
    "confining_force",
]
