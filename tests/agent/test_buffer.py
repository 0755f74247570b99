"""agent.core.buffer: sub-trajectories stay inside episodes, the round trip through state_dict keeps
data and sampling stream, the ring overwrites the oldest transitions."""

from __future__ import annotations

import pytest
import torch

from agent.core.buffer import ReplayBuffer


def fill(
    buffer: ReplayBuffer, episode_lengths: list[int], terminate_last: bool = False, start: int = 0
) -> int:
    """Transitions whose obs is (global step, episode id); next_obs = (step + 1, episode)."""
    step = start
    for e, length in enumerate(episode_lengths):
        for t in range(length):
            end = t == length - 1
            buffer.add(
                obs=[step, e],
                action=[t / 10],
                reward=-float(step),
                next_obs=[step + 1, e],
                terminated=end and terminate_last,
                truncated=end and not terminate_last,
            )
            step += 1
    return step


def test_sub_trajectories_never_cross_an_episode_end():
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=1000, seed=0)
    fill(buffer, [7, 3, 12, 5, 9], terminate_last=True)
    batch = buffer.sample(batch_size=500, horizon=4)
    assert batch.obs.shape == (5, 500, 2) and batch.action.shape == (4, 500, 1)
    steps, episodes = batch.obs[..., 0], batch.obs[..., 1]
    # consecutive in time and one episode throughout: obs[t + 1] is the obs after action[t]
    assert torch.equal(steps[1:] - steps[:-1], torch.ones(4, 500))
    assert torch.equal(episodes, episodes[:1].expand(5, -1))
    torch.testing.assert_close(batch.reward[..., 0], -steps[:-1])
    # only the last step may end an episode (episode 1 has 3 steps: it never fits a horizon of 4)
    assert batch.terminated[:-1].sum() == 0 and batch.terminated[-1].sum() > 0
    assert not (episodes == 1).any()


def test_too_short_for_the_horizon_is_a_clear_error():
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=10)
    fill(buffer, [2])
    with pytest.raises(ValueError, match="at least 3"):
        buffer.sample(4, horizon=3)
    buffer2 = ReplayBuffer(obs_dim=2, action_dim=1, capacity=10)
    fill(buffer2, [2, 2, 2])
    with pytest.raises(ValueError, match="fits inside an episode"):
        buffer2.sample(4, horizon=3)


def test_state_dict_round_trip_keeps_data_and_the_sampling_stream():
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=5000, seed=3)
    fill(buffer, [40, 25, 60])
    buffer.sample(8, 3)  # advance the generator
    state = buffer.state_dict()
    restored = ReplayBuffer(obs_dim=2, action_dim=1, capacity=5000, seed=999)
    restored.load_state_dict(state)
    assert len(restored) == len(buffer) == 125
    for name in ReplayBuffer._FIELDS:
        assert torch.equal(getattr(restored, name)[:125], getattr(buffer, name)[:125])
    for _ in range(3):
        a, b = buffer.sample(32, 3), restored.sample(32, 3)
        for name in ("obs", "action", "reward", "terminated", "truncated"):
            assert torch.equal(getattr(a, name), getattr(b, name))
    # continues identically after more data
    fill(buffer, [10], start=1000)
    fill(restored, [10], start=1000)
    assert torch.equal(buffer.sample(16, 2).obs, restored.sample(16, 2).obs)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(obs_dim=2, action_dim=1, capacity=10).load_state_dict(state)


def test_state_dict_survives_torch_save_with_weights_only(tmp_path):
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=100, seed=1)
    fill(buffer, [30])
    torch.save(buffer.state_dict(), tmp_path / "b.pt")
    state = torch.load(tmp_path / "b.pt", weights_only=True)
    restored = ReplayBuffer(obs_dim=2, action_dim=1, capacity=100)
    restored.load_state_dict(state)
    assert torch.equal(restored.sample(8, 2).obs, buffer.sample(8, 2).obs)


