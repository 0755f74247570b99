"""Command-line fuzz: every flag of `python -m agent.train`, `agent.evaluate`, `agent.compare` and
`agent.diagnose`, read from the command's own argparse parser (`build_parser()`; for agent.train
also the flag agent/cli.py generates for every config field, under each world model of
world_model/registry.py), gets the bad values of its kind (BAD); unknown flags, a stray and a
missing positional too. Each case calls the command's `main(argv)` in-process.

A value that must be rejected (a wrong type, nan or inf, an int beyond 64 bits, a negative int,
an empty string, an unknown name, a missing or garbage path) gives exit 2, one line on stderr
that starts with `{prog}: error:` and names the flag, its config field or the value, nothing on
stdout, and nothing made: no run or output folder, nothing in the working folder, the files the
paths name untouched. A value whose range is the field's own business (0; -1 and 1e30 for a
float) is either rejected the same way or accepted as given: the run's config holds it. Nothing
trains: the step after validation (agent.train's Trainer, agent.compare's run_comparison,
agent.evaluate's episodes, agent.diagnose's state sampling) is a stub that records acceptance.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agent import compare, diagnose, evaluate, launch
from agent import train as train_cli
from agent.cli import PATH_METAVARS
from agent.core.agent import Agent
from agent.core.config import RunConfig, TrainConfig
from agent.inspection import inspection
from agent.persistence.runs import CHECKPOINT_NAME
from tests.agent.conftest import call_main, tiny
from world_model.registry import BUILTIN_DYNAMICS

# the built-in world models: a plug-in registered by another test module (test_plugin_dynamics)
# after this module's cases were collected must not change the parsers walked here
WORLD_MODELS = tuple(BUILTIN_DYNAMICS)

COMMANDS: dict[str, Any] = {
    "train": train_cli,
    "evaluate": evaluate,
    "diagnose": diagnose,
    "compare": compare,
}
HUGE = str(10**30)  # beyond int64: torch and numpy overflow on it
# kind -> (values that must be rejected, range values: rejected, or accepted as given)
BAD: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "int": (("abc", "", "1.5", "1e999", "nan", "-1", HUGE), ("0",)),
    "float": (("abc", "", "nan", "inf", "-inf", "1e999"), ("0", "-1", "1e30")),
    "bool": (("abc", "", "2"), ()),
    "tuple": (("abc", "", "nan,nan", "inf,1", "1,abc"), ("1", "0,0", "-1,-1", "1,2,3")),
    "name": (("", "no_such_name"), ()),
    "env": (("", "NoSuchEnv-v0", "CartPole-v1"), ()),
    "switch": (("=x",), ()),  # --flag=x for a flag that takes no value
    "input_file": (("", "{missing}", "{empty_dir}", "{garbage}", "{under_file}"), ()),
    "input_dir": (("", "{missing}", "{empty_dir}", "{garbage}", "{under_file}"), ()),
    "output_dir": (("", "{garbage}", "{under_file}"), ()),
}
# what a path argument is, by its metavar (agent.cli.PATH_METAVARS); compare's --resume OUT
# reads the folder a comparison wrote
PATH_KINDS = {"FILE": "input_file", "RUN_DIR": "input_dir", "OUT": "input_dir", "DIR": "output_dir"}


class Accepted(BaseException):  # noqa: N818 (a signal, not an error: no `except Exception` eats it)
    """The command got past validation; `config` is what it would run."""

    def __init__(self, config: Any = None):
        super().__init__()
        self.config = config


def kind(action: argparse.Action) -> str:
    """The kind of value an argparse action takes, from its own type, metavar and name."""
    metavar = str(action.metavar or "")
    options = set(metavar.split("|"))  # agent/cli.py's metavars: INT|none, FLOAT, BOOL, ...
    name = action.dest.rsplit(".", 1)[-1]
    if action.nargs == 0:
        return "switch"
    if metavar in PATH_KINDS:
        return PATH_KINDS[metavar]
    if name.endswith("dir"):  # --train.logdir
        return "output_dir"
    if name in ("env", "env_id"):
        return "env"
    if action.type is int or "INT" in options:
        return "int"
    if action.type is float or "FLOAT" in options:
        return "float"
    if "BOOL" in options:
        return "bool"
    if "," in metavar:
        return "tuple"
    return "name"


def config_path(action: argparse.Action) -> str | None:
    """The dotted config field a train flag sets (generated flags and their short aliases)."""
    if action.dest.startswith("config:"):
        return action.dest.removeprefix("config:")
    return train_cli.ALIASES.get(action.dest)


@dataclasses.dataclass(frozen=True)
class Case:
    command: str
    argv: tuple[str, ...]  # {placeholders}: the fixture's paths, {out} the case's own folder
    must_reject: bool
    action: argparse.Action | None = None  # None: an unknown flag, a stray or missing positional
    value: str | None = None
    field: str | None = None  # agent.train: the config field the flag sets

    @property
    def flag(self) -> str | None:
        options = self.action.option_strings if self.action else []
        return options[0] if options else None

    @property
    def id(self) -> str:
        return f"{self.command}:{' '.join(a or repr(a) for a in self.argv)}"


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def value_cases(command: str, action: argparse.Action, prefix=(), suffix=()) -> list[Case]:
    must, ranged = BAD[kind(action)]
    flag = action.option_strings[0] if action.option_strings else None
    field = config_path(action) if command == "train" else None
    cases = []
    for value, must_reject in [*((v, True) for v in must), *((v, False) for v in ranged)]:
        if value.startswith("="):
            tokens = [f"{flag}{value}"]
        else:
            tokens = [flag, value] if flag else [value]
        argv = (*prefix, *tokens, *suffix)
        cases.append(Case(command, argv, must_reject, action, value.lstrip("="), field))
    return cases


def train_cases() -> list[Case]:
    """Each flag once, under the first world model whose config has its field (a short alias
    such as --attention sets a field the GRU does not have), default world model first."""
    default = TrainConfig.world_model
    owners: dict[str, tuple[str, argparse.Action, bool]] = {}
    for name in [default, *(n for n in WORLD_MODELS if n != default)]:
        parser = train_cli.build_parser(name)
        options = {o for a in parser._actions for o in a.option_strings}
        for action in flags(parser):
            flag, path = action.option_strings[0], config_path(action)
            has_field = path is None or f"--{path}" in options
            if flag not in owners or (has_field and not owners[flag][2]):
                owners[flag] = (name, action, has_field)
    cases = []
    for flag, (name, action, _) in owners.items():
        alone = flag in ("--resume", "--world-model", "--train.world_model")
        prefix = () if alone else ("--world-model", name)
        logdir = flag == "--resume" or kind(action) == "output_dir"
        cases += value_cases("train", action, prefix, () if logdir else ("--logdir", "{out}"))
    return cases


def other_cases(command: str) -> list[Case]:
    """agent.evaluate and agent.diagnose read {run}, a saved agent; compare writes to {out}."""
    parser = COMMANDS[command].build_parser()
    prefix = ("{run}",) if any(not a.option_strings for a in parser._actions) else ()
    cases = []
    for action in flags(parser):
        if not action.option_strings:
            cases += value_cases(command, action)
            continue
        suffix = ("--out", "{out}") if command == "compare" and action.dest != "out" else ()
        cases += value_cases(command, action, prefix, suffix)
    if prefix:
        cases.append(Case(command, (), True))  # the run folder left out
    return cases


def general_cases(command: str) -> list[Case]:
    """Unknown flags and a stray positional, for every command."""
    parser = COMMANDS[command].build_parser()
    prefix = ("{run}",) if any(not a.option_strings for a in parser._actions) else ()
    extra = [("--no-such-flag",), ("--no-such-flag", "1"), ("--no-such-flag=1",), ("stray",)]
    if command == "train":
        extra += [("--train.no_such_field", "1"), ("--no_such_section.steps", "1")]
    return [Case(command, (*prefix, *argv), True) for argv in extra]


CASES = [
    *train_cases(),
    *(c for command in ("evaluate", "diagnose", "compare") for c in other_cases(command)),
    *(c for command in COMMANDS for c in general_cases(command)),
]


# ----------------------------------------------------------------------- running a case


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    """A saved agent to evaluate and diagnose (a tiny GRU, empty buffer), and the paths the
    bad path values name."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "run").mkdir()
    Agent(None, RunConfig.from_dict(tiny())).save(root / "run" / CHECKPOINT_NAME, True)
    (root / "garbage.json").write_bytes(b"\x00\x01 not json, not a checkpoint {")
    (root / "empty_dir").mkdir()
    return {
        "root": root,
        "run": root / "run",
        "garbage": root / "garbage.json",
        "empty_dir": root / "empty_dir",
        "missing": root / "missing" / "nothing.json",
        "under_file": root / "garbage.json" / "sub",
    }


