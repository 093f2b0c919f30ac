"""Which Beam runner runs a scoring pipeline, and how much of Beam's logging reaches the user.

``runner=DirectRunner`` (the default) means the in-process runner the docs describe: Beam's FnApiRunner, the one
whose ``--direct_num_workers`` and ``--direct_running_mode`` flags ``conf/beam.yaml`` shows. Beam's own
``DirectRunner`` name first tries the Prism runner, which downloads a Go binary from GitHub and runs it: a run-time
fetch and an executable that nothing here tested. Any other name (``PrismRunner``, ``DataflowRunner``, ...) is
passed to Beam as it is.

Beam logs dozens of INFO lines on a small job (type-hint conversions, batch statistics, the runner it picked)
and warns through the root logger about Google Cloud libraries and platform features a local run does not use;
each worker process of ``--direct_running_mode=multi_processing`` logs its start-up, and its warnings come back
through the job service as well. Unless ``verbose=true``: Beam's loggers stay at warning and its root-logger
notices at error in this process, workers log errors only (``--default_sdk_harness_log_level=ERROR``, unless the
user's flags set it), and what a worker writes to stderr before it reads that flag is filtered with TensorFlow's
native lines (``tfsent.runtime.quiet``).
"""

from __future__ import annotations

import importlib.util
import logging

DIRECT = "DirectRunner"


def pipeline_runner(name: str, options):
    """The runner for ``runner=name``: the in-process FnApiRunner for ``DirectRunner``, else the name itself.

    Args:
        name: the ``runner`` setting.
        options: the pipeline's ``PipelineOptions`` (the in-process runner hands them to its workers).
    """
    if name != DIRECT:
        return name
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # What Beam's DirectRunner builds once it has given up on Prism (apache_beam/runners/direct/direct_runner.py).
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    info = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(provision_info=info)


class _BeamRootNotices(logging.Filter):
    """Drops what Beam's modules log through the root logger below error (optional-library notices)."""

    def __init__(self, beam_dir: str):
        super().__init__()
        self._dir = beam_dir

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and record.levelno < logging.ERROR and record.pathname.startswith(self._dir))


def quiet_beam(verbose: bool, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Keep Beam's logging at warning (its root-logger notices at error) unless ``verbose``; call it before
    apache_beam is imported, whose import logs the first notices.

    Args:
        verbose: leave Beam's logging as Beam sets it.
        flags: the user's pipeline flags.

    Returns:
        The flags to run with: the workers' log level first, so that a level among ``flags`` wins.
    """
    spec = importlib.util.find_spec("apache_beam")
    if verbose or spec is None or not spec.submodule_search_locations:
        return tuple(flags)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    notices = _BeamRootNotices(list(spec.submodule_search_locations)[0])
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _BeamRootNotices) for f in handler.filters):
            handler.addFilter(notices)
    return ("--default_sdk_harness_log_level=ERROR", *flags)
