"""Export a trained classifier or question-answering model as a SavedModel for serving: the Hydra entry point.

``python -m tfsent.export ckpt_path=runs/.../model output=exports/finbert`` (see ``conf/export.yaml``) writes a
SavedModel whose ``serving_default`` takes raw strings (:mod:`tfsent.inference.serving`), or with
``inputs=token_ids`` one that takes token ids (:mod:`tfsent.inference.export`). This module is the only reader of
the export config; a user mistake ends with one line naming the key, file or model, not a traceback.
"""

from __future__ import annotations

import json
import pathlib

import tensorflow as tf
from omegaconf import DictConfig

from tfsent.config import ConfigError, require, to_container
from tfsent.inference.calibration import Settings, resolve_execution
from tfsent.inference.export import EXPORT_FORMAT, EXPORT_META, export_saved_model
from tfsent.inference.serving import ExportError, export_text_model, wordpiece_spec
from tfsent.models import CheckpointError, kinds, load_tokenizer
from tfsent.models.loading import read_config
from tfsent.models.sources import check_checkpoint, resolve_source
from tfsent.runtime.atomic import check_replaceable
from tfsent.runtime.cli import hydra_entry
from tfsent.runtime.paths import check_writable
from tfsent.runtime.precision import set_policy
from tfsent.runtime.strategy import make_strategy

INPUTS = ("text", "token_ids")


def export(cfg: DictConfig) -> pathlib.Path:
    """Turn a composed ``export`` config into an export and print where it went and what it needs.

    Returns:
        The SavedModel folder.

    Raises:
        ConfigError: a missing or unknown value. CheckpointError: an unreadable or masked-LM checkpoint.
        ExportError: a tokenizer that cannot run in the graph, or ``output`` exists without overwrite.
        NotOursError: ``output`` exists and is not an export tfsent wrote (no ``tfsent_export.json``).
    """
    source = str(require(cfg, "ckpt_path"))
    output = pathlib.Path(require(cfg, "output"))
    inputs = cfg.inputs
    if inputs not in INPUTS:
        raise ConfigError(f"inputs={inputs!r} must be one of {', '.join(INPUTS)}")
    # A SavedModel runs as a graph, on a serving machine this one may not be: the rule's path, no probe.
    settings = Settings(precision=str(cfg.get("precision", "float32")), jit_compile=False)
    check_writable(output, "output")  # before the weights load
    if output.exists() and not cfg.overwrite:
        raise ExportError(f"output={output} already exists", hint="add overwrite=true to replace it")
    check_replaceable(output, EXPORT_META, EXPORT_FORMAT)  # overwrite replaces only an export tfsent wrote
    ckpt = resolve_source(source, revision=cfg.get("revision"))
    check_checkpoint(ckpt)
    kind = kinds.kind_of(ckpt)
    if kind.export is None:
        raise CheckpointError(f"{ckpt}: a {kind.family}; export serves classifiers and question-answering models")
    tokenizer = load_tokenizer(ckpt)
    if inputs == "text" and kind.export != "text":
        inputs = "token_ids"
        print(f"export: a {kind.family} reads windows cut on the host (question + context): exporting a token-id "
              "signature, with the tokenizer files in tokenizer/ beside it")
    elif inputs == "text":
        try:  # a tokenizer the graph cannot run is known before the weights load
            wordpiece_spec(tokenizer, source)
        except ExportError as e:
            inputs = "token_ids"
            print(f"export: {str(e).split(';')[0]}, which tensorflow-text cannot run inside a SavedModel: "
                  "exporting a token-id signature instead, with the tokenizer files in tokenizer/ beside it")
    label_names = cfg.get("label_names")
    if label_names and kind.name != "classifier":
        raise ConfigError(f"label_names: {ckpt} is a {kind.family}, which has no labels to name")
    strategy = make_strategy("auto") if settings.precision == "auto" else tf.distribute.get_strategy()
    resolved = resolve_execution(strategy, settings, config=read_config(ckpt), calibrate=False)
    set_policy(resolved.options.precision, strategy)  # the policy the model is built under is what the graph computes
    loader = kind.load("loader")
    model = loader(ckpt, label_names=list(to_container(label_names))) if label_names else loader(ckpt)
    if inputs == "text":
        export_text_model(model, tokenizer, output, buckets=list(to_container(cfg.buckets)),
                          max_length=cfg.max_length, overwrite=bool(cfg.overwrite), name=source)
    else:
        export_saved_model(model, output, tokenizer, max_length=cfg.max_length, overwrite=bool(cfg.overwrite))
    meta = json.loads((output / EXPORT_META).read_text())
    needs = ", ".join(meta.get("custom_ops", [])) or "core TensorFlow only"
    names = f"labels {meta['label_names']}" if "label_names" in meta else f"top_k {meta['top_k']} per window"
    print(f"export: {output} (serving_default: {', '.join(meta['inputs'])} -> {', '.join(meta['outputs'])}; "
          f"{names}; max_length {meta['max_length']}; {meta['precision']}; ops beyond core TF: {needs})")
    return output


@hydra_entry("export")
def main(cfg: DictConfig) -> None:
    """``python -m tfsent.export ckpt_path=... output=...`` / ``tfsent-export``: a user's mistake is one
    ``error:`` line and exit status 2."""
    export(cfg)


if __name__ == "__main__":
    main()
