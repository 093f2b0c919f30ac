"""Beam scoring entry point: ``python -m tfsent.beam ckpt_path=runs/.../model input=texts.csv output=scores.csv
[runner=DirectRunner] [pipeline_options=[--direct_num_workers=2]]``.

The only reader of the ``beam`` ``DictConfig`` (``conf/beam.yaml``): :func:`run` turns it into
:class:`~tfsent.beam.options.BeamOptions` and calls :func:`tfsent.beam.pipeline.score`.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig

from tfsent.beam.options import BeamOptions
from tfsent.beam.runner import quiet_beam
from tfsent.config import require, scoring_options
from tfsent.errors import UserError
from tfsent.inference.predictor import predictor_class
from tfsent.runtime.cli import hydra_entry

# Keys of conf/beam.yaml that are not BeamOptions fields.
NOT_OPTIONS = ("ckpt_path", "input", "output", "hydra", "verbose")


def options_from_config(cfg: DictConfig) -> BeamOptions:
    """The typed options of a composed ``beam`` config.

    Raises:
        ConfigError: an unknown key (a typo) in the config or in ``documents``, or a bad value.
    """
    return scoring_options(BeamOptions, cfg, "beam", NOT_OPTIONS)


def run(cfg: DictConfig) -> dict:
    """Run a composed ``beam`` config and print its summary.

    Returns:
        The summary of :func:`tfsent.beam.pipeline.score`.

    Raises:
        UserError: apache-beam is not installed (the base install leaves it out).
    """
    options = options_from_config(cfg)
    options = dataclasses.replace(options, pipeline_options=quiet_beam(bool(cfg.get("verbose", False)),
                                                                       options.pipeline_options))
    try:
        from tfsent.beam.pipeline import score
    except ModuleNotFoundError as e:
        if e.name != "apache_beam":
            raise
        raise UserError("tfsent.beam needs apache-beam, which the base install leaves out: run `make install-beam` "
                        "(or `pip install tfsent[beam]`)") from None
    summary = score(require(cfg, "ckpt_path"), require(cfg, "input"), require(cfg, "output"),
                    options)
    print(f"beam: {summary['rows']} rows in {summary['seconds']:.1f} s ({summary['rows_per_second']:.1f} rows/s, "
          f"{summary['runner']}) -> {summary['output']}; {predictor_class(summary['kind']).describe(summary)}")
    return summary


@hydra_entry("beam")
def main(cfg: DictConfig) -> dict:
    """``python -m tfsent.beam ckpt_path=... input=... output=...`` (see ``conf/beam.yaml``): a user's mistake is
    one ``error:`` line and exit status 2."""
    return run(cfg)


if __name__ == "__main__":
    main()
