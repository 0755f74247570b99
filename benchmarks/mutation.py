"""Mutation score of the mathematics: mutmut per package, each against its own fast unit tests.

    python -m benchmarks.mutation                      # geometry, attention, memory
    python -m benchmarks.mutation --packages geometry --max-children 2
    python -m benchmarks.mutation --report-only        # re-read the last runs, run nothing

For each package this copies the tracked tree into `runs/mutation/<package>/` (ignored by git),
writes a `[tool.mutmut]` section there that mutates the package alone and selects the package's
own unit tests without the slow ones (no training), and runs `mutmut run` in it. mutmut keeps
every verdict under `mutants/`: running again resumes, re-tests what changed and the last run's
survivors (which new tests may kill). Functions that run only in ranks a test spawns (SPAWNED)
get those tests by hand in a second pass, since mutmut sees calls in the pytest process alone.
Not part of CI (20-60 minutes per package on two cores).

The table counts killed (a failing test, a timeout or a crashed test run), survived, equivalent
and others (no test) per package, and the score killed / (all - equivalent), where a surviving
mutant is equivalent when it cannot change behaviour; each such mutant is listed with its
reason in `benchmarks/mutation_equivalent/` (keyed by file, function and the line before and
after, so the list survives renumbering). With `--survivors` every surviving mutant that is not
listed is printed as its diff, to be killed by a sharper test or listed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.mutation_equivalent import EQUIVALENT

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "runs" / "mutation"


@dataclass(frozen=True)
class Package:
    source: str  # the package folder mutmut mutates
    tests: tuple[str, ...]  # its own unit tests (slow ones deselected)


_ATTENTION_TESTS = """test_ida test_ida_claims test_hida test_krr test_covariant
    test_covariant_protocols test_triton_ida test_attention_boundary_fuzz""".split()
PACKAGES = {
    # geometry.quantize's direction grids and error bound are tested through HCC's compress
    "geometry": Package("geometry", ("tests/geometry", "tests/world_model/memory/test_hcc.py")),
    "attention": Package(
        "world_model/attention", tuple(f"tests/world_model/{t}.py" for t in _ATTENTION_TESTS)
    ),
    "memory": Package("world_model/memory", ("tests/world_model/memory",)),
}
# Functions that run only in processes a test spawns (ranks, a fresh interpreter): mutmut records
# which tests call a function in the pytest process alone, so it maps these to no test. They are
# mapped here by hand to the tests that spawn them and run in a second pass.
SPAWNED = {
    # the fused kernel runs under triton's interpreter only in a fresh process (TRITON_INTERPRET
    # is read at import), which the interpreter test spawns
    "attention": {
        "world_model.attention.triton_ida.x_fused_inverse": "tests/world_model/test_triton_ida.py"
    },
    "memory": {
        "world_model.memory.gsr_distributed.": "tests/world_model/memory/test_gsr_distributed.py"
    },
}
MUTANT = re.compile(r"^\s*([\w.]+)__mutmut_(\d+): (\w[\w ]*)$")


def config(package: Package) -> str:
    """The `[tool.mutmut]` section for one package (TOML)."""
    top = package.source.split("/")[0]
    others = sorted({"geometry", "world_model", "agent", "envs", "benchmarks", "configs"} - {top})
    quoted = lambda items: ", ".join(f'"{item}"' for item in items)  # noqa: E731
    return (
        "\n[tool.mutmut]\n"
        f'source_paths = ["{top}/"]\n'
        f'only_mutate = ["{package.source}/*"]\n'
        f'do_not_mutate = ["{package.source}/__init__.py"]\n'
        f"also_copy = [{quoted(o + '/' for o in others)}]\n"
        f'pytest_add_cli_args_test_selection = [{quoted(package.tests)}, "-m", "not slow"]\n'
        'pytest_add_cli_args = ["-p", "no:cacheprovider"]\n'
        'process_isolation = "forkserver"\n'
    )


def prepare(name: str, package: Package) -> Path:
    """Copy the tracked tree into the package's work folder (keeping mutmut's verdicts)."""
    work = WORK / name
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for rel in files:
        target = work / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_file():
            shutil.copy2(ROOT / rel, target)
    with open(work / "pyproject.toml", "a") as f:
        f.write(config(package))
    return work


def mutmut(work: Path, *args: str, check: bool = True) -> str:
    exe = Path(sys.executable).with_name("mutmut")
    return subprocess.run(
        [str(exe), *args], cwd=work, capture_output=True, text=True, check=check
    ).stdout


def verdicts(work: Path) -> dict[str, str]:
    """mutant name -> verdict of the package's last run."""
    out = {}
    for line in mutmut(work, "results", "--all", "true").splitlines():
        if m := MUTANT.match(line):
            out[f"{m[1]}__mutmut_{m[2]}"] = m[3].strip()
    return out


