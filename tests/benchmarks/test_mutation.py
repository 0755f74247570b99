"""benchmarks.mutation: its mutmut settings select what they say, and its score reads mutmut's
verdicts back (a real mutmut run on a two-function module, with one test that misses a mutant)."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks import mutation

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(mutation.PACKAGES))
def test_each_package_mutates_itself_against_its_own_existing_fast_tests(name):
    package = mutation.PACKAGES[name]
    settings = tomllib.loads(mutation.config(package))["tool"]["mutmut"]
    assert settings["only_mutate"] == [f"{package.source}/*"]
    assert settings["source_paths"] == [package.source.split("/")[0] + "/"]
    selection = settings["pytest_add_cli_args_test_selection"]
    assert selection[-2:] == ["-m", "not slow"]
    for path in selection[:-2]:
        assert (ROOT / path).exists(), path
    # every other package is copied beside the mutated one, so the tests import
    copied = {p.rstrip("/") for p in settings["also_copy"]} | {package.source.split("/")[0]}
    assert {"geometry", "world_model", "agent", "envs"} <= copied


@pytest.mark.skipif(
    shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None,
    reason="mutmut (a dev extra) is not installed",
)
def test_the_score_counts_killed_survived_and_listed_equivalent_mutants(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    (tmp_path / "toy" / "calc.py").write_text(
        textwrap.dedent("""
        def double(x):
            return 2 * x


        def clamp(x):
            return min(max(x, 0), 10)


        def triple(x):
            return 3 * x
        """)
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(
        textwrap.dedent("""
        import multiprocessing

        from toy.calc import clamp, double, triple


        def test_double():
            assert double(3) == 6


        def test_clamp_misses_the_top():
            assert clamp(-4) == 0 and clamp(5) == 5


        def test_triple_in_a_spawned_process():
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                assert pool.apply(triple, (2,)) == 6
        """)
    )
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mutmut]\nsource_paths = ["toy/"]\npytest_add_cli_args_test_selection = ["tests"]\n'
    )
    mutation.mutmut(tmp_path, "run", "--max-children", "1", check=False)
    plain = mutation.report("toy", tmp_path, show=False, equivalent_table={})
    assert plain["total"] == plain["killed"] + plain["survived"] + plain["other"]
    assert plain["other"] >= 1  # triple's mutants: "no tests"
    assert plain["survived"] >= 1 and plain["equivalent"] == 0  # clamp's 10 is never reached
    # triple runs only in a spawned process: no test is recorded for it until it is mapped
    untested = [m for m, v in mutation.verdicts(tmp_path).items() if ".x_triple__" in m]
    assert untested and {mutation.verdicts(tmp_path)[m] for m in untested} == {"no tests"}
    spawned = mutation.map_spawned(tmp_path, {"toy.calc.x_triple": "tests/test_calc.py"})
    assert sorted(spawned) == sorted(untested)
    mutation.mutmut(tmp_path, "run", "--max-children", "1", *spawned, check=False)
    assert {mutation.verdicts(tmp_path)[m] for m in untested} == {"killed"}
    survivors = [
        line.split(":")[0].strip()
        for line in mutation.mutmut(tmp_path, "results").splitlines()
        if line.strip().endswith(": survived")
    ]
    before, after = mutation.diff_lines(tmp_path, survivors[0])
    assert before == "return min(max(x, 0), 10)" and after != before
    listed = {mutation.key(survivors[0].split("__mutmut_")[0], before, after): "toy"}
    assert listed.popitem()[0][:2] == ("toy.calc", "clamp")
    table = {mutation.key(s.split("__mutmut_")[0], *mutation.diff_lines(tmp_path, s)): ""
             for s in survivors}  # fmt: skip
    full = mutation.report("toy", tmp_path, show=False, equivalent_table=table)
    assert full["equivalent"] == plain["survived"] and full["survived"] == 0
    assert full["score"] == 1.0 > plain["score"]
