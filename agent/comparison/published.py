"""Published DeepMind Control results at 100k environment steps (action repeat 2), drawn beside a
comparison's learning curves: the mean of 3 seeds (and TD-MPC2's seeds where given).

Source: the per-task result files of the TD-MPC2 repository (nicklashansen/tdmpc2,
`results/<algorithm>/<task>.csv`, the step-100000 rows), which hold TD-MPC2's, DreamerV3's,
SAC's and TD-MPC's curves; those count environment steps, so 100k is 50k decisions here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PUBLISHED", "PUBLISHED_ENV_STEPS", "Published", "published_for"]

PUBLISHED_ENV_STEPS = 100_000


@dataclass(frozen=True)
class Published:
    method: str
    mean: float
    seeds: tuple[float, ...] = ()


PUBLISHED: dict[str, tuple[Published, ...]] = {
    "dm_control/pendulum-swingup-v0": (
        Published("TD-MPC2", 724.0, (564.0, 756.0, 852.0)),
        Published("DreamerV3", 699.0),
        Published("SAC", 96.0),
    ),
    "dm_control/reacher-easy-v0": (
        Published("TD-MPC2", 937.0, (860.0, 973.0, 978.0)),
        Published("DreamerV3", 872.0),
        Published("SAC", 540.0),
    ),
    "dm_control/cartpole-swingup-v0": (
        Published("TD-MPC2", 839.0),
        Published("DreamerV3", 677.0),
        Published("SAC", 835.0),
    ),
}


def published_for(env_id: str) -> tuple[Published, ...]:
    return PUBLISHED.get(env_id, ())
