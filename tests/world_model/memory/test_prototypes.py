"""The fixed prototype pool (world_model/memory/prototypes.py): initial positions and features
against their seeded draws by geoopt, the two banks it hands the heads, and its config."""

from __future__ import annotations

import geoopt
import pytest
import torch

from world_model.memory.prototypes import PrototypeConfig, PrototypePool, ball_points_parameter


def test_ball_points_are_exp0_of_scaled_gaussians_within_max_norm_on_the_unit_ball():
    """With the generator seeded: geoopt's exp_0 of init_scale N(0, 1), rescaled to |c| <=
    max_norm where it lands beyond; a ManifoldParameter on the ball of curvature -1."""
    torch.manual_seed(1)
    points = ball_points_parameter(30, 3, 2.0, 0.9)
    torch.manual_seed(1)
    c = geoopt.PoincareBall().expmap0(2.0 * torch.randn(30, 3))
    norm = c.norm(dim=-1, keepdim=True)
    assert (norm > 0.9).any() and (norm < 0.9).any()
    torch.testing.assert_close(points.data, c * (0.9 / norm).clamp(max=1.0))
    assert isinstance(points, geoopt.ManifoldParameter)
    assert isinstance(points.manifold, geoopt.PoincareBall) and float(points.manifold.c) == 1.0


def test_pool_draws_positions_then_keys_n01_and_values_n0_1_over_f():
    """The pool's draws in order: positions (as ball_points_parameter), force keys N(0, 1),
    force values N(0, 1/F), correction keys, correction values; max_norm reaches the
    positions."""
    cfg = PrototypeConfig(count=12, feature_dim=4, init_scale=3.0)
    torch.manual_seed(2)
    pool = PrototypePool(2, cfg, max_norm=0.7)
    torch.manual_seed(2)
    c = geoopt.PoincareBall().expmap0(3.0 * torch.randn(12, 2))
    draws = [torch.randn(12, 4) for _ in range(4)]
    torch.testing.assert_close(
        pool.positions.data, c * (0.7 / c.norm(dim=-1, keepdim=True)).clamp(max=1.0)
    )
    torch.testing.assert_close(pool.force_keys.data, draws[0])
    torch.testing.assert_close(pool.force_values.data, draws[1] / 2)
    torch.testing.assert_close(pool.correction_keys.data, draws[2])
    torch.testing.assert_close(pool.correction_values.data, draws[3] / 2)
    default = PrototypePool(3)
    assert default.positions.shape == (64, 3) and default.force_keys.shape == (64, 16)


def test_banks_are_the_shared_macro_entries_of_each_head_kind():
    """force_bank: [1, M] entries at the positions with the force keys and values, level 0, no
    mask; correction_bank the same with the correction features."""
    torch.manual_seed(3)
    pool = PrototypePool(2, PrototypeConfig(count=5, feature_dim=3))
    for bank, keys, values in (
        (pool.force_bank(), pool.force_keys, pool.force_values),
        (pool.correction_bank(), pool.correction_keys, pool.correction_values),
    ):
        assert torch.equal(bank.positions, pool.positions.unsqueeze(0))
        assert torch.equal(bank.key_features, keys.unsqueeze(0))
        assert torch.equal(bank.value_features, values.unsqueeze(0))
        assert bank.levels.dtype == torch.long and bank.levels.tolist() == [[0] * 5]
        assert bank.mask is None


def test_config_boundaries_and_refusals():
    """count = feature_dim = 1 and init_scale just inside (0, 5) are valid; 0 and the ends are
    refused with their messages."""
    PrototypeConfig(count=1, feature_dim=1, init_scale=4.99)
    for kwargs, match in (
        (dict(count=0), "^PrototypeConfig.count must be an integer >= 1, got 0$"),
        (dict(count=2.0), "^PrototypeConfig.count must be an integer >= 1, got 2.0$"),
        (dict(feature_dim=0), "^PrototypeConfig.feature_dim must be >= 1, got 0$"),
        (dict(init_scale=0.0), r"^PrototypeConfig.init_scale must lie in \(0, 5\), got 0.0$"),
        (dict(init_scale=5.0), r"^PrototypeConfig.init_scale must lie in \(0, 5\), got 5.0$"),
    ):
        with pytest.raises(ValueError, match=match):
            PrototypeConfig(**kwargs)
