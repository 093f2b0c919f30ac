"""How progress shows: a live bar on a terminal, one line per epoch (or nothing) in a log file or a pipe.

Training passes :func:`fit_verbose` to ``model.fit``: Keras's live progress bar (steps, ETA, loss) where stdout is a
terminal, one line per epoch where it is a file or a pipe (a bar there would write every redraw as a line). Long
preparation steps (tokenizing a corpus) draw a tqdm bar on stderr only where stderr is a terminal and progress is
not turned off (:func:`bar_enabled`). Prediction's parts (:func:`steps`) draw a bar on a terminal and one line per
part elsewhere. ``tfsent.runtime.quiet`` puts a pipe on fd 2 to filter native log lines, so
"is stderr a terminal" asks about the stderr the user sees (:func:`tfsent.runtime.quiet.stderr_is_terminal`).
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TextIO

MODES = ("auto", "bar", "epoch")
BAR, EPOCH = 1, 2  # Keras fit(verbose=...): 1 draws the live bar, 2 prints one line per epoch


def check_mode(mode: str, key: str = "trainer.progress") -> str:
    """``mode`` if it is one of :data:`MODES`.

    Raises:
        ConfigError: another value, naming ``key``.
    """
    if mode not in MODES:
        from tfsent.config import ConfigError

        raise ConfigError(f"{key}={mode!r}; expected one of {', '.join(MODES)}")
    return mode


def fit_verbose(mode: str = "auto", stream: TextIO | None = None) -> int:
    """Keras ``fit(verbose=...)`` for a progress mode.

    Args:
        mode: ``bar`` (live bar), ``epoch`` (one line per epoch), or ``auto``: the bar when ``stream`` is a
            terminal, one line per epoch otherwise.
        stream: where Keras writes its progress (default ``sys.stdout``).

    Returns:
        1 (bar) or 2 (one line per epoch).

    Raises:
        ConfigError: an unknown mode.
    """
    if check_mode(mode) == "auto":
        stream = sys.stdout if stream is None else stream
        return BAR if _isatty(stream) else EPOCH
    return BAR if mode == "bar" else EPOCH


def bar_first(callbacks: Sequence, verbose: int) -> list:
    """The callbacks, with Keras's progress bar first when it draws live.

    Keras appends its ``ProgbarLogger`` after the user's callbacks, so their end-of-epoch log lines (reports,
    checkpoints) would be written into the middle of the bar's unfinished line; first, it ends its line before
    they log. The bar leaves out per-class metrics (``precision_<label>``, ``recall_<label>``): with them a
    step's line is wider than a terminal, and a wrapped line cannot be redrawn in place (they stay in
    ``metrics.csv``, TensorBoard and the end-of-epoch line of ``verbose=2``).
    """
    callbacks = list(callbacks)
    if verbose != BAR:
        return callbacks
    return [_progress_bar(), *callbacks]


def headline(logs: dict | None) -> dict:
    """The metrics a live bar shows: ``logs`` without per-class precision and recall."""
    return {k: v for k, v in (logs or {}).items() if not _PER_CLASS.match(k)}


_PER_CLASS = re.compile(r"(val_)?(precision|recall)_")


def _progress_bar():
    import tf_keras

    class ProgressBar(tf_keras.callbacks.ProgbarLogger):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, headline(logs))

        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, headline(logs))

    return ProgressBar(count_mode="steps")


def bar_enabled(progress: bool = True, stream: TextIO | None = None) -> bool:
    """Whether to draw a progress bar on ``stream`` (default: the user's stderr): ``progress`` and a terminal."""
    if not progress:
        return False
    if stream is None:
        from tfsent.runtime.quiet import stderr_is_terminal

        return stderr_is_terminal()
    return _isatty(stream)


def bar(*, total: int | None, desc: str, unit: str, progress: bool = True):
    """A tqdm bar on stderr (a context manager; ``update(n)`` as work is done), drawn only where
    :func:`bar_enabled` says so."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not bar_enabled(progress), file=sys.stderr)


class _Lines:
    """One line per step on stderr (what :func:`steps` gives where stderr is not a terminal)."""

    def __init__(self, desc: str, unit: str, step: str):
        self._desc, self._unit, self._step = desc, unit, step
        self._done = self._steps = 0
        self._start = time.perf_counter()

    def __enter__(self) -> "_Lines":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, n: int) -> None:
        self._done += n
        self._steps += 1
        print(f"{self._desc}: {self._step} {self._steps} done, {self._done:,} {self._unit}s "
              f"({time.perf_counter() - self._start:.1f} s)", file=sys.stderr, flush=True)


def steps(*, desc: str, unit: str, step: str, progress: bool = True):
    """Progress of work done a step at a time (``update(n)`` once per step, ``n`` units): a tqdm bar where stderr is
    a terminal; elsewhere (a log file, a pipe) one line per step, ``<desc>: <step> k done, <n> <unit>s (<s> s)``,
    not a redraw per update. Nothing with ``progress`` false."""
    if not progress:
        return contextlib.nullcontext(_Silent())
    if bar_enabled(progress):
        return bar(total=None, desc=desc, unit=unit, progress=progress)
    return _Lines(desc, unit, step)


class _Silent:
    @staticmethod
    def update(n: int) -> None:
        return None


@contextlib.contextmanager
def native_bar(shown: bool) -> Iterator[None]:
    """Around work whose native library draws its own bar on fd 2 (the BPE trainer): the real stderr while
    ``shown``, since such a bar checks fd 2 itself and the quiet filter makes it a pipe."""
    if not shown:
        yield
        return
    from tfsent.runtime.quiet import unfiltered

    with unfiltered():
        yield


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
