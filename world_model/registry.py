"""Registry of latent dynamics: the choices of `--world-model`.

A dynamics registers itself, with its config dataclass, when its module is imported:

    @register_dynamics("gru", GRUConfig, "GRU (RSSM deterministic path) baseline")
    class GRUDynamics(Dynamics): ...

The project's own dynamics modules are imported lazily on first use (`BUILTIN_MODULES`), so
`world_model/geodesic.py` joins the CLI's choices as soon as the file exists and registers
"geodesic", without any change to `agent/`. A module that exists but fails to import raises
its own error (it is never silently skipped).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from dataclasses import dataclass

from world_model.model import Dynamics, DynamicsConfig

__all__ = [
    "BUILTIN_MODULES",
    "DynamicsSpec",
    "register_dynamics",
    "available_dynamics",
    "dynamics_names",
    "get_dynamics",
    "build_dynamics",
]

BUILTIN_MODULES: dict[str, str] = {
    "gru": "world_model.gru",
    "geodesic": "world_model.geodesic",
}


@dataclass(frozen=True)
class DynamicsSpec:
    name: str
    config_cls: type[DynamicsConfig]
    dynamics_cls: type[Dynamics]
    description: str = ""


_REGISTRY: dict[str, DynamicsSpec] = {}


def register_dynamics(name: str, config_cls: type, description: str = ""):
    """Class decorator: register `cls(obs_dim, action_dim, config)` under `name`."""
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"register_dynamics({name!r}): config_cls must be a dataclass")

    def decorator(cls: type[Dynamics]) -> type[Dynamics]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.dynamics_cls.__qualname__ != cls.__qualname__:
            raise ValueError(f"dynamics {name!r} is already registered by {existing.dynamics_cls}")
        _REGISTRY[name] = DynamicsSpec(name, config_cls, cls, description)
        return cls

    return decorator


def _import_builtins() -> None:
    for module in BUILTIN_MODULES.values():
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def dynamics_names() -> list[str]:
    """Registered names plus the project's own modules that exist, without importing them
    (for help texts: a broken or slow module is only imported when it is asked for)."""
    builtin = [n for n, m in BUILTIN_MODULES.items() if importlib.util.find_spec(m) is not None]
    return sorted(set(builtin) | set(_REGISTRY))


def available_dynamics() -> list[str]:
    """Names of every registered dynamics (importing the project's own modules first)."""
    _import_builtins()
    return sorted(_REGISTRY)


def get_dynamics(name: str) -> DynamicsSpec:
    if name not in _REGISTRY:
        module = BUILTIN_MODULES.get(name)
        if module is not None and importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown world model {name!r}; available: {', '.join(available_dynamics())}"
        )
    return _REGISTRY[name]


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
