"""bench/compare.py tables and targets on scripted series, and the persistent torch worker's protocol (no torch
needed: ``ping`` and errors), run as the bench runs it, in its own process."""

import dataclasses
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))

from bench import compare  # noqa: E402
from bench.rounds import Series  # noqa: E402
from bench.torch_client import TorchWorker  # noqa: E402


def _result():
    chosen = "tfsent xla fp32 (M)"
    main = compare.Job(100, {
        chosen: Series(chosen, 100, [1.0, 2.0, 1.0, 1.0, 1.0], "n"),
        "tfsent graph fp32 (M)": Series("tfsent graph fp32 (M)", 100, [2.0, 2.0, 2.0, 2.0, 2.0]),
        "HF pipeline, torch (M)": Series("HF pipeline, torch (M)", 100, [3.0, 6.0, 3.0, 3.0, 3.0]),
        "eager TF loop (M)": Series("eager TF loop (M)", 10, [0.5, 0.5, 0.5, 0.5, 0.5])},
        {chosen: (40e9, 20e9)})
    return compare.ModelResult("M", chosen, "xla fp32", "calibration", 3.0, [main])


def test_targets_are_medians_of_per_round_ratios():
    targets = compare.targets(_result(), {"fp32": 100e9, "bf16": 50e9}, native_bf16=False)
    # Pipeline: 3x in every round (the slow round 2 slowed both); 1.5x is the goal below 256 rows. Eager: 10 rows in
    # 0.5 s = 20 rows/s against 100 rows/s, except round 2 (50 rows/s): median 5x. FLOPs: 40 executed for 20 useful.
    # Useful rate: 20 GFLOP in the 1 s median round against fp32's 100 GFLOP/s.
    assert [(t.what, t.value, t.goal, t.met) for t in targets] == [
        ("tfsent / HF pipeline (M, 100-row job), x", 3.0, 1.5, True),
        ("tfsent / eager TF loop (M, 100-row job), x", 5.0, 4.0, True),
        ("executed / useful FLOPs (M, 100-row job)", 2.0, 1.3, False),
        ("useful FLOP rate / fp32 matmul rate (M, 100-row job)", 0.2, 0.5, False)]
    bert = dataclasses.replace(_result(), label="BERT-base")
    bert.jobs[0].rows = 256
    goals = {t.what: t.goal for t in compare.targets(bert, {"fp32": 100e9, "bf16": 50e9}, native_bf16=True)}
    assert goals["tfsent / HF pipeline (BERT-base, 256-row job), x"] == 3.0  # where bf16 is native
    goals = {t.what: t.goal for t in compare.targets(bert, {"fp32": 100e9, "bf16": 50e9}, native_bf16=False)}
    assert goals["tfsent / HF pipeline (BERT-base, 256-row job), x"] == 2.0


def test_render_shows_spread_ratios_and_matmul_fractions():
    text = "\n".join(compare.render(_result(), {"fp32": 100e9, "bf16": 50e9}))
    assert "**xla fp32** (calibration: the one-layer probe, no checkpoint loaded, 3.0 s)" in text
    assert "| tfsent xla fp32 (M) **(chosen)** | 100 | 100 (50-100) | 1 (reference) | n |" in text
    assert "| HF pipeline, torch (M) | 100 | 33.3 (16.7-33.3) | 3 (3-3) |  |" in text
    # Median round 1 s: 40 GFLOP/s executed = 40% of fp32's 100; useful 20 GFLOP/s; 2x padding.
    assert "| 100-row job | tfsent xla fp32 (M) **(chosen)** | 40.0 | 40% | 20.0 | 20% | 2.00 |" in text


def test_padding_ceiling_is_the_executed_rate_over_the_pipeline_useful_rate():
    (line,) = compare.padding_ceiling(_result())
    # Chosen: 40 GFLOP executed in a 1 s median round; pipeline: the same 20 GFLOP useful in 3 s (6.7 GFLOP/s).
    # No padding at all would give 40 / 6.67 = 6x; 2x padding leaves the measured 3x.
    assert "shapes at 40.0 GFLOP/s and the pipeline its useful FLOPs at 6.7" in line
    assert "at most **6.00x** the pipeline here; it executes 2.00x the useful FLOPs, hence 3.00x." in line


