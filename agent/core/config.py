"""Configuration of a run: one validated dataclass per component, bundled in `RunConfig`.

Sections (the keys of a `--config` JSON or TOML file, and of `config.json` in a run folder):

    train     TrainConfig       the loop: env, steps, seed, evaluation, checkpoints, logging
    agent     AgentConfig       optimisation: batch, learning rates, target updates, discount
    loss      LossConfig        world_model.training: horizon and loss coefficients
    planner   PlannerConfig     agent.core.planner: MPPI/CEM
    model     WorldModelConfig  world_model.model: reward/Q/policy/decoder heads
    dynamics  <the dynamics' own config>, chosen by train.world_model via world_model.registry

Precedence: dataclass defaults < `--config FILE` < explicit command-line flags. Every field has a
docstring (read by `field_docs` for `--help` and for the config table in TensorBoard).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
import json
import math
import textwrap
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from agent.core.planner import PlannerConfig
from world_model.model import DynamicsConfig, WorldModelConfig
from world_model.options import check_choices
from world_model.registry import dynamics_names, get_dynamics
from world_model.training import LossConfig

__all__ = [
    "ConfigError",
    "INT_MAX",
    "TrainConfig",
    "AgentConfig",
    "RunConfig",
    "check_device",
    "config_from_dict",
    "field_docs",
    "load_config_file",
    "merge_tables",
    "migrate_config",
    "select_dynamics",
]

DEVICES_HELP = "auto (cuda if available, else cpu), cpu, cuda or cuda:N"
INT_MAX = 2**63 - 1  # torch's and numpy's int64: a larger size, count or seed overflows in them


class ConfigError(ValueError):
    """An invalid configuration value, key or file; `str(err)` is one line."""


@dataclass
class TrainConfig:
    """The training loop (CleanRL-style arguments; one docstring per field)."""

    env_id: str = "Pendulum-v1"
    """gymnasium environment id with continuous actions; the tested ones"""
    max_episode_steps: int | None = None
    """episode length limit in decisions (None: the env's own, 200 for Pendulum-v1, 500 for the
    DeepMind Control tasks at action repeat 2)"""
    action_repeat: int | None = None
    """environment steps per agent decision, rewards summed (None: 2 for dm_control/ ids, as
    TD-MPC2 and DreamerV3, else 1); every other step count of the run counts decisions"""
    world_model: str = "gru"
    """latent dynamics, a name from world_model.registry"""
    steps: int = 5000
    """total environment steps"""
    seed: int = 1
    """seed of every random generator of the run"""
    logdir: str = "runs"
    """parent folder of the run folder runs/{env}__{world_model}__{seed}__{time} (not empty)"""
    device: str = "auto"
    """torch device: auto (cuda if available, else cpu), cpu, cuda or cuda:N"""
    seed_steps: int = 1000
    """initial steps with uniformly random actions before planning and updates start"""
    eval_every: int = 1000
    """evaluate every this many env steps (0: only at the end)"""
    eval_episodes: int = 5
    """episodes per evaluation (fixed eval seeds)"""
    eval_seed: int = 10_000
    """evaluation episode k is reset with seed eval_seed + k"""
    checkpoint_every: int = 2000
    """write a checkpoint at the first episode end after this many steps (and at the end)"""
    log_every: int = 200
    """log losses, planner and perf scalars every this many env steps"""
    diagnostics_every: int = 1000
    """run the dynamics' diagnostics every this many updates (and at the end of every run)"""
    figures: bool = True
    """at the end of a run of a geodesic world model, add agent.diagnose's figures to
    TensorBoard under figures/ (a few seconds; agent/inspection/figures.py)"""
    buffer_capacity: int = 1_000_000
    """replay buffer size (transitions); the oldest are overwritten beyond it"""
    num_envs: int = 1
    """environment copies collected from in lock-step and planned for in one batch
    (agent/core/collection.py); steps, seed steps, updates per step and every interval count the
    copies' steps together, so the update-to-data ratio is num_envs' own"""
    vector_env: Literal["sync", "async"] = "sync"
    """how copies run when num_envs > 1: sync (gymnasium's SyncVectorEnv, in this process;
    planning, not stepping, is what costs here) or async (AsyncVectorEnv, a process per copy)"""
    single_thread: bool = True
    """run torch on one CPU thread: these small networks ran 15x faster than with 2 threads
    while other processes shared the 2 cores, and no slower on idle cores"""
    compile: Literal["auto", "off"] = "auto"
    """auto: the world model's steps run compiled where its dynamics has compiled steps (the
    geodesic model's integrator: world_model/geodesic/compiled.py; its graphs take minutes at
    a machine's first run, then come from inductor's on-disk cache; eager, with one logged
    line, where inductor cannot build); off: every step eager"""
    progress: bool = True
    """show a progress bar on a terminal"""

    def __post_init__(self):
        if not self.env_id:
            raise ConfigError("train.env_id must be a non-empty string")
        if not self.logdir:
            raise ConfigError("train.logdir must be a non-empty path (use . for this folder)")
        _positive_int(self, "steps", "train")
        if self.max_episode_steps is not None:
            _positive_int(self, "max_episode_steps", "train")
        if self.action_repeat is not None:
            _positive_int(self, "action_repeat", "train")
        _nonnegative_int(self, "seed", "train")
        _nonnegative_int(self, "seed_steps", "train")
        _nonnegative_int(self, "eval_every", "train")
        _positive_int(self, "eval_episodes", "train")
        _nonnegative_int(self, "eval_seed", "train")
        _positive_int(self, "checkpoint_every", "train")
        _positive_int(self, "log_every", "train")
        _positive_int(self, "diagnostics_every", "train")
        _positive_int(self, "buffer_capacity", "train")
        _positive_int(self, "num_envs", "train")
        try:
            check_choices(self, "train")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if self.buffer_capacity < self.num_envs:
            raise ConfigError(
                f"train.buffer_capacity ({self.buffer_capacity}) must be >= train.num_envs "
                f"({self.num_envs})"
            )
        check_device(self.device, "train.device")


