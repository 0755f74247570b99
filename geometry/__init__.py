"""Pure math on tensors: the only place formulas live (DESIGN.md, Conventions).

- :mod:`geometry.poincare`  Poincare ball: conformal factor, distance, exp/log maps, Mobius
  operations, parallel transport, Christoffel contraction, kinetic energy, geodesic flow.
- :mod:`geometry.sphere`    great-circle distance and the ball -> sphere maps of seed 000 §8.2.
- :mod:`geometry.gauge`     gauge generators, connections, Wilson lines, gauge transformations.
- :mod:`geometry.su2`       complex Pauli matrices, chiral projector, commitment strength.
- :mod:`geometry.screening` area-law proxy, screening factor, confinement radius (seed 003 §8).
- :mod:`geometry.langevin`  Langevin dynamics with mass G = lambda^2 I and its BAOAB splitting.
"""

from . import gauge, langevin, poincare, screening, sphere, su2

__all__ = ["gauge", "langevin", "poincare", "screening", "sphere", "su2"]
