"""LiteRT scoring end to end: a classifier and a QA model converted once, scored within 1e-5 of TensorFlow's path,
and a second run that scores from the cache without importing TensorFlow. Every architecture row's conversion is
checked too (slow), or recorded as falling back to TensorFlow with its reason.

Conversions take seconds each: the module converts each model once, in its own cache folder, and the tests share it.
"""

import hashlib
import importlib.metadata
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tfsent.inference import litert, litert_convert
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions, QAOptions

from fault_helpers import REPO, child_env
from helpers.qa import tiny_qa_model
from helpers.tiny import LABELS, tiny_checkpoint

WORDS = "profit rose sharply while costs fell and the outlook for margins improved in the quarter".split()
OPTS = dict(strategy="cpu", global_batch_size=8, buckets=(16, 32, 64), progress=False)
PROBS = [f"prob_{n}" for n in LABELS]
TINY_SQUAD = REPO / "data" / "squad" / "tiny-v1.1.json"


def _texts(n, seed=0):
    rng = np.random.RandomState(seed)
    return [" ".join(rng.choice(WORDS, rng.randint(1, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("litert-cache")


@pytest.fixture
def litert_env(cache, monkeypatch):
    monkeypatch.setenv("TFSENT_CACHE_DIR", str(cache))
    monkeypatch.delenv("TFSENT_BACKEND")


@pytest.fixture(scope="module")
def scored(tmp_path_factory, cache):
    """A tiny classifier scored on LiteRT (converting it) and on TensorFlow's XLA fp32, the same 45 rows."""
    folder = tmp_path_factory.mktemp("litert")
    ckpt = tiny_checkpoint(folder / "model", max_seq_length=64)
    pd.DataFrame({"text": _texts(45)}).to_csv(folder / "in.csv", index=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TFSENT_CACHE_DIR", str(cache))
        summaries = {backend: predict(ckpt, folder / "in.csv", folder / f"{backend}.csv",
                                      PredictOptions(**OPTS, backend=backend))
                     for backend in ("litert", "tensorflow")}
        # packing: auto keeps these rows padded on LiteRT (exact shapes leave little padding to save): pack them.
        summaries["packed"] = predict(ckpt, folder / "in.csv", folder / "packed.csv",
                                      PredictOptions(**OPTS, backend="litert", packing=True))
    return ckpt, folder, summaries


def test_litert_rows_equal_tensorflow_s(scored):
    ckpt, folder, summaries = scored
    lite, tf_ = (pd.read_csv(folder / f"{b}.csv") for b in ("litert", "tensorflow"))
    assert summaries["litert"]["backend"] == "litert" and summaries["tensorflow"]["backend"] == "tensorflow"
    assert summaries["litert"]["replicas"] == 1 and summaries["litert"]["rows"] == 45
    assert lite["row"].tolist() == list(range(45)) and lite["label"].tolist() == tf_["label"].tolist()
    np.testing.assert_allclose(lite[PROBS].to_numpy(), tf_[PROBS].to_numpy(), atol=1e-5)
    packed = pd.read_csv(folder / "packed.csv")
    assert packed["label"].tolist() == tf_["label"].tolist()
    np.testing.assert_allclose(packed[PROBS].to_numpy(), tf_[PROBS].to_numpy(), atol=1e-5)
    # The first run converted the padded rows' signature (the packed run, the packed one).
    startup = summaries["litert"]["startup"]
    assert {"tokenizer", "model", "convert", "first_batch"} <= set(startup) and startup["convert"] > 0


def test_the_cache_holds_each_signature_with_its_hash(scored, cache):
    (folder,) = list((cache / "litert").iterdir())
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == litert.FORMAT and meta["unsupported"] == {}
    assert sorted(meta["signatures"]) == ["packed", "padded"]
    assert meta["facts"] == {"features": ["input_ids", "attention_mask", "token_type_ids"], "first_position": 0,
                             "packing_gap": 0}
    for name, entry in meta["signatures"].items():
        assert hashlib.sha256((folder / f"{name}.tflite").read_bytes()).hexdigest() == entry["sha256"]
    stored = meta["checkpoint"]
    assert stored["facts"]["head_names"] == list(LABELS) and stored["facts"]["config"]["model_type"] == "bert"
    assert stored["tokenizer"]["sha256"] == hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    assert stored["tokenizer"]["truncation_side"] == "right" and stored["tokenizer"]["pad_token_id"] == 0
    assert stored["tokenizer"]["tokenizers"] == importlib.metadata.version("tokenizers")


def test_dense_layers_convert_to_one_operator_each(scored, cache):
    """No shape is computed at run time around a Dense layer's FULLY_CONNECTED (litert_convert.dense_as_matmul):
    XNNPACK takes the whole layer stack."""
    from ai_edge_litert.interpreter import Interpreter

    (folder,) = list((cache / "litert").iterdir())
    for name in ("padded", "packed"):
        ops = [op["op_name"] for op in
               Interpreter(model_path=str(folder / f"{name}.tflite"))._get_ops_details()]
        assert ops.count("FULLY_CONNECTED") >= 10, ops
        # tensordot's way: a RESHAPE before and after every FULLY_CONNECTED, to a product of run-time dimensions.
        assert "REDUCE_PROD" not in ops and ops.count("RESHAPE") < ops.count("FULLY_CONNECTED"), ops


def test_tensordot_over_the_last_axis_is_traced_as_matmul():
    import tensorflow as tf

    a, b = tf.random.normal([2, 5, 3]), tf.random.normal([3, 4])
    with litert_convert.dense_as_matmul():
        from tf_keras.src.layers.core import dense

        traced = tf.function(lambda x: dense.tf.tensordot(x, b, [[2], [0]])).get_concrete_function(
            tf.TensorSpec([None, None, 3]))
        other = dense.tf.tensordot(a, tf.random.normal([5, 2]), [[1], [0]])  # not the last axis: tensordot's own
    ops = {op.type for op in traced.graph.get_operations()}
    assert "BatchMatMulV2" in ops and "Prod" not in ops
    np.testing.assert_allclose(traced(a).numpy(), tf.tensordot(a, b, [[2], [0]]).numpy(), atol=1e-6)
    assert other.shape == (2, 3, 2)
    assert dense.tf is tf.compat.v2 or dense.tf.__name__ == tf.compat.v2.__name__


@pytest.mark.parametrize("damage", ["tokenizer file", "facts record", "another tokenizers version"])
def test_a_damaged_stored_tokenizer_or_record_is_read_through_transformers_and_stored_again(
        scored, cache, litert_env, tmp_path, caplog, damage):
    ckpt, folder, _ = scored
    (key,) = [p for p in (cache / "litert").iterdir() if (p / "meta.json").exists()]
    stored, meta_file = key / "tokenizer.json", key / "meta.json"
    good, meta = stored.read_text(), json.loads(meta_file.read_text())
    checkpoint = meta["checkpoint"]
    if damage == "tokenizer file":
        stored.write_text(good + " ")  # still JSON, not what was stored
    elif damage == "facts record":
        meta_file.write_text(json.dumps({**meta, "checkpoint": {**checkpoint, "facts": {"config": {}}}}))
    else:
        meta_file.write_text(json.dumps({**meta, "checkpoint": {
            **checkpoint, "tokenizer": {**checkpoint["tokenizer"], "tokenizers": "0.0.1"}}}))
    summary = predict(ckpt, folder / "in.csv", tmp_path / "again.csv", PredictOptions(**OPTS))
    assert summary["backend"] == "litert"
    said = {"tokenizer file": "does not match the sha256", "facts record": "are unreadable (KeyError"}.get(damage, "")
    assert said in caplog.text
    assert stored.read_text() == good and json.loads(meta_file.read_text())["checkpoint"] == meta["checkpoint"]
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "again.csv")[PROBS].to_numpy(),
                                  pd.read_csv(folder / "litert.csv")[PROBS].to_numpy())


SCRIPT = """
import runpy, sys
sys.argv = ["tfsent.predict"] + sys.argv[1:]
try:
    runpy.run_module("tfsent.predict", run_name="__main__")
finally:
    print("tensorflow imported:", "tensorflow" in sys.modules)
    print("transformers imported:", "transformers" in sys.modules)
"""


def test_a_warm_run_scores_without_importing_tensorflow_or_transformers(scored, cache, tmp_path):
    ckpt, folder, _ = scored
    out = tmp_path / "warm.csv"
    done = subprocess.run([sys.executable, "-c", SCRIPT, f"ckpt_path={ckpt}", f"input={folder / 'in.csv'}",
                           f"output={out}", "strategy=cpu", "global_batch_size=8", "buckets=[16,32,64]",
                           "progress=false", "verbose=true", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=child_env(TFSENT_CACHE_DIR=str(cache), TFSENT_BACKEND=""), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    # The tokenizer and the checkpoint's facts come from what the converting run stored beside the model.
    assert lines[-2:] == ["tensorflow imported: False", "transformers imported: False"]
    start = [line for line in lines if line.startswith("predict: start-up ")]
    assert len(start) == 1 and " to the first batch on litert (imports " in start[0]
    assert "convert" in start[0] and ", first batch " in start[0]
    warm, tf_ = pd.read_csv(out), pd.read_csv(folder / "tensorflow.csv")
    assert warm["label"].tolist() == tf_["label"].tolist()
    np.testing.assert_allclose(warm[PROBS].to_numpy(), tf_[PROBS].to_numpy(), atol=1e-5)
    np.testing.assert_array_equal(warm[PROBS].to_numpy(), pd.read_csv(folder / "litert.csv")[PROBS].to_numpy())


def test_precision_int8_scores_from_int8_files_made_once_from_the_float32_ones(scored, cache, litert_env, tmp_path):
    ckpt, folder, _ = scored
    summary = predict(ckpt, folder / "in.csv", tmp_path / "int8.csv", PredictOptions(**OPTS, precision="int8"))
    assert summary["backend"] == "litert" and summary["rows"] == 45
    int8, fp32 = pd.read_csv(tmp_path / "int8.csv"), pd.read_csv(folder / "litert.csv")
    assert int8["row"].tolist() == list(range(45))
    # Int8 matrix products move probabilities a little (the tiny model: < 0.02), never the rows' order.
    gap = np.abs(int8[PROBS].to_numpy() - fp32[PROBS].to_numpy()).max()
    assert 0 < gap < 0.05, gap
    (folder_,) = [p for p in cache.joinpath("litert").iterdir() if (p / "meta.json").exists()]
    meta = json.loads((folder_ / "meta.json").read_text())
    version = importlib.metadata.version("ai-edge-quantizer")
    name = f"padded-int8-{version}"
    assert name in meta["signatures"] and "padded" in meta["signatures"]
    flat = (folder_ / f"{name}.tflite").read_bytes()
    assert hashlib.sha256(flat).hexdigest() == meta["signatures"][name]["sha256"]
    assert len(flat) < (folder_ / "padded.tflite").stat().st_size
    # A second run reads the int8 file: nothing is converted or quantized again.
    again = predict(ckpt, folder / "in.csv", tmp_path / "again.csv", PredictOptions(**OPTS, precision="int8"))
    assert again["startup"].get("convert", 0) == 0
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "again.csv")[PROBS].to_numpy(), int8[PROBS].to_numpy())


@pytest.mark.slow
def test_a_damaged_cache_file_is_converted_again(scored, cache, litert_env, tmp_path):
    ckpt, folder, _ = scored
    (key,) = list((cache / "litert").iterdir())
    padded = key / "padded.tflite"
    good = padded.read_bytes()
    padded.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    summary = predict(ckpt, folder / "in.csv", tmp_path / "again.csv", PredictOptions(**OPTS))
    assert summary["backend"] == "litert" and summary["startup"]["convert"] > 0
    assert padded.read_bytes() != good[:-1] + bytes([good[-1] ^ 1])
    np.testing.assert_allclose(pd.read_csv(tmp_path / "again.csv")[PROBS].to_numpy(),
                               pd.read_csv(folder / "litert.csv")[PROBS].to_numpy(), atol=1e-6)


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    return tiny_qa_model(tmp_path_factory.mktemp("qa") / "model")


def test_a_qa_model_answers_as_on_tensorflow(qa_model, litert_env, tmp_path):
    options = dict(strategy="cpu", global_batch_size=8, progress=False, max_length=64, qa=QAOptions(doc_stride=16))
    frames = {}
    for backend in ("litert", "tensorflow"):
        summary = predict(qa_model, TINY_SQUAD, tmp_path / f"{backend}.csv", PredictOptions(**options, backend=backend))
        assert summary["backend"] == backend and summary["rows"] == 56
        frames[backend] = pd.read_csv(tmp_path / f"{backend}.csv", keep_default_na=False)
    assert frames["litert"]["answer"].tolist() == frames["tensorflow"]["answer"].tolist()
    np.testing.assert_allclose(frames["litert"]["score"], frames["tensorflow"]["score"], atol=1e-5)


def test_a_masked_lm_or_a_tensorflow_setting_runs_on_tensorflow(scored, litert_env, tmp_path):
    ckpt, folder, _ = scored
    summary = predict(ckpt, folder / "in.csv", tmp_path / "graph.csv", PredictOptions(**OPTS, jit_compile=False))
    assert summary["backend"] == "tensorflow"


# What does not convert, and why: the reason is recorded in the cache and logged once, and the model runs on
# TensorFlow. DeBERTa-v2's TF attention decides on a tensor in Python (no dynamic length); MPNet's relative position
# buckets divide and take logs in float64, which LiteRT has no builtin for.
FALLS_BACK = {
    "deberta-v2": "OperatorNotAllowedInGraphError in TFDebertaV2DisentangledSelfAttention: Using a symbolic "
                  "`tf.Tensor` as a Python `bool` is not allowed",
    "mpnet": "needs TensorFlow operators outside LiteRT's builtins: Log, Mul, RealDiv",
}


def _architectures():
    from helpers.architectures import TINY

    return [pytest.param(arch, marks=() if arch == "bert" else pytest.mark.slow) for arch in TINY]


@pytest.mark.parametrize("arch", _architectures())
def test_every_architecture_converts_within_1e_5_or_falls_back_with_its_reason(arch):
    import tensorflow as tf
    import tf_keras

    from tfsent.inference import litert, litert_convert
    from tfsent.inference.packing import Packing
    from tfsent.inference.plan import choose_units, plan_batches
    from tfsent.inference.tokens import TokenRows
    from tfsent.models import architectures, labels as labels_lib
    from tfsent.models.classifier import SequenceClassifier

    from helpers.architectures import tiny_hf_config

    tf_keras.utils.set_random_seed(0)
    hf = architectures.get(arch).task_cls("ForSequenceClassification")(tiny_hf_config(arch))
    hf.build_in_name_scope()
    names = ("Neutral", "Positive", "Negative")
    model = SequenceClassifier(hf, arch=arch, label_map=labels_lib.LabelMap(names, names, (0, 1, 2)),
                               max_seq_length=64)
    rng = np.random.default_rng(1)
    lengths = rng.integers(2, 60, size=24)
    rows = {"input_ids": [rng.integers(5, 1000, size=n).tolist() for n in lengths],
            "attention_mask": [[1] * n for n in lengths], "token_type_ids": [[0] * n for n in lengths]}
    tokens = TokenRows.from_ragged({f: rows[f] for f in model.features})
    first = model.first_position()
    packing = Packing(auto=False, first_position=first, uncounted_id=first - 1 if first else None,
                      gap=model.architecture.packing_gap(hf.config), capacity=32)
    for signature, pack in (("padded", None), ("packed", packing)):
        try:
            converted = litert.LiteRTModel(litert_convert.convert(model, signature), threads=1)
        except litert_convert.Unsupported as e:
            assert str(e).startswith(FALLS_BACK[arch])
            continue
        assert arch not in FALLS_BACK
        units = choose_units(tokens, (16, 32, 64), pack, {"input_ids": 0}, 8)
        for length, mine, batch, _ in plan_batches(units.lengths, (16, 32, 64), 8):  # every bucket shape
            arrays = units.batch(mine, length, batch)
            want = model.predict_step({k: tf.constant(v) for k, v in arrays.items()})
            got = converted(arrays)
            np.testing.assert_allclose(got["probs"], want["probs"].numpy(), atol=1e-5, err_msg=signature)
            np.testing.assert_array_equal(got["label_id"], want["label_id"].numpy())
