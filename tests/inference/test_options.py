"""Every predict setting is either in the resume fingerprint or explicitly marked result-neutral; the config keys
are exactly the options (plus the three paths); changing any result setting changes the fingerprint."""

import dataclasses
import pathlib

from omegaconf import OmegaConf

from tfsent.config import conf_dir
from tfsent.inference.documents import ChunkOptions
from tfsent.inference.driver import fingerprint
from tfsent.inference.options import PredictOptions, QAOptions
from tfsent.predict import NOT_OPTIONS

# Another valid value for every result-changing setting: a new setting must be added here (or marked neutral).
OTHER = {"input_format": "csv", "text_column": "body", "id_column": "key", "split": "validation",
         "encoding": "latin-1", "global_batch_size": 32, "buckets": (32, 64), "max_length": 100,
         "documents": ChunkOptions(overlap=1), "part_size": 1000, "precision": "mixed_bfloat16",
         "jit_compile": False, "packing": False, "mask_seed": 7, "keep_columns": ("date",), "keep_text": False,
         "label_column": "label", "label_map": {"bearish": "negative"}, "revision": "v2", "label_names": ("a", "b", "c"),
         "qa": QAOptions(doc_stride=64), "backend": "litert"}
# ... and another value for every result-neutral one.
NEUTRAL = {"output_format": "csv", "strategy": "cpu", "steps_per_execution": 4, "merge": True, "overwrite": True,
           "progress": False, "shard_wait_s": 1.0, "num_shards": {"num_shards": 2, "shard_index": 1},
           "shard_index": {"num_shards": 3, "shard_index": 2}}


def test_every_setting_is_marked_and_every_result_setting_is_fingerprinted(tmp_path):
    fields = dataclasses.fields(PredictOptions)
    unmarked = [f.name for f in fields if "result" not in f.metadata]
    assert unmarked == []
    neutral = [f for f in fields if not f.metadata["result"]]
    assert all(f.metadata["why"] for f in neutral)
    result = {f.name for f in fields if f.metadata["result"]}
    assert result == set(OTHER), f"add a value for {result - set(OTHER)} to OTHER, or mark it result-neutral"
    ckpt, src = tmp_path / "ckpt", tmp_path / "in.txt"
    ckpt.mkdir()
    (ckpt / "tf_model.h5").write_bytes(b"w")
    src.write_text("x\n")
    base = PredictOptions()
    ref = fingerprint(ckpt, src, "text", "classifier", base, 1)
    for name, value in OTHER.items():
        changed = dataclasses.replace(base, **{name: value})
        assert fingerprint(ckpt, src, "text", "classifier", changed, 1) != ref, name
    assert {f.name for f in neutral} == set(NEUTRAL)
    for name, value in NEUTRAL.items():
        changed = dataclasses.replace(base, **value) if isinstance(value, dict) else \
            dataclasses.replace(base, **{name: value})
        assert fingerprint(ckpt, src, "text", "classifier", changed, 1) == ref, name
    # The model files, the replica count and the model kind count too.
    assert fingerprint(ckpt, src, "text", "classifier", base, 8) != ref
    assert fingerprint(ckpt, src, "text", "masked_lm", base, 1) != ref
    (ckpt / "tf_model.h5").write_bytes(b"new weights")
    assert fingerprint(ckpt, src, "text", "classifier", base, 1) != ref


def test_config_keys_are_the_options():
    cfg = OmegaConf.load(conf_dir() / "predict.yaml")
    keys = {k for k in cfg if k not in ("defaults", *NOT_OPTIONS)} | {"strategy"}  # a config group
    assert keys == {f.name for f in dataclasses.fields(PredictOptions)}
    # conf defaults equal the library defaults
    for f in dataclasses.fields(PredictOptions):
        if f.name in ("strategy", "documents", "qa"):
            continue
        value = cfg[f.name]
        value = tuple(value) if f.name == "buckets" else value
        assert value == f.default, f.name
    assert ChunkOptions(**cfg.documents) == PredictOptions().documents
    assert QAOptions(**cfg.qa) == PredictOptions().qa
    assert pathlib.Path(conf_dir() / "strategy" / "auto.yaml").is_file()
