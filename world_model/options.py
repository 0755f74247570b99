"""Config options that name one of a fixed set of choices: the field's `Literal` type is their one
definition. `check_choices` validates every such field of a config dataclass (its
`__post_init__` calls it), `choices` lists one field's choices; the command line's flags and
their help read the same types (agent/cli.py)."""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

__all__ = ["choices", "check_choices"]


@functools.cache
def _literal_fields(cls: type) -> dict[str, tuple[Any, ...]]:
    """{field name: its choices} for every Literal-typed init field of the dataclass `cls`."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: typing.get_args(hints[f.name])
        for f in dataclasses.fields(cls)
        if f.init and typing.get_origin(hints[f.name]) is typing.Literal
    }


def choices(cls: type, name: str) -> tuple[Any, ...]:
    """The choices of the Literal-typed field `name` of the dataclass `cls`."""
    return _literal_fields(cls)[name]


def check_choices(obj: Any, where: str) -> None:
    """ValueError (one line, naming `where`.field and its choices) if a Literal-typed field of
    the dataclass instance `obj` holds a value outside its choices."""
    for name, allowed in _literal_fields(type(obj)).items():
        value = getattr(obj, name)
        if value not in allowed:
            raise ValueError(f"{where}.{name} must be one of {allowed}, got {value!r}")
