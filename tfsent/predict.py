"""Prediction entry point: ``python -m tfsent.predict ckpt_path=runs/.../model input=texts.csv output=scores.csv``.

The only reader of the predict ``DictConfig`` (``conf/predict.yaml``): :func:`predict` turns it into
:class:`~tfsent.inference.options.PredictOptions` and calls the driver, :func:`tfsent.inference.driver.predict`,
which does the work for every model kind (a classifier's labels, a masked LM's held-out loss) and input kind.

Many hosts: ``strategy=multi_worker`` (roles from ``TF_CONFIG``; the chief merges), or ``num_shards=K
shard_index=i`` on independent processes followed by one ``merge=true`` run.
"""

from __future__ import annotations

import datetime
import signal
import sys

from omegaconf import DictConfig

from tfsent.config import ConfigError, require, scoring_options, to_container
from tfsent.inference import driver, record
from tfsent.inference.options import PredictOptions
from tfsent.inference.predictor import predictor_class
from tfsent.runtime.cli import hydra_entry

# The shell's status for a run ended by SIGINT/SIGTERM (128 + SIGINT).
EXIT_INTERRUPTED = 130

# Keys of conf/predict.yaml that are not PredictOptions fields (`report` acts after the run, on its output).
PATH_KEYS = ("ckpt_path", "input", "output")
NOT_OPTIONS = PATH_KEYS + ("hydra", "verbose", "report")


def options_from_config(cfg: DictConfig) -> PredictOptions:
    """The typed options of a composed ``predict`` config.

    Raises:
        ConfigError: an unknown key (a typo) in the config or in ``documents``.
    """
    return scoring_options(PredictOptions, cfg, "predict", NOT_OPTIONS)


def predict(cfg: DictConfig) -> dict:
    """Run a composed ``predict`` config and print its summary.

    Returns:
        The driver's summary.
    """
    started = datetime.datetime.now(datetime.timezone.utc)
    options = options_from_config(cfg)
    report_output = _check_report(cfg, options) if cfg.get("report") else None
    summary = driver.predict(require(cfg, "ckpt_path"), require(cfg, "input"), require(cfg, "output"), options)
    if "output" in summary:  # a shard that does not merge writes no output, so nothing to describe
        settings = {k: v for k, v in to_container(cfg).items() if k != "hydra"}
        summary["record_output"] = str(record.write_record(summary["output"], ckpt_path=cfg.ckpt_path,
                                                           settings=settings, summary=dict(summary),
                                                           started=started, revision=cfg.get("revision")))
        if report_output is not None:
            summary["report_output"] = _report(summary["output"], report_output)
    done = f"predict: {summary['rows']} rows in {summary['seconds']:.1f} s ({summary['rows_per_second']:.1f} rows/s)"
    if "output" not in summary:
        units = summary["units"]
        slice_ = (f"{units} {summary['lo']}..{summary['hi'] - 1}" if summary["hi"] > summary["lo"] else
                  f"no {units}")
        print(f"{done}: shard {summary['shard']} of {summary['shards']} done ({slice_} in "
              f"{summary['parts_folder']}); merge with merge=true num_shards={summary['shards']}")
    else:
        said = predictor_class(summary["kind"]).describe(summary)
        print(f"{done} -> {summary['output']}" + (f"; {said}" if said else ""))
    if "report_output" in summary:
        print(f"predict: report -> {summary['report_output']}")
    if cfg.get("verbose") and summary.get("startup"):
        print(startup_line(summary))
    return summary


def startup_line(summary: dict) -> str:
    """What ``verbose=true`` prints of a run's start: seconds from the process's start to its first scored batch,
    and their split (imports, tokenizer, model, convert, first batch; ``tfsent.inference.driver``)."""
    split = summary["startup"]
    return (f"predict: start-up {sum(split.values()):.2f} s to the first batch on {summary.get('backend')} ("
            + ", ".join(f"{name.replace('_', ' ')} {seconds:.2f}" for name, seconds in split.items()) + ")")


def _check_report(cfg: DictConfig, options) -> str:
    """The page ``report=true`` writes beside the output, checked before any compute.

    Raises:
        ConfigError: a masked-LM checkpoint (the report reads scores and answers), or an existing page without
            ``overwrite=true``.
    """
    from tfsent.inference.predictor import kind_of
    from tfsent.reporting.build import report_path

    path = report_path(require(cfg, "output"))
    if kind_of(require(cfg, "ckpt_path")) == "masked_lm":
        raise ConfigError("report=true: the report reads a classifier's scores or a question-answering model's "
                          "answers; this checkpoint is a masked LM (its evaluation summary is the .summary.json "
                          "beside the output)")
    if path.exists() and not options.overwrite:
        raise ConfigError(f"report=true: {path} already exists; pass overwrite=true to replace it")
    return str(path)


def _report(output: str, page: str) -> str:
    from tfsent.reporting.build import ReportOptions, build_report

    # The page was checked before the run (an existing one needs overwrite=true): replace it now.
    return build_report(output, page, options=ReportOptions(overwrite=True))["output"]


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@hydra_entry("predict")
def main(cfg: DictConfig) -> dict:
    """``python -m tfsent.predict ckpt_path=... input=... output=...`` (see ``conf/predict.yaml``): a user's mistake
    is one ``error:`` line and exit status 2."""
    # SIGTERM (preemption, a scheduler) stops like Ctrl-C: the part being written is abandoned, finished ones stay.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return predict(cfg)
    except KeyboardInterrupt:
        print("predict: interrupted; finished parts are kept beside the output, run the same command again to "
              "resume", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None


if __name__ == "__main__":
    main()
