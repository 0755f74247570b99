"""HCC (seed 000 §6): real bit packing, the seed quantiser's defects, the true error bound, and
retrieval on compressed keys (world_model/memory/hcc.py, geometry/quantize.py)."""

from __future__ import annotations

import math

import pytest
import torch

from geometry import quantize
from world_model.attention.ida import inverse_distance_attention
from world_model.memory.hcc import HCCConfig, compress, suggested_range


def keys_in_ball(n, d, max_r=0.95, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    return (max_r * torch.rand(n, 1, generator=g, dtype=torch.float64) * u).to(dtype)


def reference_decode(keys, b, br, grid, a):
    """HCC decoded keys written out coordinate by coordinate (float64, no shared code)."""
    out = torch.empty_like(keys, dtype=torch.float64)
    for i, k in enumerate(keys.to(torch.float64)):
        r = float(k.norm())
        u = (k / r).tolist() if r > 0 else [0.0] * len(k)
        cell = min(int(math.floor(r * 2**br)), 2**br - 1)
        r_hat = (cell + 0.5) / 2**br
        q = []
        for x in u:
            x = max(-a, min(a, x))
            if grid == "seed":
                step = 2 * a / (2**b - 1)
                q.append(min(max(round((x + a) / step), 0), 2**b - 1) * step - a)
            else:
                step, half = a / (2 ** (b - 1) - 1), 2 ** (b - 1) - 1
                q.append(min(max(round(x / step), -half), half) * step)
        norm = math.sqrt(sum(v * v for v in q))
        out[i] = torch.tensor(
            [r_hat * v / norm if norm > 0 else 0.0 for v in q], dtype=torch.float64
        )
    return out


@pytest.mark.parametrize("d", [8, 32, 128])
def test_packed_size_and_ratio(d):
    keys = keys_in_ball(300, d, dtype=torch.float32)
    packed = compress(keys, 4, 6)
    assert packed.data.dtype == torch.uint8
    assert packed.nbytes == math.ceil(300 * (4 * d + 6) / 8)
    assert packed.compression_ratio() == pytest.approx(300 * d * 4 / packed.nbytes)
    if d == 32:  # all d coordinates are coded: 1024 / 134, not Thm 6.2's 1024 / 130 = 7.88
        assert packed.compression_ratio() == pytest.approx(1024 / 134, rel=1e-3)
        assert 7.5 <= packed.compression_ratio() < 7.7


@pytest.mark.parametrize("grid", ["seed", "zero"])
@pytest.mark.parametrize("a", [1.0, 0.5])
def test_decompress_matches_a_coordinate_by_coordinate_reference(grid, a):
    keys = keys_in_ball(40, 8, seed=2)
    keys[0] = 0.0  # no direction
    keys[1, :] = 0.0
    keys[1, 0] = 0.9  # on an axis
    got = compress(keys, 3, 5, grid=grid, direction_range=a).decompress()
    assert got.shape == keys.shape and got.dtype == keys.dtype
    torch.testing.assert_close(got, reference_decode(keys, 3, 5, grid, a), rtol=1e-12, atol=1e-12)


def test_seed_direction_is_not_a_unit_vector_and_leaves_the_ball():
    d, b = 32, 4
    u = torch.zeros(d, dtype=torch.float64)
    u[0] = 1.0
    seed_u = torch.round((u + 1) / 2 * (2**b - 1)) / (2**b - 1) * 2 - 1  # no zero: 0 -> 1/15
    seed_r = round(0.99 * 64) / 64
    assert (seed_u == 0).sum() == 0 and seed_u.norm() > 1.06
    assert seed_r * seed_u.norm() > 1.0  # the reconstructed key is outside the ball
    ours = compress((0.99 * u).unsqueeze(0), b, 6).decompress()
    assert ours.norm() < 1.0


@pytest.mark.parametrize("grid", ["seed", "zero"])
@pytest.mark.parametrize("d", [8, 32, 128, 256])
def test_true_bound_holds_on_random_and_adversarial_keys(grid, d):
    keys = keys_in_ball(400, d, max_r=0.999, seed=d)
    axes = 0.99 * torch.eye(d, dtype=torch.float64)[:8]  # sign-grid worst case
    tilted = torch.full((d,), 0.999 / (2 * 7))  # coordinates at the "zero" grid's threshold
    tilted[0] = 1.0
    keys = torch.cat([keys, axes, (0.99 * tilted / tilted.norm()).unsqueeze(0)])
    for a in (1.0, suggested_range(d)):
        err = (compress(keys, 4, 6, grid=grid, direction_range=a).decompress() - keys).norm(dim=-1)
        bound = quantize.reconstruction_bound(keys, 4, 6, grid, a)
        assert (err <= bound + 1e-12).all()


def test_seed_bound_misses_sqrt_d_counter_example():
    """Thm 6.1: |k - k_hat|^2 <= 4 (2^-4 + 2^-6) = 0.3125. A key on an axis at d = 128: every
    zero coordinate is coded +-1/15, and the renormalised direction is 37 degrees off."""
    k = torch.zeros(1, 128, dtype=torch.float64)
    k[0, 0] = 0.99
    sq = ((compress(k, 4, 6, direction_range=1.0).decompress() - k) ** 2).sum().item()
    assert sq > quantize.seed_reconstruction_bound(4, 6) == 0.3125
    assert sq > 0.38
    assert sq <= quantize.reconstruction_bound(k, 4, 6, "seed").item() ** 2
    exact = compress(k, 4, 6, grid="zero").decompress()  # a grid with a zero codes it exactly
    assert ((exact - k) ** 2).sum() < 1e-4


def test_decompressed_keys_stay_inside_the_ball_and_outside_keys_are_refused():
    keys = keys_in_ball(200, 16, max_r=1 - 1e-6, dtype=torch.float32)
    assert compress(keys).decompress().norm(dim=-1).max() < 1.0
    with pytest.raises(ValueError, match="open unit ball"):
        compress(torch.ones(2, 4))


def test_retrieval_of_dense_hida_on_compressed_keys():
    """Queries at the stored (uncompressed) keys retrieve their own key on the compressed keys
    at d = 32 with 4/6 bits; 1/1 bits lose most of it (the test can fail both ways)."""
    keys = keys_in_ball(256, 32, max_r=0.9, seed=5, dtype=torch.float32)
    eye = torch.eye(256)

    def accuracy(stored):
        _, w = inverse_distance_attention(keys, stored, eye, 1e-4, "poincare")
        return (w.argmax(-1) == torch.arange(256)).float().mean().item()

    assert accuracy(keys) == 1.0
    assert accuracy(compress(keys, 4, 6).decompress()) >= 0.95
    assert accuracy(compress(keys, 1, 1).decompress()) < 0.9


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bits_dir=0), "bits_dir"),
        (dict(bits_radius=17), "bits_radius"),
        (dict(grid="lattice"), "grid"),
        (dict(grid="zero", bits_dir=1), "zero"),
        (dict(direction_range=0.0), "direction_range"),
        (dict(direction_range=1.01), "direction_range"),
    ],
)
def test_config_errors_are_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        HCCConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_suggested_range_and_the_default_direction_range():
    """min(1, 4 / sqrt(d)) in numbers, and compress without a range codes with that range: its
    decoded keys are the coordinate-by-coordinate reference's at a = 4 / sqrt(d)."""
    assert suggested_range(4) == 1.0 and suggested_range(16) == 1.0
    assert suggested_range(64) == 0.5 and suggested_range(256) == 0.25
    assert suggested_range(64, spread=2.0) == 0.25
    keys = keys_in_ball(20, 64, seed=6)
    packed = compress(keys, 3, 5)
    assert packed.config.direction_range == 0.5
    torch.testing.assert_close(
        packed.decompress(), reference_decode(keys, 3, 5, "seed", 0.5), rtol=1e-12, atol=1e-12
    )


