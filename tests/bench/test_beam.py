"""bench/beam.py without running anything heavy: its output comparison and its markdown section, exact values."""

import pandas as pd

from bench.beam import compare, parse_args, section
from bench.rounds import Series, speedup


def test_compare_reports_labels_order_and_largest_difference(tmp_path):
    ref = pd.DataFrame({"row": [0, 1], "label": ["a", "b"], "prob_a": [0.75, 0.25], "prob_b": [0.25, 0.75]})
    ref.to_csv(tmp_path / "p.csv", index=False)
    ref.assign(prob_a=[0.75, 0.5]).to_csv(tmp_path / "b.csv", index=False)
    assert compare(tmp_path / "p.csv", tmp_path / "b.csv") == (True, 0.25, True)
    ref.iloc[::-1].to_csv(tmp_path / "r.csv", index=False)
    labels, _, order = compare(tmp_path / "p.csv", tmp_path / "r.csv")
    assert (labels, order) == (False, False)


def test_section_has_the_command_rates_and_per_round_ratio():
    args = parse_args(["--rows", "100"])
    series = {"predict": Series("predict", 100, [1.0] * 5), "beam": Series("beam", 100, [2.0] * 5)}
    text = section(args, {"nproc": "2", "simd": "avx2 fma"}, series, speedup(series["beam"], series["predict"]),
                   (True, 1e-7, True), 600.0)
    assert text.startswith("## Beam (tfsent.beam, DirectRunner) against tfsent.predict")
    assert "`python bench/beam.py --rows 100` (5 interleaved rounds, 10.0 min)" in text
    assert "| tfsent.predict (1 process) | 100 | 100 (100-100) | 1 (1-1) |" in text
    assert "beam / predict rows/s, median of per-round ratios: **0.5 (0.5-0.5)**" in text
    assert "simd: avx2 fma" in text and "labels equal, row order equal" in text
