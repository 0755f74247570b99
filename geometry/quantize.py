"""Polar quantisation of Poincare-ball keys and bit packing, as pure functions (seed 000 §6, HCC).

A key k = r u (r = |k| in [0, 1), u on S^{d-1}) is coded as one radius code of b_r bits and d
direction codes of b bits each. What the seed's quantiser gets wrong, and what is done here
(docs/seed_map.md, the GeoResolver memory rows; measured in docs/measurements.md):

- radius: the seed's grid round(r 2^b_r) / 2^b_r has 2^b_r + 1 levels {0, 1/2^b_r, ..., 1} (so
  b_r + 1 bits) and puts r = 1, the boundary, on the grid. Here the 2^b_r cells of [0, 1) are
  coded by their midpoints (i + 1/2) / 2^b_r: exactly b_r bits, |r - r_hat| <= 2^-(b_r + 1),
  r_hat <= 1 - 2^-(b_r + 1) < 1.
- direction: the seed's grid round((u + 1)/2 (2^b - 1)) / (2^b - 1) * 2 - 1 ("seed": 2^b levels
  including +-1, no zero) gives a vector q that is not a unit vector, so r_hat q can leave the
  ball. Here q is renormalised, u_hat = q / |q| (0 stays 0). A grid with a zero ("zero":
  2^b - 1 levels k / (2^(b-1) - 1), one code unused) and a narrower coordinate range [-a, a]
  (coordinates clipped, then renormalised; |u_i| ~ 1/sqrt(d) for a typical direction) are
  options.
- bits: all d direction coordinates are coded (as the seed's quantiser does), d b + b_r bits
  per key; Thm 6.2 counts (d - 1) b + b_r. At d = 32, b = 4, b_r = 6: 32 * 32 / 134 = 7.64x
  against float32, not the 7.88x claimed.
- error: Thm 6.1's |k - k_hat|^2 <= 4 (2^-b + 2^-b_r) misses a sqrt(d): the grid's per-coordinate
  error is Delta/2, so |u - q| <= sqrt(d) Delta / 2 (+ the clipping error), and
  |u - u_hat| <= min(2, 2 |u - q|). Hence, per key (:func:`reconstruction_bound`),
  |k - k_hat| <= r min(2, 2 (|u - clip(u)| + sqrt(d) Delta / 2)) + 2^-(b_r + 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import sphere

__all__ = [
    "DIRECTION_GRIDS",
    "direction_step",
    "quantize_radius",
    "dequantize_radius",
    "quantize_direction",
    "dequantize_direction",
    "pack_bits",
    "unpack_bits",
    "reconstruction_bound",
    "seed_reconstruction_bound",
]

DIRECTION_GRIDS = ("seed", "zero")


def direction_step(bits: int, grid: str, coord_range: float = 1.0) -> float:
    """Spacing Delta of the direction grid on [-a, a]: 2a / (2^b - 1) ("seed"), a / (2^(b-1) - 1)
    ("zero"); the largest rounding error of a coordinate inside the range is Delta / 2."""
    if grid == "seed":
        return 2.0 * coord_range / (2**bits - 1)
    return coord_range / (2 ** (bits - 1) - 1)


def quantize_radius(r: Tensor, bits: int) -> Tensor:
    """Cell index floor(r 2^b) of r in [0, 1), clamped to [0, 2^b - 1]: r [...] -> int64 [...]."""
    levels = 2**bits
    return torch.floor(r * levels).clamp(0, levels - 1).to(torch.int64)


def dequantize_radius(codes: Tensor, bits: int, dtype: torch.dtype) -> Tensor:
    """Cell midpoint (i + 1/2) / 2^b: int [...] -> [...] in (0, 1 - 2^-(b+1)]."""
    return (codes.to(dtype) + 0.5) / 2**bits


def quantize_direction(u: Tensor, bits: int, grid: str, coord_range: float) -> Tensor:
    """Codes of each coordinate of u [..., d] on the grid of [-a, a]: int64 [..., d] in
    [0, 2^b - 1] ("seed") or [0, 2^b - 2] ("zero"); a coordinate outside [-a, a] takes the code
    of the nearer end (clipping it first gives the same code)."""
    step = direction_step(bits, grid, coord_range)
    if grid == "seed":  # levels -a + k Delta, k = 0 .. 2^b - 1
        return torch.round((u + coord_range) / step).clamp(0, 2**bits - 1).to(torch.int64)
    half = 2 ** (bits - 1) - 1  # levels k Delta, k = -half .. half
    return (torch.round(u / step).clamp(-half, half) + half).to(torch.int64)


def dequantize_direction(codes: Tensor, bits: int, grid: str, dtype: torch.dtype) -> Tensor:
    """Grid values of the codes, renormalised to a unit vector: int [..., d] -> [..., d]
    (a zero vector, possible on the "zero" grid, stays zero). The renormalisation cancels any
    common factor of the levels: the range a, and on the "zero" grid the spacing too."""
    if grid == "seed":  # levels -1 + k Delta on a = 1
        q = codes.to(dtype) * direction_step(bits, grid) - 1.0
    else:  # levels (k - half) Delta: proportional to k - half
        q = codes.to(dtype) - (2 ** (bits - 1) - 1)
    return sphere.normalize(q)


def pack_bits(codes: Tensor, widths: Tensor) -> Tensor:
    """Bit-pack rows of codes into one little-endian stream of bytes.

    codes int64 [n, m] with codes[:, j] < 2^widths[j]; widths int64 [m]. Returns uint8
    [ceil(n sum(widths) / 8)]: row after row, field after field, least significant bit first.
    """
    n, m = codes.shape
    total = int(widths.sum())
    if n == 0 or total == 0:
        return torch.zeros(0, dtype=torch.uint8)
    max_w = int(widths.max())
    shifts = torch.arange(max_w, dtype=torch.int64)  # [max_w]
    bits = (codes.unsqueeze(-1) >> shifts) & 1  # [n, m, max_w]
    keep = shifts < widths.unsqueeze(-1)  # [m, max_w]: the field's own bits
    stream = bits[:, keep].to(torch.uint8).reshape(-1)  # [n * total]
    pad = (-stream.numel()) % 8
    stream = torch.cat([stream, stream.new_zeros(pad)]).reshape(-1, 8)  # [bytes, 8]
    weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8)
    return (stream * weights).sum(-1, dtype=torch.int64).to(torch.uint8)


def unpack_bits(data: Tensor, widths: Tensor, n: int) -> Tensor:
    """Inverse of :func:`pack_bits`: uint8 [bytes] -> int64 codes [n, m]."""
    m = widths.numel()
    total = int(widths.sum())
    if n == 0 or total == 0:
        return torch.zeros(n, m, dtype=torch.int64)
    shifts8 = torch.arange(8, dtype=torch.uint8)
    stream = ((data.unsqueeze(-1) >> shifts8) & 1).reshape(-1)[: n * total]  # [n * total]
    max_w = int(widths.max())
    shifts = torch.arange(max_w, dtype=torch.int64)
    keep = shifts < widths.unsqueeze(-1)  # [m, max_w]
    bits = torch.zeros(n, m, max_w, dtype=torch.int64)
    bits[:, keep] = stream.reshape(n, total).to(torch.int64)
    return (bits << shifts).sum(-1)


def reconstruction_bound(
    keys: Tensor, bits_dir: int, bits_radius: int, grid: str, coord_range: float = 1.0
) -> Tensor:
    """The true per-key bound on |k - k_hat| (module docstring): keys [..., d] -> [...].

    |u - u_hat| <= min(2, 2 |u - q|) for u_hat = q / |q| and a unit u, with
    |u - q| <= |u - clip_a(u)| + sqrt(d) Delta / 2; |r - r_hat| <= 2^-(b_r + 1)."""
    d = keys.shape[-1]
    r = keys.norm(dim=-1)
    u = sphere.normalize(keys)
    clip_err = (u - u.clamp(-coord_range, coord_range)).norm(dim=-1)
    grid_err = math.sqrt(d) * direction_step(bits_dir, grid, coord_range) / 2
    direction_err = (2.0 * (clip_err + grid_err)).clamp_max(2.0)
    return r * direction_err + 2.0 ** -(bits_radius + 1)


def seed_reconstruction_bound(bits_dir: int, bits_radius: int) -> float:
    """Thm 6.1 as stated: |k - k_hat|^2 <= 4 (2^-b + 2^-b_r) (a bound on the SQUARED error)."""
    return 4.0 * (2.0**-bits_dir + 2.0**-bits_radius)
