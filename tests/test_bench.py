"""Smoke test of the benchmark code (bench/): FLOP counting and the table arithmetic with exact values, and the
tfsent inference modes on a tiny random BERT. No timing is asserted: speed lives in bench/RESULTS.md."""

import sys

import numpy as np
import pytest
from transformers import BertConfig

from conftest import REPO

sys.path.insert(0, str(REPO))

from bench import flops, table  # noqa: E402
from bench.run import parse_args  # noqa: E402

TINY = {"arch": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 128}


def test_sequence_flops_exact():
    shape = flops.EncoderShape(hidden=4, layers=2, intermediate=8, num_labels=3)
    # per layer: 8*L*H*H + 4*L*H*I + 4*L*L*H with L=5: 640 + 640 + 400 = 1680; head: 2*16 + 2*4*3 = 56
    assert flops.sequence_flops(shape, 5) == 2 * 1680 + 56
    lm = flops.EncoderShape(hidden=4, layers=1, intermediate=8, vocab=10)
    # 1680 + LM head 2*5*16 + 2*5*4*10 = 160 + 400
    assert flops.sequence_flops(lm, 5) == 1680 + 560
    assert flops.batch_flops(shape, {5: 3, 2: 1}) == 3 * flops.sequence_flops(shape, 5) + flops.sequence_flops(shape, 2)
    assert flops.batch_flops(shape, [(5, 3)]) == 3 * 3416
    assert flops.useful_flops(shape, [5, 2]) == flops.sequence_flops(shape, 5) + flops.sequence_flops(shape, 2)
    assert flops.training_flops(100) == 300


def test_minilm_shape_from_config():
    config = BertConfig(hidden_size=384, num_hidden_layers=6, intermediate_size=1536, num_attention_heads=12)
    shape = flops.EncoderShape.from_config(config, num_labels=3)
    assert shape == flops.EncoderShape(hidden=384, layers=6, intermediate=1536, num_labels=3, vocab=0)
    # MiniLM-L6 at 128 tokens: 6 * (8*128*384^2 + 4*128*384*1536 + 4*128^2*384) + 2*384^2 + 2*384*3
    assert flops.sequence_flops(shape, 128) == 2_869_201_152
    assert flops.EncoderShape.from_config({"hidden_size": 2, "num_hidden_layers": 1, "intermediate_size": 3,
                                           "vocab_size": 7}, lm_head=True).vocab == 7


def test_padded_rows_matches_bucketing():
    # 3 rows fit 32, 1 fits 64; one batch of 4 at 64 is cheaper than a batch at 32 plus one at 64.
    assert flops.padded_rows([10, 32, 5, 40], (32, 64, 128), 4) == {64: 4}
    # The 64 bucket's single row runs as a 1-row batch (engine.batch_plan), not padded to 4.
    assert flops.padded_rows([10, 32, 5, 6, 40], (32, 64, 128), 4) == {32: 4, 64: 1}
    assert flops.padded_rows([10, 32, 5, 6, 40], (32, 64, 128), 4, replicas=2) == {32: 4, 64: 2}
    assert flops.padded_rows([33] * 5, (32, 64), 4) == {64: 5}
    assert flops.padded_rows([33] * 7, (32, 64), 4) == {64: 8}
    with pytest.raises(ValueError, match="exceed the top bucket 64"):
        flops.padded_rows([65], (32, 64), 4)