def map_spawned(work: Path, spawned: dict[str, str]) -> list[str]:
    """Give the untested mutants of functions under each prefix in `spawned` (module. -> test
    file) that file's tests, in mutmut's stats; their names, to run again."""
    stats_file = work / "mutants" / "mutmut-stats.json"
    stats = json.loads(stats_file.read_text())
    names, untested = [], [m for m, v in verdicts(work).items() if v == "no tests"]
    for prefix, test_file in spawned.items():
        tests = [t for t in stats["duration_by_test"] if t.startswith(test_file + "::")]
        for mutant in untested:
            if mutant.startswith(prefix):
                function = mutant.partition("__mutmut_")[0]
                known = stats["tests_by_mangled_function_name"].setdefault(function, [])
                known.extend(t for t in tests if t not in known)
                names.append(mutant)
    stats_file.write_text(json.dumps(stats))
    return names


def diff_lines(work: Path, mutant: str) -> tuple[str, str]:
    """The mutated line before and after (stripped), from `mutmut show`."""
    out = mutmut(work, "show", mutant).splitlines()
    body = [line for line in out if not line.startswith(("---", "+++"))]
    removed = [line[1:].strip() for line in body if line.startswith("-")]
    added = [line[1:].strip() for line in body if line.startswith("+")]
    return " / ".join(removed), " / ".join(added)


def key(mutant: str, before: str, after: str) -> tuple[str, str, str, str]:
    """(module, function, before, after): what EQUIVALENT is keyed by."""
    module, _, function = mutant.rpartition(".")
    return module, function.removeprefix("x_").removeprefix("xǁ"), before, after


def report(
    name: str, work: Path, show: bool, equivalent_table: dict = EQUIVALENT
) -> dict[str, float]:
    """Verdict counts and score of one package's last run; prints unlisted survivors."""
    counts: dict[str, int] = {}
    unlisted: list[tuple[str, str, str]] = []
    equivalent = 0
    for mutant, verdict in verdicts(work).items():
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "survived":
            before, after = diff_lines(work, mutant)
            if key(mutant.partition("__mutmut_")[0], before, after) in equivalent_table:
                equivalent += 1
            else:
                unlisted.append((mutant, before, after))
    total = sum(counts.values())
    killed = sum(counts.get(v, 0) for v in ("killed", "timeout", "segfault"))  # tests failed
    if show:
        for mutant, before, after in unlisted:
            print(f"{name}: {mutant}\n    - {before}\n    + {after}")
    score = killed / max(total - equivalent, 1)
    return {"total": total, "killed": killed, "equivalent": equivalent,
            "survived": counts.get("survived", 0) - equivalent,
            "other": total - killed - counts.get("survived", 0), "score": score}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="+", choices=sorted(PACKAGES), default=list(PACKAGES))
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once")
    parser.add_argument("--report-only", action="store_true", help="read the last runs only")
    parser.add_argument("--survivors", action="store_true", help="print unlisted survivors")
    args = parser.parse_args()
    if shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None:
        print("benchmarks.mutation: mutmut is not installed (pip install -e '.[dev]')")
        return 2
    rows = {}
    for name in args.packages:
        work = WORK / name
        if not args.report_only:
            resumed = (work / "mutants").is_dir()
            work = prepare(name, PACKAGES[name])
            print(f"{name}: mutmut run in {work}", flush=True)
            children = ("--max-children", str(args.max_children))
            mutmut(work, "run", *children, check=False)
            survivors = [m for m, v in verdicts(work).items() if v == "survived"]
            if resumed and survivors:  # a verdict stands while its function is unchanged
                print(f"{name}: {len(survivors)} survivors of the last run tested again")
                mutmut(work, "run", *children, *survivors, check=False)
            if spawned := map_spawned(work, SPAWNED.get(name, {})):
                print(f"{name}: {len(spawned)} mutants of functions run in spawned ranks")
                mutmut(work, "run", *children, *spawned, check=False)
        elif not (work / "mutants").is_dir():
            print(f"benchmarks.mutation: no run of {name} in {work}")
            return 2
        rows[name] = report(name, work, args.survivors)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"\nmutation score, {datetime.date.today()}, commit {commit}")
    print("| package | mutants | killed | survived | equivalent | other | score |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['total']} | {r['killed']} | {r['survived']} | {r['equivalent']} "
              f"| {r['other']} | {100 * r['score']:.1f}% |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
