"""Registry of latent dynamics: the choices of `--world-model`.

The built-in dynamics are an explicit table (`BUILTIN_DYNAMICS`: name -> module, dynamics class,
config class, description); a built-in's module is imported on first use of its name, so
listing the names (help texts) imports nothing, and a module that fails to import raises its own
error when its dynamics is asked for (it is never silently skipped). Plug-ins register
themselves with a class decorator when their module is imported:

    @register_dynamics("toy", ToyConfig, "a plug-in dynamics")
    class ToyDynamics(Dynamics): ...
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

from world_model.model import Dynamics, DynamicsConfig

__all__ = [
    "BUILTIN_DYNAMICS",
    "BuiltinDynamics",
    "DynamicsSpec",
    "register_dynamics",
    "dynamics_names",
    "get_dynamics",
    "build_dynamics",
]


@dataclass(frozen=True)
class BuiltinDynamics:
    """Where a built-in dynamics lives: `module` defines `dynamics` (a Dynamics subclass built as
    `cls(obs_dim, action_dim, config)`) and `config` (its config dataclass)."""

    module: str
    dynamics: str
    config: str
    description: str = ""


BUILTIN_DYNAMICS: dict[str, BuiltinDynamics] = {
    "gru": BuiltinDynamics(
        "world_model.gru",
        "GRUDynamics",
        "GRUConfig",
        "GRU cell on a SimNorm latent (RSSM deterministic path)",
    ),
    "geodesic": BuiltinDynamics(
        "world_model.geodesic",
        "GeodesicDynamics",
        "GeodesicConfig",
        "GeodesicCrossAttention: Boris-BAOAB on the Poincare ball",
    ),
}


@dataclass(frozen=True)
class DynamicsSpec:
    name: str
    config_cls: type[DynamicsConfig]
    dynamics_cls: type[Dynamics]
    description: str = ""


_PLUGINS: dict[str, DynamicsSpec] = {}  # filled by register_dynamics
_LOADED: dict[str, DynamicsSpec] = {}  # built-ins resolved so far (get_dynamics)


def register_dynamics(name: str, config_cls: type, description: str = ""):
    """Class decorator for plug-ins: register `cls(obs_dim, action_dim, config)` under `name`
    (a built-in's name, or one taken by another class, is refused)."""
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"register_dynamics({name!r}): config_cls must be a dataclass")

    def decorator(cls: type[Dynamics]) -> type[Dynamics]:
        if name in BUILTIN_DYNAMICS:
            builtin = BUILTIN_DYNAMICS[name]
            raise ValueError(
                f"dynamics {name!r} is already registered by the built-in "
                f"{builtin.module}.{builtin.dynamics}"
            )
        existing = _PLUGINS.get(name)
        if existing is not None and existing.dynamics_cls.__qualname__ != cls.__qualname__:
            raise ValueError(f"dynamics {name!r} is already registered by {existing.dynamics_cls}")
        _PLUGINS[name] = DynamicsSpec(name, config_cls, cls, description)
        return cls

    return decorator


def dynamics_names() -> list[str]:
    """Every name: the built-ins and the registered plug-ins, without importing anything (for
    help texts: a broken or slow module is only imported when it is asked for)."""
    return sorted(set(BUILTIN_DYNAMICS) | set(_PLUGINS))


def _load_builtin(name: str) -> DynamicsSpec:
    if name not in _LOADED:
        builtin = BUILTIN_DYNAMICS[name]
        module = importlib.import_module(builtin.module)
        _LOADED[name] = DynamicsSpec(
            name,
            getattr(module, builtin.config),
            getattr(module, builtin.dynamics),
            builtin.description,
        )
    return _LOADED[name]


def get_dynamics(name: str) -> DynamicsSpec:
    """The spec of `name` (a built-in's module is imported here, on first use)."""
    if name in BUILTIN_DYNAMICS:
        return _load_builtin(name)
    if name not in _PLUGINS:
        raise ValueError(f"unknown world model {name!r}; available: {', '.join(dynamics_names())}")
    return _PLUGINS[name]


def build_dynamics(
    name: str, obs_dim: int, action_dim: int, config: DynamicsConfig | None = None
) -> Dynamics:
    """Instantiate the registered dynamics `name` with its config (None: its defaults)."""
    spec = get_dynamics(name)
    if config is None:
        config = spec.config_cls()
    elif not isinstance(config, spec.config_cls):
        raise TypeError(f"dynamics {name!r} takes a {spec.config_cls.__name__}, got {type(config)}")
    return spec.dynamics_cls(obs_dim, action_dim, config)
