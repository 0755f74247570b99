"""Hyperbolic Curvature Compression (HCC), seed 000 §6 (M5): Poincare-ball keys stored as
bit-packed polar codes.

    packed = compress(keys, bits_dir=4, bits_radius=6)   # keys [..., n, d] in the ball
    packed.nbytes                                        # real bytes of the packed codes
    keys_hat = packed.decompress()                       # [..., n, d], inside the ball

The maths (grids, renormalisation, the bound that holds, bit packing) is in
geometry/quantize.py, whose docstring lists what is wrong in the seed's quantiser and
Theorems 6.1-6.2. The packed object holds one uint8 tensor: d b + b_r bits per key, keys after
one another with no per-key padding, so nbytes = ceil(n (d b + b_r) / 8) (plus the few Python
fields of the header, which do not grow with n). Values are not compressed (seed §12.1).
Measured compression ratios, errors against the bounds and Dense-HIDA retrieval on compressed
keys: benchmarks/memory_modules.py, docs/measurements.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from geometry import quantize, sphere

__all__ = ["HCCConfig", "CompressedKeys", "compress", "suggested_range"]


def suggested_range(dim: int, spread: float = 4.0) -> float:
    """min(1, spread / sqrt(d)): a coordinate range that covers `spread` standard deviations of
    the coordinates of a uniformly random direction (each has variance 1/d)."""
    return min(1.0, spread / math.sqrt(dim))


@dataclass
class HCCConfig:
    """HCC bit widths and grids (seed 000 §6; geometry/quantize.py).

    Attributes:
        bits_dir: b, bits per direction coordinate (>= 1; >= 2 for grid "zero").
        bits_radius: b_r, bits of the radius code (>= 1; 2^b_r cells of [0, 1)).
        grid: "seed" (2^b levels on [-a, a], no zero) or "zero" (2^b - 1 levels with 0).
        direction_range: a in (0, 1]: direction coordinates are clipped to [-a, a] before
            coding; 1 = the seed's range; None (default) = :func:`suggested_range` of the keys'
            dimension, min(1, 4/sqrt(d)) (measured: at d = 256, b = 4, the mean squared error
            falls from 0.088 to 0.0071 and retrieval on exact queries from 0.88 to 1.0 of 1;
            docs/measurements.md).
    """

    bits_dir: int = 4
    bits_radius: int = 6
    grid: str = "seed"
    direction_range: float | None = None

    def __post_init__(self):
        for name in ("bits_dir", "bits_radius"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 16):
                raise ValueError(f"HCCConfig.{name} must be an integer in [1, 16], got {v!r}")
        if self.grid not in quantize.DIRECTION_GRIDS:
            raise ValueError(
                f"HCCConfig.grid must be one of {quantize.DIRECTION_GRIDS}, got {self.grid!r}"
            )
        if self.grid == "zero" and self.bits_dir < 2:
            raise ValueError("HCCConfig.grid 'zero' needs bits_dir >= 2 (one bit has no zero)")
        a = self.direction_range
        if a is not None and not (isinstance(a, (int, float)) and 0.0 < a <= 1.0):
            raise ValueError(f"HCCConfig.direction_range must lie in (0, 1], got {a!r}")


@dataclass(frozen=True)
class CompressedKeys:
    """Bit-packed HCC codes of keys of shape `shape` (see :func:`compress`)."""

    data: Tensor  # uint8 [nbytes]: per key, d direction codes of b bits then b_r radius bits
    shape: tuple[int, ...]  # the keys' shape [..., n, d]
    config: HCCConfig
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the packed codes."""
        return self.data.numel()

    @property
    def bits_per_key(self) -> int:
        """d b + b_r."""
        return self.shape[-1] * self.config.bits_dir + self.config.bits_radius

    def compression_ratio(self, bytes_per_coordinate: int = 4) -> float:
        """Bytes of the uncompressed keys (float32 by default) over nbytes."""
        return math.prod(self.shape) * bytes_per_coordinate / max(self.nbytes, 1)

    def widths(self) -> Tensor:
        d, cfg = self.shape[-1], self.config
        return torch.tensor([cfg.bits_dir] * d + [cfg.bits_radius], dtype=torch.int64)

    def decompress(self) -> Tensor:
        """Keys r_hat u_hat [..., n, d] in `dtype`, strictly inside the ball."""
        d, cfg = self.shape[-1], self.config
        count = math.prod(self.shape[:-1])
        codes = quantize.unpack_bits(self.data, self.widths(), count)  # [count, d + 1]
        u_hat = quantize.dequantize_direction(codes[:, :d], cfg.bits_dir, cfg.grid, self.dtype)
        r_hat = quantize.dequantize_radius(codes[:, d], cfg.bits_radius, self.dtype)  # [count]
        return (r_hat.unsqueeze(-1) * u_hat).reshape(self.shape)


def compress(
    keys: Tensor,
    bits_dir: int = HCCConfig.bits_dir,
    bits_radius: int = HCCConfig.bits_radius,
    *,
    grid: str = HCCConfig.grid,
    direction_range: float | None = HCCConfig.direction_range,
) -> CompressedKeys:
    """HCC codes of keys [..., n, d] in the open unit ball, bit-packed (module docstring);
    direction_range None = :func:`suggested_range` (see :class:`HCCConfig`).

    A key of norm >= 1 is refused (one ValueError): the radius grid covers [0, 1). A zero key
    has no direction; it decodes to r_hat = 2^-(b_r + 1) times the decoded default direction.
    """
    if keys.dim() < 1 or not torch.isfinite(keys).all():
        raise ValueError("compress: keys must be a finite tensor [..., n, d]")
    d = keys.shape[-1]
    a = suggested_range(d) if direction_range is None else direction_range
    cfg = HCCConfig(bits_dir, bits_radius, grid, a)
    r = keys.norm(dim=-1)  # [..., n]
    if r.numel() and r.max().item() >= 1.0:
        raise ValueError(f"compress: keys must lie in the open unit ball; max |k| = {r.max():.6g}")
    flat_r = r.reshape(-1)
    flat_u = sphere.normalize(keys.reshape(-1, d))
    codes = torch.cat(
        [
            quantize.quantize_direction(flat_u, bits_dir, grid, a),  # [count, d]
            quantize.quantize_radius(flat_r, bits_radius).unsqueeze(-1),  # [count, 1]
        ],
        dim=-1,
    )
    widths = torch.tensor([bits_dir] * d + [bits_radius], dtype=torch.int64)
    data = quantize.pack_bits(codes.cpu(), widths)
    return CompressedKeys(data=data, shape=tuple(keys.shape), config=cfg, dtype=keys.dtype)
