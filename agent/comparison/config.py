"""What a comparison compares: CompareConfig (methods, seeds, steps, evaluation points, the
RunConfig overrides, the ablations), validated at construction so that bad input fails before
anything runs.

A `--config` file applies by section, as `agent.train` applies it: [dynamics] keys go to every
world model, a sub-table [dynamics.NAME] to world model NAME only (agent.core.config's
`select_dynamics`). An ablation (agent/comparison/ablations.py) is one more method: the geodesic
model's config with the ablation's [dynamics] overrides on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.comparison.ablations import (
    ABLATIONS,
    FULL_MODEL,
    ablated_dynamics,
    ablation_of_row,
    check_ablations,
    split_methods,
)
from agent.core.config import INT_MAX, ConfigError, RunConfig, TrainConfig, select_dynamics
from world_model.registry import get_dynamics

__all__ = ["SAC", "DEFAULT_POINTS", "DEFAULT_WORLD_MODELS", "CompareConfig", "default_points"]

SAC = "sac"
DEFAULT_POINTS = (1000, 2500, 5000)
DEFAULT_WORLD_MODELS = ("geodesic", "gru")


def default_points(steps: int) -> tuple[int, ...]:
    """1k, 2.5k and 5k env steps below `steps`, then `steps` itself."""
    return (*(p for p in DEFAULT_POINTS if p < steps), steps)


def _positive(value: Any, flag: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")
    if value > INT_MAX:  # torch and numpy overflow on it
        raise ConfigError(f"{flag} must be <= {INT_MAX}, got {value}")


@dataclass
class CompareConfig:
    """One comparison (the command line's flags), validated at construction."""

    env_id: str = "Pendulum-v1"
    """gymnasium environment id with continuous actions"""
    seeds: int = 3
    """every method trains once per seed first_seed .. first_seed + seeds - 1"""
    first_seed: int = 1
    """the first of the seeds (a comparison's seeds split across machines or sessions: the
    first 1, the second --first-seed 2, merged with `agent.compare --merge`)"""
    steps: int = 5000
    """env steps of every run"""
    points: tuple[int, ...] = ()
    """env steps at which every run is evaluated (sorted; `steps` is always the last); empty:
    default_points(steps)"""
    world_models: tuple[str, ...] = DEFAULT_WORLD_MODELS
    """world models from world_model.registry, each trained as an agent"""
    sac: bool = True
    """also train SB3's SAC (default settings) as the model-free reference"""
    episodes: int = 10
    """deterministic evaluation episodes at each point"""
    overrides: dict[str, Any] = field(default_factory=dict)
    """RunConfig overrides by section (a --config file); [dynamics.NAME] for one world model"""
    reference: str | None = None
    """the method every other one is compared with seed by seed (the paired table); None: the
    full geodesic model when there are ablations, else gru when it is compared, else the first
    method"""
    ablations: tuple[str, ...] = ()
    """names from agent.comparison.ablations.ABLATIONS, each trained as one more method (its
    row) beside the full geodesic model, which must be compared too"""
    train: TrainConfig = field(init=False, repr=False)
    """the [train] section every method shares (env, episode limit, eval seed, threads)"""

    def __post_init__(self):
        if not isinstance(self.env_id, str) or not self.env_id:
            raise ConfigError(f"--env must be a gymnasium environment id, got {self.env_id!r}")
        _positive(self.seeds, "--seeds")
        _positive(self.first_seed, "--first-seed")
        _positive(self.first_seed + self.seeds - 1, "--first-seed + --seeds - 1")
        _positive(self.steps, "--steps")
        _positive(self.episodes, "--episodes")
        for point in self.points:
            _positive(point, "every --at value")
            if point > self.steps:
                raise ConfigError(f"--at {point} lies beyond --steps {self.steps}")
        self.points = (
            tuple(sorted({*self.points, self.steps})) if self.points else default_points(self.steps)
        )
        self.world_models = tuple(self.world_models)
        if len(set(self.world_models)) != len(self.world_models):
            raise ConfigError(f"--world-models names a world model twice: {self.world_models}")
        if not self.world_models and not self.sac:
            raise ConfigError("nothing to compare: no --world-models and --no-sac")
        for name in self.world_models:
            if name == SAC:
                raise ConfigError("SAC is not a world model; it runs unless --no-sac is given")
            try:
                get_dynamics(name)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        self.ablations = check_ablations(self.ablations)
        if self.ablations and FULL_MODEL not in self.world_models:
            raise ConfigError(
                f"--ablations change the {FULL_MODEL} world model, which must be compared too "
                f"(--world-models {FULL_MODEL} ...)"
            )
        if self.reference is None and self.ablations:
            self.reference = FULL_MODEL
        elif self.reference is None:
            self.reference = "gru" if "gru" in self.world_models else self.methods[0]
        elif self.reference not in self.methods:
            raise ConfigError(
                f"--reference {self.reference!r} is not compared here; "
                f"choose one of: {', '.join(self.methods)}"
            )
        if not isinstance(self.overrides, dict):
            raise ConfigError("--config must hold a table of sections")
        if not isinstance(self.overrides.get("train", {}), dict):
            raise ConfigError("[train] must be a table of key = value")
        self.train = self._train_config()
        for name in self.agent_methods:
            self.run_config(name, seed=1)  # every override checked before anything runs
        full = self.run_config(FULL_MODEL, seed=1).dynamics if self.ablations else None
        for name in self.ablations:
            if self.run_config(ABLATIONS[name].row, seed=1).dynamics == full:
                raise ConfigError(
                    f"ablation {name!r} changes nothing: the --config already sets "
                    f"{_dotted(ABLATIONS[name].dynamics)} for {FULL_MODEL}"
                )

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.first_seed, self.first_seed + self.seeds))

    @property
    def methods(self) -> list[str]:
        """World models, ablation rows, then SAC."""
        return [*self.agent_methods, *([SAC] if self.sac else [])]

    @property
    def agent_methods(self) -> list[str]:
        """The methods trained as agents: the world models, then each ablation's row."""
        return [*self.world_models, *(ABLATIONS[name].row for name in self.ablations)]

    @property
    def run_order(self) -> list[tuple[str, int]]:
        """(method, seed) in training order: one method at a time over all seeds, the references
        first (SAC, then the paired table's reference), so that a long comparison that is
        stopped and resumed has complete references early and every later run is compared as
        soon as it finishes."""
        first = [m for m in (SAC, self.reference) if m in self.methods]
        ordered = list(dict.fromkeys(first + self.methods))  # SAC alone is its own reference
        return [(method, seed) for method in ordered for seed in self.seed_list]

    def _train_overrides(self, world_model: str, seed: int) -> dict[str, Any]:
        return {
            **self.overrides.get("train", {}),
            "env_id": self.env_id,
            "world_model": world_model,
            "seed": seed,
            "steps": self.steps,
            "eval_every": 0,  # evaluation happens at the points, from compare's callback
            "eval_episodes": self.episodes,
        }

    def _train_config(self) -> TrainConfig:
        """The [train] section every method shares (env, episode limit, eval seed, threads)."""
        world_model = self.world_models[0] if self.world_models else TrainConfig.world_model
        return RunConfig.from_dict({"train": self._train_overrides(world_model, 1)}).train

    def run_config(self, method: str, seed: int) -> RunConfig:
        """agent.train's defaults < the overrides (with the world model's [dynamics]) < an
        ablation's [dynamics] overrides (when `method` is an ablation's row) < this run."""
        ablation = ablation_of_row(method)
        world_model = method if ablation is None else FULL_MODEL
        dynamics = select_dynamics(self.overrides.get("dynamics", {}), world_model)
        sections = {
            **self.overrides,
            "train": self._train_overrides(world_model, seed),
            "dynamics": dynamics if ablation is None else ablated_dynamics(dynamics, ablation),
        }
        try:
            return RunConfig.from_dict(sections)
        except ConfigError as err:
            hint = (
                " (keys of one world model go in [dynamics.NAME])" if "dynamics" in str(err) else ""
            )
            what = f"world model {method!r}" if ablation is None else f"ablation {ablation!r}"
            raise ConfigError(f"{what}: {err}{hint}") from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompareConfig:
        """The comparison `to_dict` describes (a results.json), validated again."""
        try:
            methods, seeds = list(data["methods"]), [int(s) for s in data["seeds"]]
            world_models, ablations = split_methods(methods, SAC)
            return cls(
                env_id=data["env_id"],
                seeds=max(seeds) - min(seeds) + 1,
                first_seed=min(seeds),
                steps=data["steps"],
                points=tuple(data["points"]),
                world_models=world_models,
                sac=SAC in methods,
                episodes=data["episodes"],
                overrides=data.get("overrides", {}),
                reference=data.get("reference"),
                ablations=ablations,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"not a comparison's results ({type(err).__name__}: {err})") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "seeds": self.seed_list,
            "steps": self.steps,
            "points": list(self.points),
            "methods": self.methods,
            "reference": self.reference,
            "episodes": self.episodes,
            "eval_seeds": [self.train.eval_seed + k for k in range(self.episodes)],
            "overrides": self.overrides,
            **self._ablation_table(),
        }

    def _ablation_table(self) -> dict[str, Any]:
        """{"ablations": each row's [dynamics] overrides of the full model} for a reader of
        results.json (from_dict reads the ablations back from the methods); {} without any."""
        if not self.ablations:
            return {}
        return {"ablations": {ABLATIONS[n].row: ABLATIONS[n].dynamics for n in self.ablations}}


def _dotted(table: dict[str, Any], prefix: str = "dynamics.") -> str:
    """{"head": {"wilson": "none"}} -> "dynamics.head.wilson = 'none'" (one key per ablation)."""
    key, value = next(iter(table.items()))
    if isinstance(value, dict):
        return _dotted(value, f"{prefix}{key}.")
    return f"{prefix}{key} = {value!r}"
