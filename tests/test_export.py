"""python -m tfsent.export: a raw-string SavedModel that a process without tfsent serves as tfsent.predict scores.

The serving side runs tests/helpers/saved_model_client.py in a fresh interpreter (TensorFlow + tensorflow-text,
never tfsent); the reference is ``tfsent.predict.predict`` on the checkpoint the export was made from.
"""

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import tf_keras

from tfsent.data.sources import read_records
from tfsent.export import main
from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.data.tokenize import train_bpe_tokenizer
from helpers.tiny import tiny_config

REPO = pathlib.Path(__file__).resolve().parents[1]
CLIENT = REPO / "tests" / "helpers" / "saved_model_client.py"
LABELS = ["negative", "neutral", "positive"]
# A wider initialisation than BERT's 0.02 and a large random head, so that an untrained model's labels differ from
# sentence to sentence and the comparison below is not between two constant outputs.
TINY = tiny_config(max_position_embeddings=64, initializer_range=0.2)
# The ops README.md's "Export and serving" section names.
CUSTOM_OPS = ["FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "NormalizeUTF8"]


def sharpen_head(model, std: float = 4.0) -> None:
    kernel = model.hf_model.classifier.kernel
    kernel.assign(np.random.default_rng(0).normal(0, std, kernel.shape).astype(np.float32))


def serving_texts(phrasebank_dir: pathlib.Path, n: int = 500) -> list[str]:
    demo = (REPO / "data" / "demo" / "sentences.txt").read_text().splitlines()
    records = read_records(phrasebank_dir / "Sentences_50Agree.txt", "phrasebank")
    return [t for t in demo if t.strip()] + [r.text for r in records[:: len(records) // n][:n]]


def serve_in_fresh_process(export_dir: pathlib.Path, texts: list[str], tmp_path: pathlib.Path) -> dict:
    texts_path = tmp_path / "texts.json"
    texts_path.write_text(json.dumps(texts))
    done = subprocess.run([sys.executable, str(CLIENT), str(export_dir), str(texts_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    served = json.loads(done.stdout.strip().splitlines()[-1])
    # TensorFlow's native error lines (glog "E" prefix), e.g. oneDNN's "supports DT_INT32 only on platforms with
    # AVX-512" for an integer Transpose, which a serving user would see on every load.
    served["native_errors"] = [ln for ln in done.stderr.splitlines() if re.match(r"^\S+ \S+: E ", ln)]
    return served


def predict_reference(ckpt: pathlib.Path, texts: list[str], tmp_path: pathlib.Path) -> pd.DataFrame:
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n")
    predict(ckpt, tmp_path / "texts.txt", tmp_path / "scores.csv", PredictOptions(strategy="cpu", progress=False))
    return pd.read_csv(tmp_path / "scores.csv")


def assert_served_like_predict(served: dict, frame: pd.DataFrame, atol: float) -> None:
    assert served["tfsent_imported"] is False
    assert served["label"] == frame["label"].tolist()
    assert served["label_id"] == frame["label_id"].tolist()
    np.testing.assert_allclose(np.array(served["probs"]), frame[[f"prob_{k}" for k in LABELS]].to_numpy(),
                               atol=atol, rtol=0)
    assert len(set(served["label"])) >= 2


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> pathlib.Path:
    tf_keras.utils.set_random_seed(0)
    model = build_classifier(ClassifierSpec(config=TINY, label_names=LABELS, max_seq_length=64))
    sharpen_head(model)
    path = tmp_path_factory.mktemp("ckpt") / "model"
    return model.save_pretrained(path, tokenizer=load_tokenizer("minilm_l6"))


def export_and_serve(ckpt: pathlib.Path, phrasebank_dir: pathlib.Path, tmp_path: pathlib.Path, monkeypatch,
                     max_length: int) -> pathlib.Path:
    """Export through the command line, serve 508 sentences in a fresh process, compare with tfsent.predict."""
    out = tmp_path / "export"
    monkeypatch.setattr(sys, "argv", ["tfsent.export", f"ckpt_path={ckpt}", f"output={out}",
                                      f"hydra.run.dir={tmp_path / 'hydra'}"])
    main()
    meta = json.loads((out / "tfsent_export.json").read_text())
    assert meta["custom_ops"] == CUSTOM_OPS and meta["max_length"] == max_length and meta["label_names"] == LABELS

    texts = serving_texts(phrasebank_dir)
    assert len(texts) == 508
    served = serve_in_fresh_process(out, texts, tmp_path)
    assert served["unregistered_ops"] == CUSTOM_OPS  # exactly what core TensorFlow lacks without tensorflow_text
    assert served["native_errors"] == []
    assert_served_like_predict(served, predict_reference(ckpt, texts, tmp_path), atol=1e-5)
    return out


def test_exported_model_serves_raw_text_like_predict(tiny_ckpt, phrasebank_dir, tmp_path, monkeypatch):
    out = export_and_serve(tiny_ckpt, phrasebank_dir, tmp_path, monkeypatch, max_length=64)

    shown = subprocess.run([str(pathlib.Path(sys.executable).parent / "saved_model_cli"), "show", "--dir", str(out),
                            "--all"], capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0, shown.stderr[-3000:]
    signature = shown.stdout.split("signature_def['serving_default']:")[1]
    for line in ("inputs['text'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)",
                 "outputs['label'] tensor_info:\n        dtype: DT_STRING",
                 "outputs['label_id'] tensor_info:\n        dtype: DT_INT32",
                 "outputs['probs'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1, 3)"):
        assert line in signature


def run_main(monkeypatch, capsys, tmp_path, *args: str) -> str:
    """The ``error:`` line (and ``hint:`` line, joined) a user sees; the exit status must be 2."""
    monkeypatch.setattr(sys, "argv", ["tfsent.export", *args, f"hydra.run.dir={tmp_path / 'hydra'}"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith(("error:", "hint:"))]
    return " | ".join(lines)


def test_user_mistakes_end_in_one_line(tiny_ckpt, tmp_path, monkeypatch, capsys):
    texts = ["profit rose in the quarter", "sales fell sharply"] * 20
    tokenizer = load_tokenizer(train_bpe_tokenizer(texts, 300, tmp_path / "tok"))
    roberta = build_classifier(ClassifierSpec(
        config=dict(arch="roberta", vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=34, pad_token_id=1, type_vocab_size=1),
        label_names=LABELS, max_seq_length=32))
    ckpt = roberta.save_pretrained(tmp_path / "roberta", tokenizer=tokenizer)
    out = tmp_path / "out"
    # Byte-level BPE cannot run in the graph: one line says so and the token-id signature is written instead.
    monkeypatch.setattr(sys, "argv", ["tfsent.export", f"ckpt_path={ckpt}", f"output={tmp_path / 'bpe'}",
                                      f"hydra.run.dir={tmp_path / 'hydra'}"])
    capsys.readouterr()
    main()
    said = capsys.readouterr().out.splitlines()
    assert said[0] == (f"export: {ckpt}: a BPE tokenizer, which tensorflow-text cannot run inside a SavedModel: "
                       "exporting a token-id signature instead, with the tokenizer files in tokenizer/ beside it")
    meta = json.loads((tmp_path / "bpe" / "tfsent_export.json").read_text())
    assert meta["inputs"] == ["input_ids", "attention_mask"] and (tmp_path / "bpe" / "tokenizer").is_dir()
    cases = [
        ([f"output={out}"], "error: ckpt_path is required | hint: set ckpt_path=... on the command line"),
        ([f"ckpt_path={tiny_ckpt}", f"output={out}", "inputs=strings"],
         "error: inputs='strings' must be one of text, token_ids"),
        ([f"ckpt_path={tmp_path / 'absent'}", f"output={out}"], f"error: model source '{tmp_path / 'absent'}'"),
        ([f"ckpt_path={tiny_ckpt}", f"output={tiny_ckpt}"],
         f"error: output={tiny_ckpt} already exists | hint: add overwrite=true to replace it"),
        # overwrite replaces only an export tfsent wrote: not the model folder named by mistake.
        ([f"ckpt_path={tiny_ckpt}", f"output={tiny_ckpt}", "overwrite=true"],
         f"error: {tiny_ckpt}: holds no tfsent_export.json of format tfsent.export/*, so tfsent did not write it"),
        ([f"ckpt_path={tiny_ckpt}", f"output={out}", "precision=fp16"],
         "error: precision='fp16' is unknown; expected one of auto, float32, mixed_bfloat16, mixed_float16"),
    ]
    for args, start in cases:
        message = run_main(monkeypatch, capsys, tmp_path, *args)
        assert message.startswith(start), message
    assert not out.exists()
    assert (tiny_ckpt / "tfsent_model.json").is_file() and (tiny_ckpt / "tf_model.h5").is_file()


def test_token_id_export_from_the_command_line(tiny_ckpt, tmp_path, monkeypatch):
    out = tmp_path / "ids"
    monkeypatch.setattr(sys, "argv", ["tfsent.export", f"ckpt_path={tiny_ckpt}", f"output={out}", "inputs=token_ids",
                                      f"hydra.run.dir={tmp_path / 'hydra'}"])
    main()
    meta = json.loads((out / "tfsent_export.json").read_text())
    assert meta["inputs"] == ["input_ids", "attention_mask", "token_type_ids"] and "custom_ops" not in meta
    assert meta["precision"] == "float32"
    assert (out / "tokenizer" / "vocab.txt").is_file()


@pytest.mark.parametrize("device, flags, policy", [
    ("cpu", {"avx2", "fma"}, "float32"),
    # Native bf16 too: a SavedModel runs as a graph on a machine this one may not be; the rule takes graph fp32.
    ("cpu", {"avx2", "fma", "avx512f", "avx512_bf16"}, "float32"),
    ("tpu", {"avx2", "fma"}, "mixed_bfloat16"),
])
def test_export_precision_auto_follows_the_inference_rule(tiny_ckpt, tmp_path, monkeypatch, device, flags, policy):
    from tfsent.inference import calibration
    from tfsent.runtime import execution
    from tfsent.runtime import strategy as strategy_lib

    monkeypatch.setattr(execution, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(strategy_lib, "device_kind", lambda strategy: device)  # calibration imports it on use
    out = tmp_path / "ids"
    monkeypatch.setattr(sys, "argv", ["tfsent.export", f"ckpt_path={tiny_ckpt}", f"output={out}", "inputs=token_ids",
                                      "precision=auto", f"hydra.run.dir={tmp_path / 'hydra'}"])
    try:
        main()
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")  # the policy is global: never leak it
    assert json.loads((out / "tfsent_export.json").read_text())["precision"] == policy
    # The same rule tfsent.predict applies to a run split over processes, and Beam on each worker.
    from tfsent.inference.options import PredictOptions as Options
    from tfsent.runtime.strategy import make_strategy

    same = calibration.resolve_execution(make_strategy("cpu"), Options(precision="auto", jit_compile=False),
                                         calibrate=False)
    assert same.options.precision == policy


@pytest.mark.parametrize("fixture", ["distilbert_zip_bin", "mpnet_legacy_bin"])
def test_transformers_wordpiece_folder_serves_raw_text_like_predict(fixture, tmp_path, monkeypatch):
    # A folder PyTorch transformers wrote (no tfsent metadata): its WordPiece tokenizer runs in the graph.
    ckpt = REPO / "tests" / "fixtures" / "hf" / fixture
    expected = json.loads((ckpt / "expected.json").read_text())
    out = tmp_path / "export"
    monkeypatch.setattr(sys, "argv", ["tfsent.export", f"ckpt_path={ckpt}", f"output={out}",
                                      f"hydra.run.dir={tmp_path / 'hydra'}"])
    main()
    served = serve_in_fresh_process(out, expected["texts"], tmp_path)
    assert served["tfsent_imported"] is False
    labels = expected["labels"]
    assert served["label"] == [labels[i] for i in np.argmax(expected["probs"], axis=1)]
    np.testing.assert_allclose(np.array(served["probs"]), expected["probs"], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_minilm_export_serves_raw_text_like_predict(phrasebank_dir, tmp_path, monkeypatch):
    tf_keras.utils.set_random_seed(0)
    model = build_classifier(ClassifierSpec(source="minilm_l6", label_names=LABELS))
    sharpen_head(model, std=0.5)
    ckpt = model.save_pretrained(tmp_path / "minilm", tokenizer=load_tokenizer("minilm_l6"))
    export_and_serve(ckpt, phrasebank_dir, tmp_path, monkeypatch, max_length=128)  # the trained length
