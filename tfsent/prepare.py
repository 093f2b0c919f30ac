"""Prepare a classification corpus on the command line (Hydra, ``conf/prepare.yaml``)::

    python -m tfsent.prepare data=phrasebank_allagree
    python -m tfsent.prepare data=csv data.path=my.csv data.label_names=[neg,pos] model.source=/path/to/model

The work is ``tfsent.data.prepare.prepare_classification``; this module only reads the config.
"""

from __future__ import annotations

from typing import Any

from tfsent.config import ClassificationDataSpec, require, spec_from_config, to_container
from tfsent.data.manifest import Manifest
from tfsent.runtime.cli import hydra_entry


def prepare(cfg: Any) -> Manifest:
    """Prepare the configured ``data`` with ``model``'s tokenizer and return the written manifest."""
    from tfsent.data.prepare import prepare_classification
    from tfsent.models import load_tokenizer

    spec = spec_from_config(ClassificationDataSpec, cfg.data, "data")
    model = to_container(cfg.model) or {}
    source = model.get("tokenizer") or require(cfg, "model.source")
    manifest = prepare_classification(spec, load_tokenizer(str(source)), tokenizer_name=str(source),
                                      overwrite=bool(cfg.get("overwrite", False)),
                                      progress=bool(cfg.get("progress", True)))
    counts = ", ".join(f"{name} {info.count}" for name, info in manifest.splits.items())
    print(f"prepared {manifest.directory}: {counts}")
    return manifest


@hydra_entry("prepare")
def main(cfg: Any) -> Manifest:
    """``python -m tfsent.prepare`` / ``tfsent-prepare``: a user's mistake is one ``error:`` line, exit status 2."""
    return prepare(cfg)


if __name__ == "__main__":
    main()
