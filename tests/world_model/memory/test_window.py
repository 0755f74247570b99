"""The recent trajectory window (world_model/memory/window.py): its features against geoopt's
log_0 and conformal factor, and the two texture banks it builds."""

from __future__ import annotations

import geoopt
import torch

from world_model.memory.window import TrajectoryWindow, position_features, state_features


def _points(shape, seed):
    g = torch.Generator().manual_seed(seed)
    z = geoopt.PoincareBall().expmap0(0.6 * torch.randn(*shape, generator=g, dtype=torch.float64))
    return z, torch.randn(*shape, generator=g, dtype=torch.float64)


def test_features_are_position_log0_and_momentum_over_the_conformal_factor():
    """(z, log_0 z) and (z, log_0 z, p (1 - |z|^2) / 2) against geoopt's log_0, for [2, 3, d];
    a precomputed position block is used as given."""
    z, p = _points((2, 3, 4), 1)
    log0 = geoopt.PoincareBall().logmap0(z)
    torch.testing.assert_close(position_features(z), torch.cat([z, log0], -1))
    frame = p * (1 - (z * z).sum(-1, keepdim=True)) / 2
    torch.testing.assert_close(state_features(z, p), torch.cat([z, log0, frame], -1))
    given = torch.full((2, 3, 8), 7.0, dtype=torch.float64)
    torch.testing.assert_close(state_features(z, p, given), torch.cat([given, frame], -1))


def test_banks_hold_the_window_at_its_level_with_separate_features():
    """banks(z, p, mask) for [B = 2, W = 3]: both banks sit at z with level `level`
    everywhere and the given mask; keys and values are the two halves of each head kind's own
    linear map of the state features."""
    torch.manual_seed(2)
    window = TrajectoryWindow(dim=4, feature_dim=5, level=2).double()
    z, p = _points((2, 3, 4), 3)
    mask = torch.tensor([[False, True, True], [True, True, True]])
    feats = state_features(z, p)
    banks = window.banks(z, p, mask)
    for bank, net in zip(banks, (window.force_features, window.correction_features), strict=True):
        full = feats @ net.weight.T + net.bias
        assert torch.equal(bank.positions, z) and torch.equal(bank.mask, mask)
        assert bank.levels.dtype == torch.long and bank.levels.tolist() == [[2] * 3] * 2
        torch.testing.assert_close(bank.key_features, full[..., :5])
        torch.testing.assert_close(bank.value_features, full[..., 5:])
    assert not torch.allclose(banks[0].key_features, banks[1].key_features)
