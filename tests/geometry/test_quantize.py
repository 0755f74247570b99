"""geometry.quantize on its own: the bit stream against hand-written bytes and a round trip, the
empty cases, and the radius grid (seed 000 §6). The direction grids and the error bound are
tested through HCC's compress in tests/world_model/memory/test_hcc.py."""

from __future__ import annotations

import math

import pytest
import torch

from geometry import quantize


def test_pack_bits_is_a_little_endian_stream():
    # fields of widths 1, 2, 3: 1 | 2 = 10b | 5 = 101b, then the next row 0 | 3 | 7
    codes = torch.tensor([[1, 2, 5], [0, 3, 7]])
    data = quantize.pack_bits(codes, torch.tensor([1, 2, 3]))
    bits = [1, 0, 1, 1, 0, 1] + [0, 1, 1, 1, 1, 1]
    expected = [sum(b << i for i, b in enumerate(bits[j : j + 8])) for j in (0, 8)]
    assert data.dtype == torch.uint8 and data.tolist() == expected
    assert quantize.unpack_bits(data, torch.tensor([1, 2, 3]), 2).tolist() == codes.tolist()


def test_pack_unpack_round_trip_random_widths():
    g = torch.Generator().manual_seed(1)
    widths = torch.randint(1, 12, (9,), generator=g)
    codes = torch.stack([torch.randint(0, 2 ** int(w), (37,), generator=g) for w in widths], -1)
    data = quantize.pack_bits(codes, widths)
    assert data.numel() == math.ceil(37 * int(widths.sum()) / 8)
    assert torch.equal(quantize.unpack_bits(data, widths, 37), codes)


def test_empty_streams_and_single_rows():
    """No rows or no bits pack to zero bytes and unpack to an [n, m] block of int64 zeros; one
    row, or one bit per row, is an ordinary stream (not an empty one)."""
    for codes, widths in [
        (torch.zeros(0, 3, dtype=torch.int64), torch.tensor([1, 2, 3])),
        (torch.zeros(4, 2, dtype=torch.int64), torch.tensor([0, 0])),
        (torch.zeros(4, 0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)),  # no fields
    ]:
        data = quantize.pack_bits(codes, widths)
        assert data.dtype == torch.uint8 and data.shape == (0,)
        back = quantize.unpack_bits(data, widths, codes.shape[0])
        assert back.dtype == torch.int64 and back.shape == codes.shape and not back.any()
    one_row = torch.tensor([[5, 1]])
    data = quantize.pack_bits(one_row, torch.tensor([3, 1]))
    assert data.tolist() == [5 + 8]
    assert torch.equal(quantize.unpack_bits(data, torch.tensor([3, 1]), 1), one_row)
    one_bit = torch.tensor([[1], [0], [1]])
    data = quantize.pack_bits(one_bit, torch.tensor([1]))
    assert data.tolist() == [0b101]
    assert torch.equal(quantize.unpack_bits(data, torch.tensor([1]), 3), one_bit)


def test_a_byte_holds_eight_fields_and_every_weight_reaches_bit_7():
    """Nine one-bit fields of ones: eight fill byte 0 to 255 (bit 7 set: weights up to 2^7, summed
    without overflow), the ninth starts byte 1; a width-12 field spans two bytes."""
    data = quantize.pack_bits(torch.ones(1, 9, dtype=torch.int64), torch.ones(9, dtype=torch.int64))
    assert data.tolist() == [255, 1]
    wide = torch.tensor([[0xABC]])
    data = quantize.pack_bits(wide, torch.tensor([12]))
    assert data.tolist() == [0xBC, 0x0A]
    assert torch.equal(quantize.unpack_bits(data, torch.tensor([12]), 1), wide)


def test_seed_radius_grid_has_an_extra_level_on_the_boundary():
    r = torch.linspace(0, 1 - 1e-9, 100001, dtype=torch.float64)
    seed = torch.round(r * 64) / 64  # the seed's grid, b_r = 6
    assert seed.unique().numel() == 65 and seed.max() == 1.0  # 7 bits; r_hat = 1 is the boundary
    ours = quantize.dequantize_radius(quantize.quantize_radius(r, 6), 6, torch.float64)
    assert ours.unique().numel() == 64 and ours.max() == 1 - 2**-7
    assert (ours - r).abs().max() <= 2**-7 + 1e-15


