"""bench/whole.py (issue 36's whole-process section) on scripted processes and results, and compare.py's ONNX
Runtime targets; no tfsent model and no ONNX Runtime needed."""

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))

from bench import compare, whole  # noqa: E402
from bench.rounds import Series  # noqa: E402

TFSENT_LINE = ("predict: start-up 1.62 s to the first batch on litert (imports 1.10, tokenizer 0.08, model 0.31, "
               "convert 0.00, first batch 0.13)")


def test_startup_split_reads_tfsents_line_and_makes_the_scripts_marks_per_phase():
    assert whole.startup_split(f"noise\n{TFSENT_LINE}\npredict: 48 rows in 2.0 s\n") == {
        "imports": 1.10, "tokenizer": 0.08, "model": 0.31, "convert": 0.00, "first_batch": 0.13}
    # The script's marks are seconds from its start: 0.5, then +0.25, +1.0, +0.125 per phase; "scored" is not one.
    split = whole.startup_split('ort-timing: {"imports": 0.5, "tokenizer": 0.75, "session": 1.75, '
                                '"first_batch": 1.875, "scored": 9.0}')
    assert split == {"imports": 0.5, "tokenizer": 0.25, "session": 1.0, "first_batch": 0.125}
    assert whole.startup_split("predict: 48 rows in 2.0 s\n") == {}


def test_a_command_is_timed_in_a_fresh_process_and_a_failure_names_it(tmp_path):
    out = tmp_path / "o.csv"
    _, _, stdout = whole._run(whole.Command("ok", [sys.executable, "-c", "print('ort-timing: {}')"], None, out))
    assert stdout == "ort-timing: {}\n"
    with pytest.raises(RuntimeError, match=r"-c import sys; sys.exit\('broken'\) failed \(1\):\nbroken"):
        whole._run(whole.Command("bad", [sys.executable, "-c", "import sys; sys.exit('broken')"], None, out))


def _result():
    # tfsent 2 s a round; the fp32 script 3 s then 5 s (the machine slowed both in round 2: tfsent 4 s there).
    wall = {"tfsent.predict (default)": Series("tfsent.predict (default)", 48, [2.0, 4.0, 2.0]),
            "ONNX Runtime fp32 script": Series("ONNX Runtime fp32 script", 48, [3.0, 5.0, 3.0]),
            "ONNX Runtime int8 script": Series("ONNX Runtime int8 script", 48, [1.0, 2.0, 1.0])}
    cpu = {"tfsent.predict (default)": [1.5, 3.0, 1.5], "ONNX Runtime fp32 script": [2.5, 4.0, 2.5],
           "ONNX Runtime int8 script": [1.0, 1.5, 1.0]}
    startup = {"tfsent.predict (default)": {"imports": [1.0, 1.25, 1.0], "tokenizer": [0.25, 0.25, 0.25],
                                            "model": [0.5, 0.5, 0.5], "convert": [0.0, 0.0, 0.0],
                                            "first_batch": [0.25, 0.5, 0.25]},
               "ONNX Runtime fp32 script": {"imports": [0.5, 0.5, 0.5], "tokenizer": [0.25, 0.25, 0.25],
                                            "session": [0.75, 0.75, 0.75], "first_batch": [0.5, 0.5, 0.5]},
               "ONNX Runtime int8 script": {}}
    agreement = {"tfsent.predict (default)": 47 / 48, "ONNX Runtime fp32 script": 1.0,
                 "ONNX Runtime int8 script": 0.75}
    return whole.WholeResult("MiniLM-L6", 48, wall, cpu, startup, agreement)


def test_whole_section_shows_times_per_round_ratios_labels_and_startup_medians():
    text = "\n".join(whole.render(_result()))
    assert "MiniLM-L6: whole processes on the same 48-row file, alternated, 3 rounds" in text
    assert "| tfsent.predict (default) | 2 (2-4) | 1.5 (1.5-3) | 1 (reference) | 97.92% |" in text
    # Per round: 3/2, 5/4, 3/2 -> median 1.5; against int8: 1/2, 2/4, 1/2.
    assert "| ONNX Runtime fp32 script | 3 (3-5) | 2.5 (2.5-4) | 1.5 (1.25-1.5) | 100.00% |" in text
    assert "| ONNX Runtime int8 script | 1 (1-2) | 1 (1-1.5) | 0.5 (0.5-0.5) | 75.00% |" in text
    assert "| command | imports | tokenizer | model | session | convert | first_batch | to first batch |" in text
    assert "| tfsent.predict (default) | 1.00 | 0.25 | 0.50 |  | 0.00 | 0.25 | 2.00 |" in text
    assert "| ONNX Runtime fp32 script | 0.50 | 0.25 |  | 0.75 |  | 0.50 | 2.00 |" in text
    assert "ONNX Runtime int8 script |" not in text.split("Start-up")[1]  # it printed no split


def test_whole_targets_are_the_wall_ratio_and_the_warm_startup():
    targets = whole.target_rows(_result())
    assert [(t.what, round(t.value, 6), t.goal, t.higher_is_better, t.met) for t in targets] == [
        ("whole process, MiniLM-L6, 48 rows: tfsent / ONNX Runtime fp32 script wall seconds", round(1 / 1.5, 6), 1.0,
         False, True),
        ("tfsent start-up to the first batch, warm, MiniLM-L6, seconds", 2.0, 3.0, False, True)]


def test_ort_targets_compare_litert_and_the_fastest_tfsent_path_with_onnx_runtime_fp32():
    job = compare.Job(256, {
        "tfsent litert fp32 (M)": Series("tfsent litert fp32 (M)", 256, [1.0, 1.0, 2.0]),
        "tfsent graph bf16 (M)": Series("tfsent graph bf16 (M)", 256, [0.5, 0.5, 1.0]),
        "ONNX Runtime fp32 (M)": Series("ONNX Runtime fp32 (M)", 256, [1.25, 1.25, 2.5]),
        "ONNX Runtime int8 (M)": Series("ONNX Runtime int8 (M)", 256, [0.25, 0.25, 0.5])}, {})
    # Every round: LiteRT 1.25x ONNX Runtime fp32's rows per second, graph bf16 2.5x.
    assert [(t.what, round(t.value, 9), t.goal) for t in compare.ort_targets("M", job)] == [
        ("tfsent litert fp32 / ONNX Runtime fp32 (M, 256-row job), x", 1.25, 1.0),
        ("fastest tfsent path (graph bf16) / ONNX Runtime fp32 (M, 256-row job), x", 2.5, 1.5)]
    del job.series["ONNX Runtime fp32 (M)"]
    assert compare.ort_targets("M", job) == []  # --skip-torch: no ONNX Runtime rows