@pytest.fixture
def stubs(monkeypatch) -> None:
    """The step after validation records the acceptance instead of training."""

    def trainer(agent, run_dir, progress=True):
        raise Accepted(agent.config)

    def comparison(config, out, meta=None, resume=False):
        raise Accepted(config)

    def refuse(*args, **kwargs):
        raise Accepted()

    monkeypatch.setattr(launch, "Trainer", trainer)  # agent.train starts runs there
    monkeypatch.setattr(compare, "run_comparison", comparison)
    monkeypatch.setattr(evaluate, "run_episodes", refuse)
    monkeypatch.setattr(inspection, "sample_batch", refuse)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


def _mentioned(line: str, case: Case, argv: list[str], value: str | None) -> bool:
    """The error line names the flag, a part of the field it sets, or the bad value."""
    words = [case.flag, value or repr(value), *(case.field.split(".") if case.field else ())]
    if value:
        try:
            words.append(str(float(value)))  # 1e30 printed as 1e+30
        except ValueError:
            pass
    if case.action is None or not case.action.option_strings:  # argparse names positionals
        words += [*argv, "RUN_DIR"]
    return any(w and w in line for w in words)


def _field_value(config: RunConfig, field: str) -> Any:
    value: Any = config
    for key in field.split("."):
        value = getattr(value, key)
    return value