def test_rate_ceiling_is_the_model_alone_over_the_matmul_rate_divided_by_the_padding():
    from bench.model_alone import ModelAlone

    result = _result()
    assert compare.rate_ceiling(result) == []  # no model-alone measurement: no line
    # One 16 GFLOP batch in 0.4 s (40 GFLOP/s) against matmul rounds of 100, 80 and 100 GFLOP/s: per-round
    # fractions 0.4, 0.5, 0.4: median 0.4 (a ratio per round, not a ratio of medians).
    result.alone = ModelAlone(100, (64, 128), True, 16_000_000_000, [0.4, 0.4, 0.4], [100e9, 80e9, 100e9])
    assert result.alone.fraction == pytest.approx(0.4)
    (line,) = compare.rate_ceiling(result)
    # The job: 40 GFLOP executed for 20 useful, 1 s median round: useful 20 GFLOP/s = 20% of the 100 GFLOP/s median
    # matmul rate; ceiling 40% / 2.00 = 20%; on executed FLOPs 40 GFLOP/s = 100% of the model alone.
    assert "64 packed sequences x 128 tokens" in line and "runs at 40.0 GFLOP/s, **40%**" in line
    assert "executed / useful 2.00, its useful rate can be at most **20%**" in line
    assert "The job's useful rate was 20% of this matmul rate; on executed FLOPs it ran at 100% of the model" in line
    # The pipeline's 20 useful GFLOP in its 3 s median round (6.67 GFLOP/s) against the ceiling's 20 GFLOP/s.
    assert line.endswith("no run of this job could be more than **3.00x** the HF pipeline (it was 3.00x).")
    result.alone.rows = 999  # a job size that was not timed
    assert compare.rate_ceiling(result) == []


def test_packing_table_shows_padded_and_packed_ratios_and_what_auto_ran():
    result = _result()
    job = result.jobs[0]
    job.packing = {result.chosen: (40e9, 24e9, 20e9)}
    job.flops = {result.chosen: (24e9, 20e9)}  # auto ran the packed plan
    text = "\n".join(compare.render(result, {"fp32": 100e9, "bf16": 50e9}))
    assert "| 100-row job | 2.00 | 1.20 | packed |" in text
    job.packing = {result.chosen: (22e9, 24e9, 20e9)}
    job.flops = {result.chosen: (22e9, 20e9)}
    assert compare.packing_table(result)[-2].endswith("| 100-row job | 1.10 | 1.20 | padded |")


def test_torch_worker_stays_up_across_requests_and_reports_errors():
    # The tfsent venv's python runs the worker: ping needs no torch, and a failed request leaves it serving.
    with TorchWorker(sys.executable) as worker:
        assert worker.request(cmd="ping") == {"pong": True}
        with pytest.raises(RuntimeError, match="KeyError"):
            worker.request(cmd="no such command")
        with pytest.raises(RuntimeError, match="KeyError: 'missing'"):
            worker.timer("missing", "batched", ["a"], 4)()
        assert worker.request(cmd="ping") == {"pong": True}
        pid = worker._proc.pid
    assert worker._proc.returncode == 0 and pid


def test_results_page_renders_every_section_from_scripted_results():
    from bench import cold, run, table

    args = run.parse_args(["--quick"])
    from bench.model_alone import ModelAlone

    result = dataclasses.replace(_result(), label="MiniLM-L6")
    result.alone = ModelAlone(100, (64, 128), True, 16_000_000_000, [0.4, 0.4, 0.4], [100e9, 100e9, 100e9])
    cold_runs = [cold.ColdRun("default config", 100, "first", 20.0, 12.5),
                 cold.ColdRun("default config", 100, "second", 18.0, None)]
    scaling = [table.Measurement("s", 10, 1.0, flops=1e9, peak_rss_mb=100.0, rss_before_mb=90.0),
               table.Measurement("s", 20, 1.5, flops=2e9, peak_rss_mb=110.0, rss_before_mb=95.0)]
    train = [table.Measurement("hand", 10, 1.0, flops=1e9), table.Measurement("fit", 10, 1.1, flops=1e9),
             table.Measurement("mlm", 10, 2.0, flops=1e9)]
    text = run.render(args, "python bench/run.py --quick", {"nproc": "2", "simd": "avx2 fma"},
                      {"torch": "2.x", "threads": 2, "matmul_fp32": 120e9}, {"fp32": 100e9, "bf16": 50e9},
                      [result], cold_runs, scaling, train, {"matmul": 3.0}, 60.0)
    assert "**Smoke run (`--quick`)" in text and "- simd: avx2 fma" in text
    assert "| tfsent / HF pipeline (MiniLM-L6, 100-row job), x | 3.00 | >= 1.5 | yes |" in text
    assert "| default config | 100 | first | 20.00 | 12.50 |" in text
    assert "| default config | 100 | second | 18.00 |  |" in text
    # The pipeline's useful FLOPs (20 GFLOP in a 3 s median round) against the 100 GFLOP/s fp32 ceiling.
    assert "runs its useful FLOPs at 6.7 GFLOP/s, 7% of TF's fp32 matmul rate" in text
    assert "- MiniLM-L6, 100-row job: the chosen path runs the model's shapes at 40.0 GFLOP/s" in text
    assert "Ceiling on the useful FLOP rate:\n\n- MiniLM-L6, 100-row job: the chosen path's model alone" in text
    assert "## 3. Training" in text and "## 4. Scaling with work" in text


def test_cold_run_reads_the_driver_summary_line():
    from bench import cold

    assert cold._predict_seconds("x\npredict: 100 rows in 12.3 s (8.1 rows/s) -> out.csv\n") == 12.3
    assert cold._predict_seconds("nothing") is None
    env = cold.xla_cache_env("/tmp/x")["TF_XLA_FLAGS"]
    assert "--tf_xla_persistent_cache_directory=/tmp/x" in env and "--tf_xla_deterministic_cluster_names=true" in env
