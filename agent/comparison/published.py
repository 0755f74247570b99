"""Published DeepMind Control results at 100k environment steps (action repeat 2), drawn beside a
comparison's learning curves and listed in the README's table: the mean over the project's own
seeds (and TD-MPC2's three seeds where given).

Sources, each the step-100k rows of a project's own result files:
- TD-MPC2, DreamerV3 and SAC: the TD-MPC2 repository (nicklashansen/tdmpc2,
  `results/<algorithm>/<task>.csv`, 3 seeds), which counts environment steps;
- MR.Q and SimbaV2: the SimbaV2 repository (dojeon-ai/SimbaV2) republishes MR.Q's curves
  (`mrq.csv`, 10 seeds; MR.Q's own file counts agent steps, so its 100k-environment-step value
  is its 50k row) and its own at 2 and 8 updates per step (10 and 5 seeds).
100k environment steps are 50k decisions here (configs/dmc.toml).
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
    """the per-seed values where the source gives them"""
    n_seeds: int = 3
    """how many seeds `mean` averages"""


PUBLISHED: dict[str, tuple[Published, ...]] = {
    "dm_control/pendulum-swingup-v0": (
        Published("TD-MPC2", 724.0, (564.0, 756.0, 852.0)),
        Published("DreamerV3", 699.0),
        Published("SAC", 96.0),
        Published("MR.Q", 617.0, n_seeds=10),
        Published("SimbaV2 (UTD 2)", 245.0, n_seeds=10),
        Published("SimbaV2 (UTD 8)", 826.0, n_seeds=5),
    ),
    "dm_control/reacher-easy-v0": (
        Published("TD-MPC2", 937.0, (860.0, 973.0, 978.0)),
        Published("DreamerV3", 872.0),
        Published("SAC", 540.0),
        Published("MR.Q", 940.0, n_seeds=10),
        Published("SimbaV2 (UTD 2)", 967.0, n_seeds=10),
        Published("SimbaV2 (UTD 8)", 937.0, n_seeds=5),
    ),
    "dm_control/cartpole-swingup-v0": (
        Published("TD-MPC2", 839.0),
        Published("DreamerV3", 677.0),
        Published("SAC", 835.0),
        Published("MR.Q", 853.0, n_seeds=10),
        Published("SimbaV2 (UTD 2)", 861.0, n_seeds=10),
        Published("SimbaV2 (UTD 8)", 880.0, n_seeds=5),
    ),
}


def published_for(env_id: str) -> tuple[Published, ...]:
    return PUBLISHED.get(env_id, ())