def test_reconstruction_bound_in_numbers():
    """|k - k_hat| <= r min(2, 2 (|u - clip_a(u)| + sqrt(d) Delta / 2)) + 2^-(b_r + 1), worked
    by hand for keys 0.5 e1 and 0.5 (e1 + e2) / sqrt 2 at d = 4, b = 4, b_r = 6 (2^-7 from the
    radius): seed grid, a = 1 (Delta = 2/15: 0.5 * 4/15 + 2^-7); zero grid, a = 1
    (Delta = 1/7: 0.5 * 2/7 + 2^-7); seed grid, a = 0.5 (Delta = 1/15, clipping 0.5 on e1 and
    sqrt 2 (1/sqrt 2 - 1/2) on the diagonal); one direction bit (Delta = 2: the min's 2 binds,
    0.5 * 2 + 2^-7); -0.5 e1 is bounded as 0.5 e1 (clipping is symmetric); a batch [2, 1, d]
    keeps its shape."""
    keys = torch.zeros(3, 4, dtype=torch.float64)
    keys[0, 0] = 0.5
    keys[1, :2] = 0.5 / math.sqrt(2)
    keys[2, 0] = -0.5
    radius = 2.0**-7
    diag_clip = math.sqrt(2) * (1 / math.sqrt(2) - 0.5)
    cases = [
        ("seed", 4, 1.0, [0.5 * 4 / 15, 0.5 * 4 / 15]),
        ("zero", 4, 1.0, [0.5 * 2 / 7, 0.5 * 2 / 7]),
        ("seed", 4, 0.5, [0.5 * 2 * (0.5 + 1 / 15), 0.5 * 2 * (diag_clip + 1 / 15)]),
        ("seed", 1, 1.0, [1.0, 1.0]),
    ]
    for grid, bits, a, direction in cases:
        want = torch.tensor([*direction, direction[0]], dtype=torch.float64) + radius
        got = quantize.reconstruction_bound(keys, bits, 6, grid, a)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    default = quantize.reconstruction_bound(keys[:2].view(2, 1, 4), 4, 6, "seed")
    assert default.shape == (2, 1)
    torch.testing.assert_close(default.flatten(), torch.full((2,), 0.5 * 4 / 15 + radius).double())


def test_dequantized_radius_has_the_dtype_asked_for():
    codes = torch.tensor([0, 63])
    for dtype in (torch.float32, torch.float64):
        r = quantize.dequantize_radius(codes, 6, dtype)
        assert r.dtype == dtype
        torch.testing.assert_close(r, torch.tensor([0.5 / 64, 63.5 / 64], dtype=dtype))


def test_radius_codes_are_clamped_to_the_grid():
    """floor(r 2^b) clamped to [0, 2^b - 1]: r = 0 and a negative r code 0, r on the boundary
    and beyond code the last cell."""
    r = torch.tensor([-0.25, 0.0, 0.49, 1.0, 3.0], dtype=torch.float64)
    assert quantize.quantize_radius(r, 3).tolist() == [0, 0, 3, 7, 7]


@pytest.mark.parametrize("grid, top", [("seed", 7), ("zero", 6)])
def test_coordinates_outside_the_range_take_the_codes_of_its_ends(grid, top):
    """a = 0.5, b = 3: coordinates +-0.9 code as +-0.5 do, the grid's last and first codes."""
    u = torch.tensor([[0.9, -0.9, 0.5, -0.5, 0.1]], dtype=torch.float64)
    codes = quantize.quantize_direction(u, 3, grid, 0.5)
    assert codes.tolist() == quantize.quantize_direction(u.clamp(-0.5, 0.5), 3, grid, 0.5).tolist()
    assert codes[0, :4].tolist() == [top, 0, top, 0]
