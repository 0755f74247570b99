"""Command-line plumbing shared by the `python -m agent.*` commands (library code).

- `OneLineParser`: argparse whose errors are one line and exit 2.
- `as_config_error`, `nonempty`, `out_of_range`: bad input found while building, a path that
  is empty, an int flag outside its range, each as one line.
- `add_config_flags` / `config_overrides`: a flag for every field of every config section,
  generated from the dataclasses (`--planner.horizon 5`, `--dynamics.head.wilson path_ordered`;
  nested dataclass fields get dotted paths), with the field's docstring and default as help.
  Nothing is kept by hand: a new config field is a new flag.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from agent.core.config import INT_MAX, ConfigError, field_docs, merge_tables

__all__ = [
    "folder_problem",
    "OneLineParser",
    "PATH_METAVARS",
    "add_config_flags",
    "as_config_error",
    "config_overrides",
    "dotted_table",
    "field_doc",
    "markdown_table",
    "nonempty",
    "out_of_range",
    "parse_value",
]

_DEST = "config:"  # argparse dest prefix of the generated flags


PATH_METAVARS = ("FILE", "DIR", "RUN_DIR", "OUT")  # the metavars of the commands' path arguments


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints usage and the error on two) and exit 2;
    an argument whose metavar names a path (PATH_METAVARS) and that has no type of its own
    takes no empty string (`Path("")` would silently be this folder)."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        if kwargs.get("metavar") in PATH_METAVARS and "type" not in kwargs:
            kwargs["type"] = nonempty
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


@contextlib.contextmanager
def as_config_error() -> Iterator[None]:
    """A ValueError raised inside (a component's own check when it is built from a validated
    config) or a folder that cannot be made because a file is in its way, as a one-line
    ConfigError: bad input (exit 2), not a crash. Other OSErrors (a full disk, a read-only
    folder) pass: the commands call those a failed write."""
    try:
        yield
    except ConfigError:
        raise
    except (FileExistsError, NotADirectoryError) as err:
        where = f" {str(err.filename)!r}" if err.filename else ""
        raise ConfigError(
            f"cannot create{where}: {err.strerror or err} (a file is in the way)"
        ) from None
    except ValueError as err:
        raise ConfigError((str(err).strip().splitlines() or [type(err).__name__])[0]) from None


def nonempty(text: str) -> str:
    """argparse type of a path flag: the empty string is an error (Path("") is this folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (use . for this folder)")
    return text


def folder_problem(flag: str, folder: str) -> str | None:
    """Why an output folder given to `flag` cannot be made or used: a file there, or a file in
    the way on its path; None when it can (it may exist as a folder or not exist yet)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        return f"{flag} {folder!r} is a file, not a folder"
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{flag} {folder!r}: {str(parent)!r} is a file (a file is in the way)"
            break
    return None


def out_of_range(flag: str, value: int | None, minimum: int) -> str | None:
    """'FLAG must be >= minimum, got v' (or <= INT_MAX: int64, as torch and numpy read it) for
    an int flag's value outside [minimum, INT_MAX]; None inside it and for None."""
    if value is None or minimum <= value <= INT_MAX:
        return None
    bound = f">= {minimum}" if value < minimum else f"<= {INT_MAX}"
    return f"{flag} must be {bound}, got {value}"


def _walk(cls: type, prefix: str = "") -> Iterator[tuple[str, Any, str, Any]]:
    """(dotted path, type hint, docstring, default) of every init field of the dataclass `cls`,
    descending into dataclass-typed fields."""
    hints, docs, defaults = typing.get_type_hints(cls), field_docs(cls), cls()
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp, value = hints[f.name], getattr(defaults, f.name)
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            yield from _walk(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", tp, docs.get(f.name, ""), value


def _options(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _metavar(tp: Any) -> str:
    names = []
    for option in _options(tp):
        if option is type(None):
            names.append("none")
        elif typing.get_origin(option) is typing.Literal:
            names.extend(str(a) for a in typing.get_args(option))
        elif typing.get_origin(option) is tuple:
            args = typing.get_args(option)
            names.append(",".join("..." if a is Ellipsis else _metavar(a) for a in args))
        else:
            names.append(getattr(option, "__name__", str(option)).upper())
    return "|".join(names)


def parse_value(text: str, tp: Any) -> Any:
    """The command-line string `text` as a value of the type hint `tp` (int, float, str, bool,
    None in a union); ValueError (one line) if it is none of them."""
    for option in _options(tp):
        if option is type(None) and text.lower() in ("none", "null"):
            return None
    for option in _options(tp):
        if typing.get_origin(option) is tuple:  # "1.0,0.01" -> (1.0, 0.01)
            parts, kinds = text.split(","), typing.get_args(option)
            if len(kinds) == 2 and kinds[1] is Ellipsis:
                kinds = (kinds[0],) * len(parts)
            if len(parts) == len(kinds):
                return tuple(parse_value(p.strip(), k) for p, k in zip(parts, kinds, strict=True))
            continue
        if option is bool:
            lowered = text.lower()
            if lowered in ("true", "yes", "1", "on"):
                return True
            if lowered in ("false", "no", "0", "off"):
                return False
        elif option is int:
            try:
                return int(text)
            except ValueError:
                pass
        elif option is float:
            try:
                return float(text)
            except ValueError:
                pass
        elif option is str or typing.get_origin(option) is typing.Literal:
            return text  # a Literal's choices are checked by the config's own __post_init__
    raise ValueError(f"{text!r} is not {_metavar(tp).lower().replace('|', ' or ')}")


def add_config_flags(parser: argparse.ArgumentParser, sections: dict[str, type]) -> None:
    """One flag `--{section}.{path}` per config field of each section's dataclass, in an
    argument group per section; unset flags leave the config alone."""
    for section, cls in sections.items():
        title = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        group = parser.add_argument_group(f"[{section}] {cls.__name__}", title)
        for path, tp, doc, default in _walk(cls):

            def convert(text: str, tp=tp, flag=f"--{section}.{path}") -> Any:
                try:
                    return parse_value(text, tp)
                except ValueError as err:
                    raise argparse.ArgumentTypeError(f"{flag}: {err}") from None

            group.add_argument(
                f"--{section}.{path}",
                dest=f"{_DEST}{section}.{path}",
                type=convert,
                default=argparse.SUPPRESS,
                metavar=_metavar(tp),
                help=f"{doc} (default: {default!r})".replace("%", "%%"),
            )


def dotted_table(path: str, value: Any) -> dict[str, Any]:
    """ "a.b.c", v -> {"a": {"b": {"c": v}}}."""
    *parents, leaf = path.split(".")
    table: dict[str, Any] = {leaf: value}
    for key in reversed(parents):
        table = {key: table}
    return table


def field_doc(sections: dict[str, type], path: str) -> str:
    """The docstring of the field at the dotted `path` ("dynamics.head.kernel"), or ""."""
    section, *keys = path.split(".")
    cls = sections.get(section)
    for key in keys[:-1]:
        hints = typing.get_type_hints(cls) if cls is not None else {}
        cls = hints.get(key)
    return field_docs(cls).get(keys[-1], "") if cls is not None else ""


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The generated flags that were given, as nested sections {section: {key: value}} (a
    dotted path becomes nested tables), ready for RunConfig.from_dict."""
    out: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if not dest.startswith(_DEST):
            continue
        out = merge_tables(out, dotted_table(dest[len(_DEST) :], value))
    return out


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """Lines of a markdown table, every column padded to its widest cell (the commands' text
    reports)."""
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return [line(columns), rule, *map(line, rows)]
