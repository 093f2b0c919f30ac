"""Prepare a classification corpus on the command line (Hydra, ``conf/prepare.yaml``)::

    python -m tfsent.prepare data=phrasebank_allagree
    python -m tfsent.prepare data=csv data.path=my.csv data.label_names=[neg,pos] model.source=/path/to/model

The work is ``tfsent.data.prepare.prepare_classification``; this module only reads the config.
"""

from __future__ import annotations

from typing import Any

from tfsent.config import ClassificationDataSpec, conf_dir, require, spec_from_config, to_container
from tfsent.data.manifest import Manifest


def _main(cfg: Any) -> Manifest:
    from tfsent.data.prepare import prepare_classification
    from tfsent.models import load_tokenizer

    spec = spec_from_config(ClassificationDataSpec, cfg.data, "data")
    model = to_container(cfg.model) or {}
    source = model.get("tokenizer") or require(cfg, "model.source")
    manifest = prepare_classification(spec, load_tokenizer(str(source)), tokenizer_name=str(source),
                                      overwrite=bool(cfg.get("overwrite", False)))
    counts = ", ".join(f"{name} {info.count}" for name, info in manifest.splits.items())
    print(f"prepared {manifest.directory}: {counts}")
    return manifest


def main() -> None:
    """``python -m tfsent.prepare`` / ``tfsent-prepare``: Hydra entry point over ``conf/prepare.yaml``."""
    import hydra

    hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="prepare")(_main)()


if __name__ == "__main__":
    main()
