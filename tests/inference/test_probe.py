"""The one-layer probe behind ``precision/jit_compile: auto``: it builds every architecture's shape in one layer,
times each candidate path, and its answer depends on the model's shape, never its weights."""

import pytest

from tfsent.inference import probe
from tfsent.models import architectures
from tfsent.runtime import execution as ex

from helpers.architectures import TINY, tiny_hf_config


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_every_architecture_probes_in_one_layer(model_type):
    config = tiny_hf_config(model_type)
    small = probe.one_layer_config(config)
    assert small.num_hidden_layers == 1 and config.num_hidden_layers == 2  # the checkpoint's config is untouched
    assert small.vocab_size == probe.PROBE_VOCAB
    path = ex.XLA_FP32 if architectures.get(model_type).xla else ex.GRAPH_FP32
    runner = probe._runner(config, path, probe.probe_length(config))
    assert runner() > 0
    assert len(runner.call.get_concrete_function(runner.batch).graph.as_graph_def().node) > 0


def fake_runners(monkeypatch, seconds):
    """Runners that take ``seconds[path name]``; returns the names in the order they ran and were built."""
    ran, built = [], []

    class Runner:
        def __init__(self, path):
            self.path = path
            built.append(path.name)

        def __call__(self):
            ran.append(self.path.name)
            return seconds[self.path.name]

    monkeypatch.setattr(probe, "_runner", lambda config, path, length: Runner(path))
    return ran, built


PAIR = [ex.XLA_FP32, ex.GRAPH_BF16]


def test_a_clear_bf16_gain_decides_without_compiling_xla(monkeypatch):
    ran, built = fake_runners(monkeypatch, {"graph fp32": 0.02, "graph bf16": 0.01})
    record = probe.probe(tiny_hf_config("bert"), PAIR, budget_s=0.0)
    assert (record["choice"], record["decided"]) == ("graph bf16", "bf16 gain")
    assert built == ["graph bf16", "graph fp32"]  # no XLA compilation
    assert ran == ["graph fp32", "graph bf16"] * probe.MIN_ROUNDS  # interleaved, the minimum rounds
    assert record["timings"] == {"graph fp32": 0.02, "graph bf16": 0.01} and record["probe"]["layers"] == 1


def test_no_bf16_gain_leaves_xla_fp32(monkeypatch):
    ran, built = fake_runners(monkeypatch, {"graph fp32": 0.01, "graph bf16": 0.012})
    record = probe.probe(tiny_hf_config("bert"), PAIR, budget_s=0.0)
    assert (record["choice"], record["decided"]) == ("xla fp32", "bf16 gain") and "xla fp32" not in built


def test_a_small_gain_is_settled_head_to_head_with_xla_fp32(monkeypatch):
    # bf16 gains 1.1x over graph fp32: within what XLA fp32 may gain too, so XLA fp32 is compiled and timed.
    ran, built = fake_runners(monkeypatch, {"graph fp32": 0.011, "graph bf16": 0.01, "xla fp32": 0.009})
    record = probe.probe(tiny_hf_config("bert"), PAIR, budget_s=0.0)
    assert (record["choice"], record["decided"]) == ("xla fp32", "head to head")
    assert built == ["graph bf16", "graph fp32", "xla fp32"]
    assert ran[2 * probe.MIN_ROUNDS:] == ["xla fp32", "graph bf16"] * probe.MIN_ROUNDS
    assert record["timings"]["xla fp32 (head to head)"] == 0.009 and record["rounds"] == 2 * probe.MIN_ROUNDS


def test_other_candidates_are_timed_as_they_are(monkeypatch):
    ran, built = fake_runners(monkeypatch, {"graph fp32": 0.02, "graph bf16": 0.019})
    record = probe.probe(tiny_hf_config("bert"), [ex.GRAPH_FP32, ex.GRAPH_BF16], budget_s=60.0)
    assert record["choice"] == "graph bf16" and record["rounds"] == probe.MAX_ROUNDS  # budget left: up to the cap


def test_the_real_probe_is_bounded():
    record = probe.probe(tiny_hf_config("bert"), [ex.XLA_FP32, ex.GRAPH_BF16])
    assert {"graph fp32", "graph bf16"} <= set(record["timings"]) and record["choice"] in ("xla fp32", "graph bf16")
    # A gain between 1x and CLEAR_GAIN (timing-dependent on a shared machine) adds a head-to-head stage of its own.
    stages = 2 if record["decided"] == "head to head" else 1
    assert stages * probe.MIN_ROUNDS <= record["rounds"] <= stages * probe.MAX_ROUNDS
    assert record["seconds"] > 0


def test_the_key_is_the_shape_cpu_and_tensorflow_not_the_weights():
    paths = [ex.XLA_FP32, ex.GRAPH_BF16]
    flags = frozenset({"avx512_bf16"})
    base = tiny_hf_config("bert")
    key = probe.shape_key(base, flags, "2.20.0", 128, paths, 1)
    relabelled = tiny_hf_config("bert", labels=("a", "b"))  # another checkpoint of the same shape
    relabelled.initializer_range = 0.02
    assert probe.shape_key(relabelled, flags, "2.20.0", 128, paths, 1) == key
    wider = tiny_hf_config("bert")
    wider.intermediate_size = 64
    deeper = tiny_hf_config("bert")
    deeper.num_hidden_layers = 4
    for other in (probe.shape_key(wider, flags, "2.20.0", 128, paths, 1),
                  probe.shape_key(deeper, flags, "2.20.0", 128, paths, 1),
                  probe.shape_key(tiny_hf_config("roberta"), flags, "2.20.0", 128, paths, 1),
                  probe.shape_key(base, frozenset({"amx_bf16"}), "2.20.0", 128, paths, 1),
                  probe.shape_key(base, flags, "2.21.0", 128, paths, 1),
                  probe.shape_key(base, flags, "2.20.0", 64, paths, 1),
                  probe.shape_key(base, flags, "2.20.0", 128, paths[:1], 1),
                  probe.shape_key(base, flags, "2.20.0", 128, paths, 8)):
        assert other != key


def test_probe_length_respects_the_job_and_the_positions():
    bert, roberta = tiny_hf_config("bert"), tiny_hf_config("roberta")  # 72 positions; RoBERTa's start after pad 0
    assert probe.probe_length(bert) == 72 and probe.probe_length(roberta) == 71
    assert probe.probe_length(bert, 32) == 32
    bert.max_position_embeddings = 512
    assert probe.probe_length(bert) == probe.PROBE_LENGTH
