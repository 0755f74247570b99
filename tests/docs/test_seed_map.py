"""docs/seed_map.md cannot rot: every module, symbol and test it names exists.

The map's tables name code as `path/to/module.py`: `symbol`, `other` (symbols of the last
path named in the cell), or `module.symbol` (a project module by its file name), and tests as
`tests/.../test_x.py::test_name`, `::test_other` (the same file) or a bare `test_name` (the last
test file named, else any test file). A name that is not an identifier path (a formula, a
config table, a call with arguments) is not a reference and is skipped.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "seed_map.md"
PACKAGES = ("geometry", "world_model", "agent", "envs", "benchmarks")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# names of other libraries and of Python itself, which the map mentions but does not define
FOREIGN = ("torch", "geoopt", "np", "numpy", "gym", "gymnasium", "scipy", "triton", "tensorboard")
LITERALS = ("True", "False", "None")
SECTIONS = ("train", "agent", "loss", "planner", "model", "dynamics")


@cache
def modules_by_name() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            out.setdefault(path.stem, []).append(path)
    return out


@cache
def member_words() -> frozenset[str]:
    """Every function, field and parameter name and every string constant of the project: a
    bare lower-case name in the map (a config field, an argument, a logged tag) must be one."""
    words: set[str] = set()
    for paths in modules_by_name().values():
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    words.add(node.name)
                    args = node.args
                    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                        words.add(a.arg)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    words.add(node.target.id)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    words.add(node.value)  # a key or tag the code writes (a TensorBoard tag)
    return frozenset(words)


@cache
def defined_names(path: Path) -> frozenset[str]:
    """Top-level names of a module, `Class.member` for class members (methods, fields), and the
    names its re-exports bring in (`from x import y`)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(f"{node.name}.{item.name}")
                    for sub in ast.walk(item):  # attributes set on self in a method
                        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                            if isinstance(sub.value, ast.Name) and sub.value.id == "self":
                                names.add(f"{node.name}.{sub.attr}")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(f"{node.name}.{item.target.id}")
                elif isinstance(item, ast.Assign):
                    for t in item.targets:
                        if isinstance(t, ast.Name):
                            names.add(f"{node.name}.{t.id}")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return frozenset(names)


def symbol_exists(path: Path, symbol: str) -> bool:
    names = defined_names(path)
    if symbol in names:
        return True
    head, _, rest = symbol.partition(".")
    if head in names and rest and "." not in rest:  # Class.member of a re-exported class
        source = _definition_file(path, head)
        return source is not None and symbol in defined_names(source)
    return False


def _definition_file(path: Path, name: str) -> Path | None:
    """The project file a re-exported `name` of `path` comes from."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if any((a.asname or a.name) == name for a in node.names):
                candidate = ROOT / (node.module.replace(".", "/") + ".py")
                package = ROOT / node.module.replace(".", "/") / "__init__.py"
                return candidate if candidate.is_file() else package if package.is_file() else None
    return None


@cache
def _test_function_names() -> dict[str, set[Path]]:
    out: dict[str, set[Path]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        for name in defined_names(path):
            out.setdefault(name, set()).add(path)
    return out


def references(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _module_path(dotted: str) -> tuple[Path | None, str]:
    """`geometry.wilson_lines.cell_centers` -> (geometry/wilson_lines.py, "cell_centers")."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, ".".join(parts[cut:])
    return None, dotted


def check_code_cell(cell: str) -> list[str]:
    missing, current, owner = [], None, None
    for ref in references(cell):
        ref = ref.split("(")[0].strip()
        if ref.endswith(".py") and "/" in ref:
            current, owner = ROOT / ref, None
            if not current.is_file():
                missing.append(ref)
                current = None
            continue
        if not IDENT.match(ref) or ref.startswith("tests") or ref in LITERALS:
            continue
        if ref.split(".")[0] in FOREIGN:
            continue
        found = _resolve(ref, current, owner)
        if found is None:
            missing.append(ref)
        elif found[0].isupper():
            owner = found.split(".")[0]  # a class: later bare names may be its members
    return missing


def _resolve(ref: str, current: Path | None, owner: str | None) -> str | None:
    """The symbol `ref` names, or None if nothing defines it."""
    if current is not None:
        if symbol_exists(current, ref):
            return ref
        if owner is not None and symbol_exists(current, f"{owner}.{ref}"):
            return f"{owner}.{ref}"
    path, symbol = _module_path(ref)
    if path is not None and symbol_exists(path, symbol):
        return symbol
    module, _, symbol = ref.partition(".")
    if symbol and any(symbol_exists(p, symbol) for p in modules_by_name().get(module, [])):
        return symbol
    everywhere = [p for ps in modules_by_name().values() for p in ps]
    if not modules_by_name().get(module) and any(symbol_exists(p, ref) for p in everywhere):
        return ref  # a top-level name or Class.member defined somewhere in the project
    if owner is not None and any(symbol_exists(p, f"{owner}.{ref}") for p in everywhere):
        return f"{owner}.{ref}"
    if module in SECTIONS and symbol:
        from agent.core.config import RunConfig

        config = RunConfig.from_dict({"train": {"world_model": "geodesic"}})
        if "." not in symbol and hasattr(getattr(config, module), symbol):
            return ref
    if not symbol and ref.islower() and ref in member_words():
        return ref  # a field or argument name
    return None


def check_test_cell(cell: str, current: Path | None) -> tuple[list[str], Path | None]:
    """Missing tests of the cell, and the test file named last (the next row's default)."""
    missing = []
    for ref in references(cell):
        ref = ref.split("(")[0].split("[")[0].strip()
        if ref.endswith(".py") and "/" not in ref:  # a test file by its name
            hits = list((ROOT / "tests").rglob(ref))
            if hits:
                current = hits[0]
            else:
                missing.append(ref)
            continue
        if ref.startswith("tests/"):
            file, _, name = ref.partition("::")
            current = ROOT / file
            if not current.is_file():
                missing.append(file)
                current = None
                continue
            if name and not symbol_exists(current, name.replace("::", ".")):
                missing.append(ref)
            continue
        name = ref.removeprefix("::")
        if not IDENT.match(name) or not name.split(".")[0].startswith(("test_", "Test")):
            continue
        if current is not None and symbol_exists(current, name):
            continue
        if name not in _test_function_names():
            missing.append(ref)
    return missing, current


def rows() -> list[tuple[int, list[str]]]:
    out = []
    for number, line in enumerate(MAP.read_text().splitlines(), 1):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 5 and cells[0] not in ("seed", "---"):
            out.append((number, cells))
    return out


def test_the_map_has_its_tables():
    assert len(rows()) > 100


def test_every_code_and_test_named_in_the_seed_map_exists():
    problems, current = [], None
    for number, (_, _, code, tests, _) in rows():
        problems += [f"line {number}: code {m}" for m in check_code_cell(code)]
        missing, current = check_test_cell(tests, current)
        problems += [f"line {number}: test {m}" for m in missing]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "cell, kind",
    [
        ("`geometry/poincare.py`: `no_such_function`", "code"),
        ("`poincare.no_such_function`", "code"),
        ("`tests/geometry/test_poincare.py::test_no_such_test`", "test"),
    ],
)
def test_the_checker_catches_a_name_that_does_not_exist(cell, kind):
    found = check_code_cell(cell) if kind == "code" else check_test_cell(cell, None)[0]
    assert found, cell
