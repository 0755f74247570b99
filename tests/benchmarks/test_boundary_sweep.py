"""benchmarks/boundary_sweep.py: its table has one row per selected case with the inputs swept
and its counts, and a broken row is counted sample by sample."""

from __future__ import annotations

import torch

from benchmarks import boundary_sweep
from tests.geometry.test_boundary_fuzz import Case, random_draw


def _table(out: str) -> dict[str, list[str]]:
    """The printed table: row name -> its other cells."""
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows[0] == boundary_sweep.HEADER
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows[1:]]
    return {c[0]: c[1:] for c in cells}


def test_the_sweep_prints_each_selected_row_with_its_counts(capsys):
    only = ["dist(x, x)", "LHIDA", "geodesic step[krr]"]
    assert boundary_sweep.main(["--inputs", "150", "--batch", "100", "--only", *only]) == 0
    table = _table(capsys.readouterr().out)
    assert list(table) == only
    for name, (inputs, values, grads, contract, max_norm, _seconds) in table.items():
        assert (inputs, values, grads, contract) == ("150", "0", "0", "0"), name
        bound = 0.999 if name != "dist(x, x)" else 1 - 1e-5  # the attention rows: max_norm
        assert bound - 1e-6 <= float(max_norm) <= bound + 1e-6, name


def test_a_broken_row_is_counted_sample_by_sample(capsys, monkeypatch):
    """A row that is NaN (values and gradients) exactly where |x| > 1 - 1e-4: the sweep counts
    those samples of both batches, and exits 1."""

    def broken(i):
        return torch.sqrt(1 - 1e-4 - i.x.norm(dim=-1))  # [B]

    monkeypatch.setattr(
        boundary_sweep.geometry_fuzz, "CASES", [Case("broken", broken, ("poincare.sqnorm",))]
    )
    monkeypatch.setattr(boundary_sweep.attention_fuzz, "CASES", [])
    assert boundary_sweep.main(["--inputs", "150", "--batch", "100", "--seed", "3"]) == 1
    (inputs, values, grads, contract, *_) = _table(capsys.readouterr().out)["broken"]
    g = torch.Generator().manual_seed(3)
    x = torch.cat([random_draw(100, g).x, random_draw(50, g).x])  # the sweep's two batches
    expected = int((x.norm(dim=-1) > 1 - 1e-4).sum())
    assert 0 < expected < 150
    assert (inputs, values, grads, contract) == ("150", str(expected), str(expected), "0")