def test_ring_overwrites_the_oldest_and_keeps_time_order():
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=50, seed=0)
    fill(buffer, [30, 30, 30])  # 90 transitions into 50 slots
    assert len(buffer) == 50
    batch = buffer.sample(400, horizon=5)
    steps = batch.obs[..., 0]
    assert steps.min() >= 40  # the oldest 40 are gone
    assert torch.equal(steps[1:] - steps[:-1], torch.ones(5, 400))  # no wrap across the seam


def test_storage_grows_on_demand():
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=1_000_000)
    assert buffer.obs.shape[0] == 0
    fill(buffer, [1500])
    assert 1500 <= buffer.obs.shape[0] <= 4096
    assert torch.equal(buffer.obs[:1500, 0], torch.arange(1500, dtype=torch.float32))


def test_mark_truncated_closes_the_running_episode():
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=100, seed=0)
    fill(buffer, [10])
    buffer.add([100, 5], [0.0], 0.0, [101, 5], False, False)  # an episode in progress
    buffer.add([101, 5], [0.0], 0.0, [102, 5], False, False)
    buffer.mark_truncated()
    assert buffer.truncated[11] == 1 and buffer.truncated[10] == 0
    fill(buffer, [10], start=200)
    batch = buffer.sample(300, 2)
    steps = batch.obs[..., 0]
    # without the truncation mark, a start at slot 11 would run 101 -> 102 -> 201
    assert torch.equal(steps[1:] - steps[:-1], torch.ones(2, 300))
    assert (steps[0] == 100).any()  # the closed episode is still sampled, up to its end
    assert not (steps[0] == 101).any()


@pytest.mark.parametrize("capacity", [1000, 30])
def test_history_is_the_same_episodes_preceding_observations_masked_before_its_start(capacity):
    """sample(..., history=W) adds the W observations before each start; steps before the
    episode's start (or before the oldest stored transition) are masked and zeroed."""
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=capacity, seed=1)
    fill(buffer, [7, 3, 12, 5, 9, 6])  # the ring of 30 has overwritten the oldest steps
    batch = buffer.sample(batch_size=400, horizon=2, history=4)
    assert batch.history_obs.shape == (4, 400, 2) and batch.history_mask.shape == (4, 400)
    start_step, start_episode = batch.obs[0, :, 0], batch.obs[0, :, 1]
    oldest_step = 42 - len(buffer)  # fill wrote steps 0..41
    for k in range(4):  # k = 0 is the oldest, 4 steps back
        back = 4 - k
        step, episode = batch.history_obs[k, :, 0], batch.history_obs[k, :, 1]
        mask = batch.history_mask[k]
        # exactly the steps of the same episode that are still stored
        first_of_episode = torch.tensor(
            [
                min(s for s in range(int(t) + 1) if _episode_of(s) == int(e))
                for t, e in zip(start_step, start_episode, strict=True)
            ]
        )
        expected = (start_step - back >= first_of_episode) & (start_step - back >= oldest_step)
        assert torch.equal(mask, expected)
        assert torch.equal(step[mask], start_step[mask] - back)
        assert torch.equal(episode[mask], start_episode[mask])
        assert (batch.history_obs[k][~mask] == 0).all()
    assert batch.history_mask.any() and not batch.history_mask.all()


def _episode_of(step: int, lengths=(7, 3, 12, 5, 9, 6)) -> int:
    for e, length in enumerate(lengths):
        if step < length:
            return e
        step -= length
    raise ValueError(step)


def test_history_of_a_young_buffer_does_not_index_past_its_storage():
    """Early in training the storage holds fewer slots than the capacity; history steps before
    the first transition are masked, never looked up."""
    buffer = ReplayBuffer(obs_dim=2, action_dim=1, capacity=1_000_000, seed=2)
    fill(buffer, [5])
    batch = buffer.sample(batch_size=16, horizon=2, history=6)
    assert not batch.history_mask[0].any()  # 6 steps back is before step 0 for every start