def test_executed_flops_with_and_without_packing():
    shape = flops.EncoderShape(hidden=4, layers=1, intermediate=8, num_labels=3)
    # Encoder 4*L*H*(2H + I + L) = 16*L*(16 + L): 3,072 at 8 tokens, 8,192 at 16; head 2*16 + 2*4*3 = 56 per slot.
    lengths, buckets = [5, 3, 12, 3, 7], (8, 16)
    # Padded: four rows in one batch of 8 tokens, the 12-token row alone at 16; a head per row.
    assert flops.executed_flops(shape, lengths, buckets, 4, packing=False) == 4 * 3072 + 8192 + 5 * 56
    # Packed at 16 (better than 8): sequences [12, 3] and [7, 5, 3], one batch of 2 at 16, 4 head slots each.
    assert flops.executed_flops(shape, lengths, buckets, 4, packing=True) == 2 * 8192 + 2 * 4 * 56
    assert flops.executed_flops(shape, lengths, buckets, 4, packing="auto") == 2 * 8192 + 2 * 4 * 56
    # Rows that fill their bucket: packing (alone at 8, 2 slots each) costs more, so auto runs them padded.
    assert flops.executed_flops(shape, [8] * 4, buckets, 4, packing=True) == 4 * 3072 + 4 * 2 * 56
    assert flops.executed_flops(shape, [8] * 4, buckets, 4, packing="auto") == 4 * 3072 + 4 * 56


def test_matmul_rate_is_positive():
    assert flops.matmul_rate("float32", size=32, chain=2, repeats=2) > 0


def test_measurement_and_ratios():
    slow = table.Measurement("pipeline", rows=100, seconds=10.0)
    fast = table.Measurement("tfsent", rows=200, seconds=4.0, flops=8e9)
    assert slow.rate == 10.0 and fast.rate == 50.0
    assert fast.ms_per_row == 20.0
    assert table.speedup(fast, slow) == 5.0
    assert fast.flop_rate() == 2e9 and slow.flop_rate() is None
    assert table.speedup(fast, table.Measurement("none", 0, 0.0)) == 0.0


def test_tables_exact():
    slow = table.Measurement("pipeline", 100, 10.0, "batch 1")
    fast = table.Measurement("tfsent", 200, 4.0)
    assert table.throughput_table([slow, fast], slow).splitlines() == [
        "| mode | rows | seconds | rows/s | ms/row | vs pipeline | note |",
        "|---|---|---|---|---|---|---|",
        "| pipeline | 100 | 10.00 | 10.00 | 100.00 | 1.00x | batch 1 |",
        "| tfsent | 200 | 4.00 | 50.00 | 20.00 | 5.00x |  |",
    ]
    targets = [table.Target("speed-up", 5.0, 4.0), table.Target("overhead", 1.2, 1.15, higher_is_better=False)]
    assert [t.met for t in targets] == [True, False]
    assert table.targets_table(targets).splitlines()[2:] == [
        "| speed-up | 5.00 | >= 4 | yes |",
        "| overhead | 1.20 | <= 1.15 | **no** |",
    ]
    assert table.markdown(["a"], [[0.01234]]).splitlines()[2] == "| 0.0123 |"


def test_parse_args_defaults_and_errors(capsys):
    quick = parse_args(["--quick"])
    assert (quick.sizes, quick.minilm_jobs, quick.bert_jobs, quick.rounds) == ([128, 512], [16, 48], [16], 2)
    full = parse_args([])
    assert full.sizes == [1000, 10000, 100000]
    assert (full.minilm_jobs, full.bert_jobs, full.cold_sizes, full.rounds) == ([32, 256, 1024, 4846], [32, 256],
                                                                                 [100, 1000], 5)
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "3"])
    assert "need at least 5 interleaved rounds" in capsys.readouterr().err
    assert parse_args(["--sizes", "10, 20"]).sizes == [10, 20]
    with pytest.raises(SystemExit):
        parse_args(["--sizes", "ten"])
    assert "--sizes must be comma-separated integers" in capsys.readouterr().err


