"""benchmarks/collection_throughput.py: one row per (ranks, copies) setting that divides, the
2-rank row measured on two gloo processes that step and gather the copies."""

from __future__ import annotations

from benchmarks import collection_throughput


def test_rows_for_each_setting_with_ratios_to_the_first(capsys):
    collection_throughput.main(
        ["--ranks", "1", "2", "--copies", "2", "3", "--steps", "6", "--rounds", "1"]
    )
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows[1:]]
    # 3 copies do not split over 2 ranks: that setting is left out
    assert [(r, k) for r, k, *_ in cells] == [("1", "2"), ("1", "3"), ("2", "2")]
    base = cells[0]
    assert base[3] == base[5] == "1.00x"
    for _r, _k, alone, ratio, trained, ratio_trained in cells:
        assert float(alone) > float(trained) > 0  # training adds updates to the same steps
        assert abs(float(ratio[:-1]) - float(alone) / float(base[2])) < 0.02  # cells rounded
        assert abs(float(ratio_trained[:-1]) - float(trained) / float(base[4])) < 0.02
