"""Pure math on tensors: the only place formulas live (docs/architecture.md, "Layers").

- :mod:`geometry.poincare`  Poincare ball: conformal factor, distance, exp/log maps, Mobius
  operations, parallel transport, Christoffel contraction, kinetic energy, geodesic flow.
- :mod:`geometry.sphere`    great-circle distance and the ball -> sphere maps of seed 000 §8.2.
- :mod:`geometry.lie_algebra` the gauge group's algebra: Gell-Mann matrices, realification,
  generators of SU(N_f) x SU(2) x U(1), the group with its couplings, structure constants.
- :mod:`geometry.group_exponential` the algebra's exponentials in closed form and their VJPs.
- :mod:`geometry.wilson_lines` connections and Wilson lines (four modes, lines to the origin,
  hierarchical cells, closed-form lines in the group and their VJPs).
- :mod:`geometry.gauge_transforms` gauge transformations acting on a connection (node 67).
- :mod:`geometry.su2`       complex Pauli matrices, chiral projector, commitment strength.
- :mod:`geometry.doublet`   the realified doublet layout, the chiral gate and its VJP, the
  bilinear contractions of the covariant head's query (seed 003 Def 283-285).
- :mod:`geometry.screening` area-law proxy, screening factor, confinement radius (seed 003 §8).
- :mod:`geometry.potentials` the confining potential and force, Gaussian wells in d_H.
- :mod:`geometry.quantize`  polar quantisation of ball keys and bit packing (seed 000 §6, HCC).
- :mod:`geometry.tables`    constant tables built once per key, read as tensors under torch.compile.
- :mod:`geometry.langevin`  Langevin dynamics with mass G = lambda^2 I and its BAOAB splitting
  (one composition, `baoab`, for the model's step and the disk's simulator).
"""

from . import (
    doublet,
    gauge_transforms,
    group_exponential,
    langevin,
    lie_algebra,
    poincare,
    potentials,
    quantize,
    screening,
    sphere,
    su2,
    tables,
    wilson_lines,
)

__all__ = [
    "doublet", "gauge_transforms", "group_exponential", "langevin", "lie_algebra", "poincare",
    "potentials", "quantize", "screening", "sphere", "su2", "tables", "wilson_lines",
]  # fmt: skip