def test_tfsent_modes_on_tiny_bert(monkeypatch):
    """Every TF mode runs on a tiny random BERT and counts the FLOPs of exactly the shapes it ran."""
    from bench import inference
    from tfsent.models import load_tokenizer
    from tfsent.runtime.strategy import make_strategy

    monkeypatch.setattr(inference, "BERT_BASE", TINY)
    strategy = make_strategy("cpu")
    tokenizer = load_tokenizer("minilm_l6")
    clf = inference.build_model(strategy, "bert_base")
    sentences = inference.read_phrasebank(REPO / "data" / "financial_phrasebank" / "Sentences_AllAgree.txt")
    assert len(sentences) == 2264
    texts = inference.repeat_to(sentences[:5], 12)
    assert texts[5] == sentences[0] and len(texts) == 12
    shape = inference.encoder_shape(clf)
    assert shape == flops.EncoderShape(hidden=32, layers=2, intermediate=64, num_labels=3)

    eager = inference.eager_loop(clf, tokenizer, texts, 4, "tiny")
    assert (eager.rows, eager.flops) == (12, 12 * flops.sequence_flops(shape, 128))
    plain = inference.keras_predict(clf, tokenizer, texts, 4, "tiny")
    assert plain.rows == 12 and plain.flops == eager.flops

    # Two buckets in use, the shorter with a whole batch: the warm-up must compile both shapes.
    by_length = {len(tokenizer(t)["input_ids"]): t for t in sentences}
    texts = [t for n, t in sorted(by_length.items()) if n <= 32][:8] + \
        [t for n, t in sorted(by_length.items()) if 32 < n <= 64][:1]
    traces, original = [], clf.call

    class CountFromTheTimedRun(inference.RssSampler):  # entered right before the timed run, after the warm-up
        def __enter__(self):
            monkeypatch.setattr(clf, "call", lambda *a, **k: traces.append(1) or original(*a, **k))
            return super().__enter__()

    monkeypatch.setattr(inference, "RssSampler", CountFromTheTimedRun)
    executed, useful = inference.tfsent_predict(clf, strategy, tokenizer, texts, 4, "tiny")
    lengths = [len(tokenizer(t)["input_ids"]) for t in texts]
    assert executed.flops == flops.executed_flops(shape, lengths, inference.BUCKETS, 4, packing="auto")
    assert executed.flops <= flops.executed_flops(shape, lengths, inference.BUCKETS, 4, packing=False)
    # The warm-up compiled every shape the timed run used: no trace while timed.
    assert traces == []
    assert useful.flops == sum(flops.sequence_flops(shape, n) for n in lengths)
    assert useful.flops < executed.flops
    assert executed.peak_rss_mb >= executed.rss_before_mb > 0
    assert np.isclose(executed.seconds, useful.seconds)


def test_pipeline_ceiling_exact():
    from bench.run import _ceilings

    pipeline = table.Measurement("HF pipeline, torch (MiniLM-L6)", rows=10, seconds=2.0, flops=50e9)
    lines = _ceilings(100e9, 120e9, [pipeline], [table.Measurement("eager TF loop (BERT-base)", 10, 1.0)])
    # 25 GFLOP/s of useful work against a 100 GFLOP/s ceiling: no run of the same FLOPs can be more than 4x faster.
    assert lines[2] == ("- MiniLM-L6: the HF pipeline (batch 1, so no padding) runs its useful FLOPs at 25.0 GFLOP/s, "
                        "25% of TF's fp32 matmul rate; a run of only those FLOPs at 100% of that rate would be at "
                        "most **4.00x** the pipeline.")
    assert "120.0 GFLOP/s (1.20x TF's)" in lines[3] and len(lines) == 5
    assert _ceilings(100e9, None, [table.Measurement("HF pipeline", 10, 1.0)], []) == []


def test_streaming_bench_inputs_are_unique_and_quick_is_small():
    from bench import streaming

    texts = streaming.unique_sentences(["a.", "b."], 5)
    assert texts == ["a. (0)", "b. (1)", "a. (2)", "b. (3)", "a. (4)"] and len(set(texts)) == 5
    quick = streaming.parse_args(["--quick"])
    assert quick.sizes == "300,600" and quick.part_size == 128
    assert streaming.parse_args([]).sizes == "10000,100000,1000000"


