"""Configuration of one covariant attention head (seed 003; docs/seed_map.md, section
"Covariant attention head, screening, diagnostics 67-70"): the per-head shape
(CovariantAttentionConfig) and the options every head of a model shares (HeadOptions: gauge
couplings, Wilson-line mode, temperature, quadratic query terms, attention kernel, screening and
chirality), each default written once. Each of the seed's components can be switched off here
for ablations (README.md, "Ablations"): Wilson lines (`wilson = "none"`), the metric temperature
(`temperature = "constant"`) and area-law screening (`screening = False`).

A leaf module: it imports nothing from the head (world_model/attention/covariant.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from geometry.wilson_lines import WilsonMode
from world_model.options import check_choices

from .kernel_matrix import KrrKernel

__all__ = [
    "ChristoffelMode",
    "AttentionKernel",
    "TemperatureMode",
    "AreaProxy",
    "NO_TRANSPORT",
    "HeadWilsonMode",
    "HeadOptions",
    "CovariantAttentionConfig",
]

ChristoffelMode = Literal["full", "factorized", "poincare"]
AttentionKernel = Literal["softmax", "inverse_distance", "krr"]
TemperatureMode = Literal["metric", "constant"]
AreaProxy = Literal["conformal", "geodesic"]

NO_TRANSPORT = "none"  # the Wilson-line ablation: identity lines, no parallel transport
HeadWilsonMode = Literal["none", WilsonMode]  # NO_TRANSPORT or a mode of geometry.wilson_lines


@dataclass
class HeadOptions:
    """The options every covariant attention head of a model shares: gauge fields and couplings,
    Wilson lines, temperature, quadratic query terms, attention kernel, screening and chirality.
    The defaults are the geodesic world model's (its `[dynamics.head]` section)."""

    _where: ClassVar[str] = "HeadOptions"  # how the errors name this table

    d_k: int = 16
    """size of each head's gauge fields Q, K, V (a multiple of 4 n_colors)"""
    n_colors: int = 2
    """N_f of the SU(N_f) binding factor"""
    g_s: float = 1.0
    """SU(N_f)_C coupling (Def 279)"""
    g_2: float = 0.5
    """SU(2)_L coupling"""
    g_1: float = 0.3
    """U(1)_Y coupling"""
    hypercharge: float = 1.0
    """U(1)_Y charge of the fields"""
    connection_init_std: float = 0.1
    """std of the learned connection coefficients c0, c1 at initialisation"""
    wilson: HeadWilsonMode = "magnus4"
    """Wilson lines: first_order, exp, path_ordered (midpoint pieces, error O(segments^-2)) or
    magnus4 (fourth-order Magnus pieces, O(segments^-4)); node 67 reports the gauge error.
    none: no parallel transport (every line the identity; an ablation)"""
    segments: int = 12
    """pieces of a path_ordered or magnus4 Wilson line (docs/measurements.md: node 67 against
    cost per mode and segment count)"""
    temperature: TemperatureMode = "metric"
    """tau(z): metric (sqrt(d_k) / lambda(z), Thm 99) or constant (sqrt(d_k), the degenerate
    limit)"""
    christoffel: ChristoffelMode = "poincare"
    """quadratic query term: full, factorized or poincare (Def 283, 291, Prop 99)"""
    rank: int = 3
    """rank R of the factorized quadratic query terms (Def 291)"""
    kernel: AttentionKernel = "softmax"
    """attention kernel: softmax (covariant softmax, seed 003), inverse_distance (HIDA on the
    positions, seed 000) or krr (kernel ridge regression, seed 001)"""
    ida_eps: float = 0.01
    """eps of the inverse-distance kernel (d_H(z, z')^2 + eps)^-1"""
    krr_kernel: KrrKernel = "exp"
    """kernel of krr on the transported fields: exp, rbf, linear or cosine (seed 001)"""
    krr_lambda: float = 1.0
    """initial ridge lambda of krr (softplus(raw) + 1e-4, learned)"""
    string_tension: tuple[float, ...] = (1.0, 0.01)
    """initial area-law screening sigma per level, macro first (Prop 100)"""
    area: AreaProxy = "conformal"
    """screening area: conformal (lambda(z)^2 |z - z'|^2 / 2, Def 286) or geodesic (d_H^2 / 2)"""
    screening: bool = True
    """area-law screening of colour-charged entries (Def 286); False: no screening term in the
    logits and no string-tension parameter (an ablation; string_tension is then unused)"""
    chirality: float = 0.0
    """initial chiral mixing strength kappa (0: the chiral gate is the identity; learned)"""

    def __post_init__(self) -> None:
        self.string_tension = tuple(float(s) for s in self.string_tension)
        for name in ("d_k", "n_colors", "segments", "rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{self._where}.{name} must be an int >= 1, got {value!r}")
        if self.d_k % (4 * self.n_colors):
            raise ValueError(
                f"{self._where}.d_k = {self.d_k} must be a multiple of "
                f"4 * n_colors = {4 * self.n_colors} (C^n_colors (x) C^2 (x) C^m, realified)"
            )
        check_choices(self, self._where)
        if not isinstance(self.screening, bool):
            raise ValueError(f"{self._where}.screening must be a bool, got {self.screening!r}")
        if not (self.ida_eps > 0 and self.krr_lambda > 1e-4):
            raise ValueError(f"{self._where} needs ida_eps > 0 and krr_lambda > 1e-4")
        if not all(math.isfinite(s) and s >= 0 for s in self.string_tension):
            raise ValueError(f"{self._where}.string_tension must be finite and >= 0")
        for name in ("g_s", "g_2", "g_1", "hypercharge", "chirality", "connection_init_std"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{self._where}.{name} must be finite")
        if self.connection_init_std < 0:
            raise ValueError(f"{self._where}.connection_init_std must be >= 0")


@dataclass
class CovariantAttentionConfig:
    """One covariant attention head: its shape (what the owner computes per head) and the
    options it shares with the model's other heads (`options`, HeadOptions). Dimensions:

    d: ball dimension of positions; d_query / d_key / d_value: feature sizes of the query and
    of the bank's key / value features; d_out: output size; options.d_k: size of the gauge
    fields Q, K, V (R^{d_k} = realification of C^{n_colors} (x) C^2 (x) C^m, so
    d_k % (4 n_colors) == 0).
    """

    d: int
    d_query: int
    d_key: int
    d_value: int
    d_out: int
    n_levels: int = 2  # L + 1 hierarchy levels: 0 = macro ... L = texture
    query_level: int = 0  # default level of this head's queries (kick heads 0, drift heads L)
    query_velocity: bool = True  # queries carry a velocity v (Gamma(z)[v, v] term of 'poincare')
    d_velocity_features: int = 0  # F of the velocity features x_v (0: no W_Qv term)
    position_velocity: bool = False  # the optional W_Qzv(z, v) term
    options: HeadOptions = field(default_factory=HeadOptions)

    def __post_init__(self) -> None:
        for name in ("d", "d_query", "d_key", "d_value", "d_out"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"CovariantAttentionConfig.{name} must be an int >= 1, got {value}"
                )
        if not isinstance(self.options, HeadOptions):
            raise ValueError("CovariantAttentionConfig.options must be a HeadOptions")
        if not isinstance(self.d_velocity_features, int) or self.d_velocity_features < 0:
            raise ValueError("CovariantAttentionConfig.d_velocity_features must be an int >= 0")
        if not isinstance(self.n_levels, int) or self.n_levels < 1:
            raise ValueError("CovariantAttentionConfig.n_levels must be an int >= 1")
        if len(self.options.string_tension) != self.n_levels:
            raise ValueError(
                f"CovariantAttentionConfig: options.string_tension needs one sigma per level "
                f"({self.n_levels}), got {len(self.options.string_tension)}"
            )
        if not 0 <= self.query_level < self.n_levels:
            raise ValueError(
                f"CovariantAttentionConfig.query_level must lie in [0, {self.n_levels - 1}]"
            )