def check_device(name: str, what: str = "--device") -> None:
    """ConfigError unless `name` is auto, cpu, cuda or cuda:N (whether it exists is
    agent.core.agent.resolve_device's check)."""
    if not (name in ("auto", "cpu", "cuda") or (name[:5] == "cuda:" and name[5:].isdigit())):
        raise ConfigError(f"{what} must be {DEVICES_HELP}; got {name!r}")


@dataclass
class AgentConfig:
    """Optimisation of the world model and the policy prior (TD-MPC2's recipe)."""

    updates_per_step: float = 1.0
    """gradient updates per env step after the seed steps (fractions update every 1/x steps)"""
    batch_size: int = 128
    """sub-trajectories per update (TD-MPC2: 256; 128 halves the update's CPU time and learned as
    fast on Pendulum-v1: docs/measurements.md, "Numbers behind config defaults")"""
    pretrain_updates: int | None = None
    """extra updates when the seed steps end; None: as many as there were seed steps (TD-MPC2;
    far better on Pendulum-v1 than none: docs/measurements.md, "Numbers behind config
    defaults")"""
    lr: float = 1e-3
    """learning rate of the world model (RiemannianAdam) and the policy (Adam). TD-MPC2 uses
    3e-4 for millions of steps; at this project's few thousand, 1e-3 learned faster for both
    world models on Pendulum-v1 (docs/measurements.md, "Numbers behind config defaults")"""
    encoder_lr_scale: float = 0.3
    """the encoder's learning rate relative to lr"""
    dynamics_lr_scale: float = 1.0
    """the latent dynamics' learning rate relative to lr (the disk benchmark trains the geodesic
    model best at a higher rate than a GRU; a higher one on Pendulum-v1 was measured and not
    adopted: docs/measurements.md, "Numbers behind config defaults")"""
    grad_clip: float = 20.0
    """gradient-norm clip of each optimiser"""
    q_tau: float = 0.01
    """EMA rate of the target Q heads"""
    encoder_tau: float = 0.01
    """EMA rate of the target encoder (consistency targets)"""
    discount: float | None = None
    """TD discount; None: TD-MPC2's heuristic from the episode length (200 steps -> 0.975)"""
    scale_tau: float = 0.01
    """EMA rate of the running Q scale that normalises the policy objective"""

    def __post_init__(self):
        _positive_int(self, "batch_size", "agent")
        if self.pretrain_updates is not None:
            _nonnegative_int(self, "pretrain_updates", "agent")
        if not self.updates_per_step > 0:
            raise ConfigError(f"agent.updates_per_step must be > 0, got {self.updates_per_step}")
        for name in ("lr", "encoder_lr_scale", "dynamics_lr_scale", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"agent.{name} must be > 0, got {getattr(self, name)}")
        for name in ("q_tau", "encoder_tau", "scale_tau"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"agent.{name} must lie in (0, 1], got {getattr(self, name)}")
        if self.discount is not None and not 0 < self.discount <= 1:
            raise ConfigError(f"agent.discount must lie in (0, 1] or be null, got {self.discount}")