@pytest.mark.timeout(60)  # a case that got past validation and ran must not hang the suite
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_value(case, paths, stubs, tmp_path, monkeypatch, capsys):
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # an empty path must not mean this folder: it stays empty
    fill = {k: str(v) for k, v in paths.items()} | {"out": str(out)}
    argv = [a.format(**fill) for a in case.argv]
    value = case.value.format(**fill) if case.value is not None else None
    before = _snapshot(paths["root"])
    accepted = None
    try:
        code, lines, stdout = call_main(COMMANDS[case.command].main, argv, capsys)
    except Accepted as signal:
        accepted, code = signal, None
        captured = capsys.readouterr()
        lines, stdout = captured.err.strip().splitlines(), captured.out
    assert "Traceback" not in "\n".join(lines), (argv, lines)
    assert _snapshot(paths["root"]) == before, argv
    assert not any(cwd.iterdir()), (argv, list(cwd.iterdir()))
    if accepted is None or case.must_reject:
        assert accepted is None, f"{argv}: accepted (it would have run)"
        assert code == 2, (argv, code, lines)
        assert len(lines) == 1, (argv, lines)
        assert lines[0].startswith(f"{COMMANDS[case.command].PROG}: error: "), (argv, lines)
        assert _mentioned(lines[0], case, argv, value), (argv, lines)
        assert stdout == "", (argv, stdout)
        assert not out.exists(), f"{argv}: {out} was made"
    elif case.field is not None:  # accepted as given
        expected = case.action.type(value) if case.action.type else value
        assert _field_value(accepted.config, case.field) == expected, argv


def test_every_flag_of_every_command_gets_every_bad_value_of_its_kind():
    """For each flag of each parser (every world model's for agent.train) the cases hold every
    value its kind must reject; no flag is left out (a new flag is fuzzed by its kind)."""
    parsers = [("train", train_cli.build_parser(n)) for n in WORLD_MODELS]
    parsers += [(c, COMMANDS[c].build_parser()) for c in ("evaluate", "diagnose", "compare")]
    given: dict[tuple[str, str], set[str]] = {}
    for case in CASES:
        if case.action is not None and case.must_reject:
            given.setdefault((case.command, case.action.dest), set()).add(case.value)
    assert set(PATH_KINDS) == set(PATH_METAVARS)  # every path argument has its kind
    checked = {c: 0 for c in COMMANDS}
    for command, parser in parsers:
        for action in flags(parser):
            must = {v.lstrip("=") for v in BAD[kind(action)][0]}
            assert must and must <= given.get((command, action.dest), set()), (command, action)
            checked[command] += 1
    assert all(checked.values()), checked
    assert {(c.command, c.action.dest) for c in CASES if c.action} <= {
        (c, a.dest) for c, p in parsers for a in flags(p)
    }


def test_a_resumed_run_takes_only_a_valid_device(tmp_path, capsys):
    """--device given with --resume goes to the agent, not through the config: it is checked
    before the run folder is read (an empty one used to be ignored)."""
    for device in ("", "tpu", "cuda:x"):
        argv = ["--resume", str(tmp_path), "--device", device]
        code, lines, _ = call_main(train_cli.main, argv, capsys)
        assert code == 2 and len(lines) == 1 and "train.device must be" in lines[0], lines


def test_a_config_file_is_checked_as_the_flags_are(tmp_path, capsys):
    """The range checks the flags get hold for a --config file too: nan, inf and ints beyond
    64 bits are rejected where the dataclasses are built from the file (agent/core/config.py)."""
    path = tmp_path / "bad.json"
    for section, key, value in [
        ("loss", "reward_coef", float("nan")),
        ("agent", "lr", float("inf")),
        ("train", "buffer_capacity", 10**30),
        ("dynamics", "latent_dim", 2**64),
    ]:
        path.write_text(json.dumps({section: {key: value}}))
        argv = ["--config", str(path), "--logdir", str(tmp_path / "runs")]
        code, lines, _ = call_main(train_cli.main, argv, capsys)
        assert code == 2 and len(lines) == 1 and f"{section}.{key} must" in lines[0], lines
    assert not (tmp_path / "runs").exists()
