"""The README's table of published DeepMind Control results says what
`agent/comparison/published.py` (the learning curves' points) says."""

from __future__ import annotations

import re
from pathlib import Path

from agent.comparison.published import PUBLISHED

README = Path(__file__).resolve().parents[2] / "README.md"
COLUMNS = ("TD-MPC2", "DreamerV3", "MR.Q", ("SimbaV2 (UTD 2)", "SimbaV2 (UTD 8)"), "SAC")


def _published_table() -> dict[str, list[str]]:
    """{task: cells}, and under "header" the seed counts each column names in brackets."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| task | TD-MPC2 (3 seeds)"))
    header = [c.strip() for c in lines[start].strip("|").split("|")][1:]
    rows = {"header": [re.search(r"\(([\d /]+)(?: seeds)?\)$", c).group(1) for c in header]}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_readme_published_table_matches_published_py():
    rows = _published_table()
    seeds = rows.pop("header")
    assert sorted(rows) == sorted(re.sub(r"^dm_control/|-v0$", "", env) for env in PUBLISHED)
    for env, entries in PUBLISHED.items():
        by_method = {p.method: p for p in entries}
        cells = rows[re.sub(r"^dm_control/|-v0$", "", env)]
        for column, cell in zip(COLUMNS, cells, strict=True):
            methods = column if isinstance(column, tuple) else (column,)
            assert cell == " / ".join(f"{by_method[m].mean:.0f}" for m in methods), (env, column)
            assert seeds[COLUMNS.index(column)] == " / ".join(
                str(by_method[m].n_seeds) for m in methods
            ), column