def test_batched_keys_and_a_single_key_decode_as_their_rows():
    """Keys [b, n, d] (d != n) and a single key [d] decode as the rows of the 2-D reference;
    one key of d = 1 at 1 + 1 bits packs into one byte (ratio 4 / 1)."""
    keys = keys_in_ball(24, 5, seed=7)
    ref = reference_decode(keys, 4, 6, "zero", 0.8)
    packed = compress(keys.reshape(2, 12, 5), 4, 6, grid="zero", direction_range=0.8)
    assert packed.nbytes == math.ceil(24 * (4 * 5 + 6) / 8)
    torch.testing.assert_close(packed.decompress(), ref.reshape(2, 12, 5), rtol=1e-12, atol=1e-12)
    one = compress(keys[3], 4, 6, grid="zero", direction_range=0.8).decompress()
    torch.testing.assert_close(one, ref[3], rtol=1e-12, atol=1e-12)
    tiny = compress(torch.tensor([[0.5]]), 1, 1)
    assert tiny.nbytes == 1 and tiny.compression_ratio() == 4.0


def test_refusals_of_compress_name_their_input():
    """Non-finite keys, a scalar and a key on the unit sphere (|k| = 1 exactly) are refused
    with their messages; the norm just below 1 is accepted."""
    finite = "^compress: keys must be a finite tensor \\[\\.\\.\\., n, d\\]$"
    with pytest.raises(ValueError, match=finite):
        compress(torch.tensor([[0.1, float("nan")]]))
    with pytest.raises(ValueError, match=finite):
        compress(torch.tensor(0.5))
    with pytest.raises(ValueError, match="^compress: keys must lie in the open unit ball"):
        compress(torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    assert compress(torch.tensor([[1.0 - 1e-12, 0.0]], dtype=torch.float64)).nbytes > 0


def test_config_accepts_its_boundaries():
    """The widest widths (16 bits), the narrowest (1 bit), 2 bits on the "zero" grid and the
    full range a = 1 are valid; a bool is not a bit width."""
    for kwargs in (
        dict(bits_dir=16, bits_radius=16),
        dict(bits_dir=1, bits_radius=1),
        dict(grid="zero", bits_dir=2),
        dict(direction_range=1.0),
    ):
        HCCConfig(**kwargs)
    with pytest.raises(ValueError, match="^HCCConfig.bits_dir must be an integer in"):
        HCCConfig(bits_dir=True)
    with pytest.raises(ValueError, match="^HCCConfig.grid 'zero' needs bits_dir >= 2 \\(one"):
        HCCConfig(grid="zero", bits_dir=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_keys_decode_in_their_dtype_to_their_radius_cells_midpoints(dtype):
    """|k_hat| is the midpoint (floor(r 2^b_r) + 1/2) / 2^b_r of the key's radius cell, in the
    keys' dtype (a float32 radius would promote float16 keys)."""
    keys = torch.rand(40, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    keys = keys / keys.norm(dim=-1, keepdim=True) * torch.linspace(0.013, 0.987, 40).unsqueeze(-1)
    decoded = compress(keys.to(dtype), 4, 11).decompress()
    assert decoded.dtype == dtype
    midpoint = (torch.floor(keys.to(dtype).double().norm(dim=-1) * 2**11) + 0.5) / 2**11
    tol = 1e-14 if dtype == torch.float64 else 2e-3  # float16 rounds u_hat's coordinates
    torch.testing.assert_close(decoded.double().norm(dim=-1), midpoint, rtol=0, atol=tol)
