"""Report entry point: ``python -m tfsent.report input=scores.csv output=report.html`` (``tfsent-report``).

The only reader of the report ``DictConfig`` (``conf/report.yaml``): it turns it into
:class:`~tfsent.reporting.build.ReportOptions` and calls :func:`tfsent.reporting.build.build_report`, which
writes one self-contained HTML page (overview, confidence, examples, documents, evaluation, a training run's
curves). A file that is not a tfsent output, missing columns or an empty file is one ``error:`` line, exit status 2,
and no page.
"""

from __future__ import annotations

from omegaconf import DictConfig

from tfsent.config import spec_from_config, to_container
from tfsent.reporting.build import ReportOptions, build_report
from tfsent.runtime.cli import hydra_entry

# Keys of conf/report.yaml that are not ReportOptions fields.
NOT_OPTIONS = ("input", "output", "run_dir", "hydra", "verbose")


def report(cfg: DictConfig) -> dict:
    """Build the page of a composed ``report`` config and print where it went.

    Returns:
        The summary of :func:`~tfsent.reporting.build.build_report`.
    """
    values = {k: v for k, v in to_container(cfg).items() if k not in NOT_OPTIONS}
    summary = build_report(cfg.input, cfg.output, run_dir=cfg.run_dir,
                           options=spec_from_config(ReportOptions, values, "report",
                                                           also=set(NOT_OPTIONS) - {"hydra"}, prefix=""))
    what = {"documents": f"{summary['documents']:,} documents, {summary['rows']:,} chunks",
            "chunks": f"{summary['rows']:,} chunks", "rows": f"{summary['rows']:,} rows"}.get(summary["kind"],
                                                                                           "training run")
    print(f"report: {what} -> {summary['output']} ({summary['bytes'] / 1024:,.0f} KiB)")
    return summary


@hydra_entry("report")
def main(cfg: DictConfig) -> dict:
    """``python -m tfsent.report input=... [output=...] [run_dir=...]`` (see ``conf/report.yaml``): a user's
    mistake is one ``error:`` line and exit status 2."""
    return report(cfg)


if __name__ == "__main__":
    main()
