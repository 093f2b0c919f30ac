"""A quiet start: hide the native log lines and library banners that a user cannot act on.

TensorFlow's C++ INFO/WARNING lines are mostly hidden by ``TF_CPP_MIN_LOG_LEVEL=2`` (set in ``tfsent/__init__``),
but XLA and gRPC log through absl, which reads no environment variable: before ``absl::InitializeLog()`` (which
TensorFlow never calls) absl writes everything to stderr, with a ``WARNING: All log messages before
absl::InitializeLog() ...`` line first. The only lever from Python is the file descriptor itself, so
:class:`NativeLogFilter` puts a pipe on fd 2 and a thread copies every line through except absl/glog INFO and
WARNING lines (``I1203 ...`` / ``W1203 ...``); errors (``E``/``F``), Python tracebacks and everything else pass
unchanged, as they arrive (a progress bar's redraw needs no newline to show). A native library that draws its own
bar only on a terminal gets the real fd 2 back for a while (:func:`unfiltered`). ``verbose=true``, or
``TF_CPP_MIN_LOG_LEVEL`` set by the user, leaves stderr alone.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator

# absl/glog prefix: severity letter, MMDD, time, thread id, file:line]. Only I and W are dropped. Searched, not
# matched at the start: a progress bar (tqdm) writes without a newline, so a native line can follow it on one line.
NATIVE_NOISE = re.compile(rb"(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] |"
                          rb"WARNING: All log messages before absl::InitializeLog\(\) is called|"
                          # LiteRT's interpreter says so on every model it opens (tfsent.inference.litert).
                          rb"INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.)")
# A line or a progress bar's redraw: up to and including '\n' or '\r', or an unfinished last piece.
_SEGMENTS = re.compile(rb"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")
# (logger, text) of banners printed on every run that the user cannot act on: tfsent pins transformers 4.57.6
# deliberately (v5 has no TensorFlow classes), so its deprecation notice is noise here.
BANNERS = (("transformers.modeling_tf_utils", "TensorFlow and JAX classes are deprecated"),)
# Whole lines that child processes write to the inherited fd 2 before tfsent's code runs in them: a Beam worker
# process (--direct_running_mode=multi_processing) logs its start-up in Python's default format (INFO and WARNING
# of Beam's loggers and the root logger) and prints the banners.
CHILD_NOISE = re.compile(rb"(?:INFO|WARNING):(?:root|__main__|apache_beam[\w.]*):|"
                         + b"|".join(re.escape(text.encode()) for _, text in BANNERS))


class NativeLogFilter:
    """Filter native absl/glog INFO and WARNING lines out of file descriptor 2 (see the module docstring)."""

    def __init__(self, pattern: re.Pattern = NATIVE_NOISE, lines: re.Pattern = CHILD_NOISE):
        self._pattern, self._lines = pattern, lines
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Put the pipe on fd 2; :meth:`stop` (also run at exit) restores it and drains what is left."""
        sys.stderr.flush()
        read_fd, write_fd = os.pipe()
        self._saved = os.dup(2)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._thread = threading.Thread(target=self._copy, args=(read_fd, self._saved), daemon=True,
                                        name="tfsent-native-log-filter")
        self._thread.start()
        atexit.register(self.stop)

    def _copy(self, read_fd: int, out_fd: int) -> None:
        # Must never stop reading while fd 2 is the pipe: a full pipe would block every writer of stderr.
        # What arrives goes out at once, segment by segment (a segment ends at '\n' or '\r'): a progress bar
        # redraws with '\r' and no newline, and waiting for a newline would freeze it.
        pending = b""
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            for chunk in iter(lambda: pipe.read(1 << 16), b""):
                pending = self._forward(pending + chunk, out_fd)
            if pending:
                self._forward(pending + b"\n", out_fd)

    def _forward(self, data: bytes, out_fd: int) -> bytes:
        """Write ``data``'s segments without native lines; return an unfinished native line, held for its end."""
        out = []
        for segment in _SEGMENTS.findall(data):
            noise = self._pattern.search(segment)
            start = noise.start() if noise is not None else (0 if self._lines.match(segment) else None)
            if start is not None and not segment.endswith((b"\n", b"\r")):
                out.append(segment[:start])
                self._write(b"".join(out), out_fd)
                return segment[start:]
            # What came before a native line (a progress bar's text) still goes out, without the line.
            out.append(segment if start is None else segment[:start])
        self._write(b"".join(out), out_fd)
        return b""

    @staticmethod
    def _write(data: bytes, out_fd: int) -> None:
        try:
            if data:
                os.write(out_fd, data)
        except OSError:
            pass

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Give fd 2 back to the real stderr for the block (a native library's own progress bar checks that fd 2
        is a terminal before it draws), then filter again."""
        if self._saved is None:
            yield
            return
        sys.stderr.flush()
        pipe = os.dup(2)
        os.dup2(self._saved, 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(pipe, 2)
            os.close(pipe)

    def stop(self) -> None:
        """Restore the original stderr and wait for the copy thread to pass on what it still holds."""
        if self._saved is None:
            return
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        saved, self._saved = self._saved, None
        os.dup2(saved, 2)  # closes the pipe's last write end, so the copy thread reads EOF
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.close(saved)


_ACTIVE: NativeLogFilter | None = None


@contextlib.contextmanager
def unfiltered() -> Iterator[None]:
    """The real stderr on fd 2 for the block, if the filter runs (see :meth:`NativeLogFilter.paused`)."""
    if _ACTIVE is None:
        yield
    else:
        with _ACTIVE.paused():
            yield


def stderr_is_terminal() -> bool:
    """Whether the stderr the user sees is a terminal (fd 2 itself is a pipe while the filter runs)."""
    if _ACTIVE is not None and _ACTIVE._saved is not None:
        return os.isatty(_ACTIVE._saved)
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Banner(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def hide_banners() -> None:
    """Drop :data:`BANNERS` from their loggers, once per process: the CLI's process and each Beam worker process,
    whose log records come back to the user through Beam's job service rather than through fd 2."""
    for name, text in BANNERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Banner) and f.text == text for f in logger.filters):
            logger.addFilter(_Banner(text))


def quiet_start(verbose: bool = False) -> None:
    """Hide native INFO/WARNING lines, absl's and TensorFlow's Python INFO lines and known banners, unless ``verbose``.

    Args:
        verbose: show everything (TensorFlow C++ logs included where TensorFlow has not logged yet).
    """
    global _ACTIVE
    if verbose:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
        return
    # absl's and TensorFlow's Python INFO lines (sharding callbacks, "Using MirroredStrategy with devices ...")
    # would reach Hydra's console handler through the root logger.
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    hide_banners()
    user_chose_level = os.environ.get("TFSENT_DEFAULT_LOG_LEVEL") != "1"
    if _ACTIVE is None and not user_chose_level:
        _ACTIVE = NativeLogFilter()
        _ACTIVE.start()