def _positive_int(obj, name: str, section: str) -> None:
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{section}.{name} must be a positive integer, got {value!r}")


def _nonnegative_int(obj, name: str, section: str) -> None:
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{section}.{name} must be a non-negative integer, got {value!r}")


# ----------------------------------------------------------------------- generic helpers


def _type_ok(tp: Any, value: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(arg, value) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is typing.Literal:  # the choices are checked by the config's own __post_init__
        return all(isinstance(value, type(arg)) for arg in typing.get_args(tp))
    return True


def _range_problem(value: Any) -> str | None:
    """Why a value of the right type is still no config value: a float that is not finite (nan
    and inf would reach the optimisers and losses), an int beyond 64 bits (torch and numpy
    overflow on it as a size or seed); None if it is fine."""
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
        return f"must fit in 64 bits (at most {INT_MAX})"
    if isinstance(value, tuple | list):
        return next((p for p in map(_range_problem, value) if p is not None), None)
    return None


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is typing.Literal:
        return " or ".join(sorted({type(a).__name__ for a in typing.get_args(tp)}))
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def config_from_dict(cls: type, data: Any, section: str, base: Any = None) -> Any:
    """Build the dataclass `cls` from `data` (a dict of overrides of `base`, or of the defaults),
    checking key names and value types; any problem raises ConfigError with one line."""
    if not isinstance(data, dict):
        raise ConfigError(f"[{section}] must be a table of key = value, got {type(data).__name__}")
    valid = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in [{section}]; valid keys: {', '.join(sorted(valid))}"
        )
    hints = typing.get_type_hints(cls)
    values = {}
    if base is not None:
        values = {f.name: copy.deepcopy(getattr(base, f.name)) for f in fields(cls) if f.init}
    for key, value in data.items():
        tp = hints[key]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):  # a nested table
            values[key] = config_from_dict(tp, value, f"{section}.{key}", values.get(key))
            continue
        if not _type_ok(tp, value):
            raise ConfigError(f"{section}.{key} must be {_type_name(tp)}, got {value!r}")
        problem = _range_problem(value)
        if problem is not None:
            raise ConfigError(f"{section}.{key} {problem}, got {value!r}")
        values[key] = value
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err).splitlines()[0]) from None


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (attribute docstrings, read from source)."""
    return dict(_field_docs(cls))


@functools.cache
def _field_docs(cls: type) -> dict[str, str]:
    # parsing the source is most of a command's start-up (0.4 s for agent.train's parser)
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def merge_tables(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra`'s keys set, nested tables merged key by key (a new dict)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_tables(out[key], value)
        else:
            out[key] = value
    return out


def select_dynamics(section: Any, world_model: str) -> Any:
    """A [dynamics] section for `world_model`: the keys shared by every world model, then its
    own sub-table [dynamics.<world_model>] merged on top; other world models' sub-tables are
    dropped (a config file can serve every world model, as configs/dmc.toml does)."""
    if not isinstance(section, dict):
        return section  # from_dict reports it
    names = set(dynamics_names())
    shared = {k: v for k, v in section.items() if not (k in names and isinstance(v, dict))}
    own = section.get(world_model)
    return merge_tables(shared, own) if isinstance(own, dict) else shared


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON (.json) or TOML (.toml) file of sections -> {key: value}."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                raise ConfigError("TOML config files need Python >= 3.11; use JSON") from None
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"config file {str(path)!r} must end in .json or .toml")
    except (json.JSONDecodeError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        detail = str(err).splitlines()[0]
        raise ConfigError(f"config file {str(path)!r} is not valid: {detail}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a table of sections")
    return data


# ----------------------------------------------------------------------- the bundle


SECTIONS: dict[str, type] = {
    "train": TrainConfig,
    "agent": AgentConfig,
    "loss": LossConfig,
    "planner": PlannerConfig,
    "model": WorldModelConfig,
}


@dataclass
class RunConfig:
    """Everything that defines a run."""

    train: TrainConfig = field(default_factory=TrainConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    model: WorldModelConfig = field(default_factory=WorldModelConfig)
    dynamics: DynamicsConfig | None = None
    """the config of train.world_model's dynamics (None: its defaults)"""

    def __post_init__(self):
        spec = get_dynamics(self.train.world_model)
        if self.dynamics is None:
            self.dynamics = spec.config_cls()
        elif not isinstance(self.dynamics, spec.config_cls):
            raise ConfigError(
                f"[dynamics] of world model {spec.name!r} must be a {spec.config_cls.__name__}"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
        """Overrides by section (as in a config file) on top of `base` (or the defaults)."""
        if not isinstance(data, dict):
            raise ConfigError("a run config must be a table of sections")
        unknown = sorted(set(data) - set(SECTIONS) - {"dynamics"})
        if unknown:
            raise ConfigError(
                f"unknown config section [{unknown[0]}]; sections: "
                + ", ".join([*SECTIONS, "dynamics"])
            )
        base = base or cls()
        parts = {
            name: config_from_dict(klass, data.get(name, {}), name, getattr(base, name))
            for name, klass in SECTIONS.items()
        }
        try:
            spec = get_dynamics(parts["train"].world_model)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        same_dynamics = parts["train"].world_model == base.train.world_model
        dyn_base = base.dynamics if same_dynamics else None
        dynamics = select_dynamics(data.get("dynamics", {}), spec.name)
        parts["dynamics"] = config_from_dict(spec.config_cls, dynamics, "dynamics", dyn_base)
        return cls(**parts)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in fields(self)}

    def markdown(self) -> str:
        """`table()` as a markdown table (TensorBoard's text tab)."""
        rows = ["| key | value | meaning |", "| --- | --- | --- |"]
        return "\n".join(rows + [f"| {k} | {v} | {d} |" for k, v, d in self.table()])

    def table(self) -> list[tuple[str, str, str]]:
        """(section.key, value, docstring) rows for the TensorBoard text table."""
        rows = []

        def walk(prefix: str, part: Any) -> None:
            docs = field_docs(type(part))
            for f in fields(part):
                value = getattr(part, f.name)
                if dataclasses.is_dataclass(value):
                    walk(f"{prefix}{f.name}.", value)
                else:
                    rows.append((f"{prefix}{f.name}", repr(value), docs.get(f.name, "")))

        for f in fields(self):
            walk(f"{f.name}.", getattr(self, f.name))
        return rows


def migrate_config(data: dict[str, Any], version: int) -> dict[str, Any]:
    """A checkpoint's config (`to_dict` form) of format `version` in today's layout. Version 1
    had a flat [dynamics] table: the dynamics' config class migrates it if it has a
    `migrate_v1(table) -> table`; then, for every version, its `migrate_removed(table) -> table`
    drops or refuses options removed since (a ValueError there, one line, becomes a
    ConfigError)."""
    if not isinstance(data, dict):
        return data
    train = data.get("train", {})
    name = train.get("world_model", TrainConfig.world_model) if isinstance(train, dict) else None
    try:
        config_cls = get_dynamics(name).config_cls
    except ValueError:
        return data  # an unknown world model: from_dict says so
    if not isinstance(data.get("dynamics"), dict):
        return data
    steps = [getattr(config_cls, "migrate_v1", None)] if version < 2 else []
    steps.append(getattr(config_cls, "migrate_removed", None))  # options removed since
    table = data["dynamics"]
    try:
        for migrate in filter(None, steps):
            table = migrate(table)
    except ValueError as err:
        raise ConfigError(
            f"[dynamics] of format version {version}: {str(err).splitlines()[0]}"
        ) from None
    return {**data, "dynamics": table}