def test_results_keep_the_sections_other_scripts_wrote():
    from bench.run import carry_over

    previous = "# old\n\n## 1. Inference\n\nold one\n\n## 5. Beam\n\nbeam table\n\n## 7. Foreign\n\nforeign\n"
    new = "# tfsent benchmarks\n\n## Targets\n\nt\n\n## 1. Inference\n\nnew one\n\n## 8. bf16\n\nlabels\n"
    assert carry_over(previous, new) == ("# tfsent benchmarks\n\n## Targets\n\nt\n\n## 1. Inference\n\nnew one\n\n"
                                         "## 5. Beam\n\nbeam table\n\n## 7. Foreign\n\nforeign\n\n## 8. bf16\n\n"
                                         "labels\n")
    assert carry_over("", new) == new


def test_label_agreement_section_exact():
    from bench import agreement

    ref = agreement.PathLabels("xla fp32", "auto", np.array([0, 1, 2, 1]), np.full((4, 3), 1 / 3))
    bf16 = agreement.PathLabels("graph bf16", "auto", np.array([0, 1, 2, 2]), np.full((4, 3), 1 / 3) + 0.01)
    lines, targets = agreement.render([ref, bf16], 4, "test")
    assert "| graph bf16, packing auto | 75.00% | 1 | 0.01 | 0.01 |" in "\n".join(lines)
    assert [(t.value, t.goal, t.met) for t in targets] == [(0.75, 0.995, False)]


def test_model_alone_times_the_jobs_largest_batch_against_interleaved_matmuls(tmp_path):
    """The ceiling's batch is the shape the job runs most (here the packed 128-token sequences), its FLOPs are the
    engine's count of that one batch, and every round has one model timing and one matmul rate."""
    from bench import inference, model_alone
    from helpers.tiny import tiny_checkpoint
    from tfsent.inference.driver import load_with_options
    from tfsent.inference.engine import choose_units, plan_batches, plan_flops
    from tfsent.inference.options import PredictOptions
    from tfsent.inference.tokens import tokenize_texts
    from tfsent.runtime.strategy import make_strategy

    strategy = make_strategy("cpu")
    ckpt = tiny_checkpoint(tmp_path / "tiny")
    options = PredictOptions(strategy="cpu", global_batch_size=8, buckets=inference.BUCKETS, progress=False)
    predictor = load_with_options(ckpt, strategy, 1, options)
    sentences = inference.read_phrasebank(REPO / "data" / "financial_phrasebank" / "Sentences_AllAgree.txt")
    texts = inference.repeat_to(sentences, 200)

    alone = model_alone.measure(predictor, texts, 8, jit_compile=False, precision="float32", n_rounds=3)
    assert (alone.rows, alone.packed) == (200, True)
    # The packed plan of these rows, as predict_bucketed runs it: the batch shape with the most sequences.
    tokens = tokenize_texts(predictor.tokenizer, texts, inference.BUCKETS[-1], features=predictor.features)
    units = choose_units(tokens, inference.BUCKETS, predictor.packing("auto"), predictor.pad_values, 8, 1)
    run = {}
    for length, _, batch, steps in plan_batches(units.lengths, inference.BUCKETS, 8, 1):
        run[(batch, length)] = run.get((batch, length), 0) + batch * steps
    assert run[alone.shape] == max(run.values()) and alone.shape[0] == 8
    encoder = inference.encoder_shape(predictor.model).encoder()
    assert alone.flops == plan_flops([(alone.shape[1], None, 8, 1)], encoder, packed=True)
    assert len(alone.model_seconds) == len(alone.matmul_rates) == 3 and min(alone.matmul_rates) > 0
    assert alone.fraction == pytest.approx(sorted(alone.flops / s / m for s, m in
                                                  zip(alone.model_seconds, alone.matmul_rates))[1])
