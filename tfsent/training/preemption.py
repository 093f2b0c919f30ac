"""Stop training on SIGTERM or SIGINT with a fresh backup, so a resumed run repeats no finished step.

A preemptible VM or a TPU maintenance event sends SIGTERM and kills the process some seconds later; a user sends
SIGINT with Ctrl-C. Either way, the periodic backup may be many steps old. :func:`stop_on_signals` installs, for
the duration of ``fit()``, handlers that only record the signal; ``StepBackupAndRestore`` checks that record after
each execution (and after each epoch's own backup), writes a backup of the step just finished through the same
BackupAndRestore machinery, and raises :class:`TrainingInterrupted`. The entry point turns that into one line
saying how to resume, and the shell's status for the signal (143 for SIGTERM, 130 for SIGINT).

With ``strategy=multi_worker`` a save is collective: one worker cannot save alone, and a worker that stopped alone
would leave the others waiting in the next all-reduce. So at each of those check points every worker calls
:func:`agree_to_stop`, one all-reduce (SUM) of a flag per signal: if any worker recorded a signal, all of them learn
it at the same execution boundary, back up that same step together (the chief writes ``backup/chief``) and raise
:class:`TrainingInterrupted`; a worker that was not signalled itself says "on another worker". Measured on two
workers on one shared 2-core host (loopback, one CPU replica each, 500 agreements after 20 warm-up ones), compiled
as one ``tf.function``: a median of 2.4 to 3.8 ms per execution over three runs (p90 3.9 to 5.9 ms), against
6.1 ms for the same ops run eagerly. Single-host strategies never run it (:func:`stop_agreement` returns None for
them), so they pay nothing per step.

Keras's own ``BackupAndRestore(save_before_preemption=True)`` (``PreemptionCheckpointHandler``) agrees through the
coordination service instead, with no per-step collective, but it is not the base here: its backup records an
execution's first step (with ``steps_per_execution > 1`` the resumed run repeats steps, the defect
``StepBackupAndRestore`` exists for), it handles SIGTERM only, and it ends the process itself (``sys.exit``) inside
``fit()``, so neither tfsent's one line nor its exit status could be kept.

A second signal on the same worker while the backup is being written is not waited for: it raises
``KeyboardInterrupt`` at once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving a backup.

    Attributes:
        signum: the signal that stopped it.
        epoch: the epoch (0-based) the backup was taken in.
        steps_done: training steps the backup holds; a resumed run starts after them.
        backup_dir: where the backup is.
        elsewhere: the signal reached another worker of a multi-worker run, not this process.
    """

    def __init__(self, signum: int, epoch: int, steps_done: int, backup_dir: str, elsewhere: bool = False):
        self.signum, self.epoch, self.steps_done, self.backup_dir = signum, epoch, steps_done, backup_dir
        self.elsewhere = elsewhere
        where = " on another worker" if elsewhere else ""
        super().__init__(f"stopped by {signal.Signals(signum).name}{where} in epoch {epoch + 1} after {steps_done} "
                         f"training steps; backup saved in {backup_dir}")

    @property
    def exit_status(self) -> int:
        """The shell's status for a process ended by this signal (128 + its number)."""
        return 128 + self.signum


class StopRequest:
    """Why training should stop, if it should.

    Attributes:
        signum: the signal this process received (set by the handlers of :func:`stop_on_signals`).
        elsewhere: the signal another worker received, learnt through :func:`agree_to_stop`.
    """

    def __init__(self):
        self.signum: int | None = None
        self.elsewhere: int | None = None


@contextlib.contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """Within the block, SIGTERM and SIGINT only set ``request.signum`` (the previous handlers come back after).

    Outside the main thread (where Python cannot install handlers) nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def record(signum, frame):
        if request.signum is not None:
            raise KeyboardInterrupt  # a second signal: the user does not want to wait for the backup
        request.signum = signum
        log.warning("%s received: saving a backup after the current step, then stopping",
                    signal.Signals(signum).name)

    previous = {s: signal.signal(s, record) for s in SIGNALS}
    try:
        yield request
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def agree_to_stop(request: StopRequest, sum_over_workers: Callable[[list[int]], np.ndarray]) -> int | None:
    """Whether any worker was signalled, called by every worker at the same point of training.

    Each worker contributes one flag per signal of :data:`SIGNALS` (1 where this process recorded it); the sum tells
    every worker the same answer. The local record is read once, before the sum: a signal arriving during it counts
    at the next agreement, so that no worker stops on a signal the others did not see.

    Args:
        request: this process's request; ``request.elsewhere`` is set when only another worker was signalled.
        sum_over_workers: the collective, :func:`all_reduce_sum` of the training strategy.

    Returns:
        The signal to stop with (this worker's own when it has one; otherwise another's, SIGTERM first), or None
        when no worker was signalled.
    """
    own = request.signum
    counts = np.asarray(sum_over_workers([int(own == s) for s in SIGNALS]))
    if not counts.any():
        return None
    if own is not None:
        return own
    request.elsewhere = SIGNALS[int(counts.nonzero()[0][0])]
    return request.elsewhere


def all_reduce_sum(strategy: tf.distribute.Strategy) -> Callable[[list[int]], np.ndarray]:
    """A function summing a small list of integers over every replica of ``strategy`` (so over every worker).

    Every replica contributes the list; each call is one all-reduce, which every worker must make the same number
    of times, like any collective. Compiled once, since a ``tf.function`` costs half as much per call as the same
    eager ops (see the module docstring).
    """

    @tf.function
    def reduce(values):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(values,)), axis=None)

    return lambda values: reduce(tf.constant(values, tf.int32)).numpy()


def stop_agreement(strategy: tf.distribute.Strategy) -> Callable[[StopRequest], int | None] | None:
    """:func:`agree_to_stop` over the workers of ``strategy`` when it spans several; None on one host, where the
    local record decides alone and no step pays for a collective."""
    # TPUStrategy answers False too: one client process drives every TPU host and receives the signal itself.
    if not strategy.extended._in_multi_worker_mode():
        return None
    return functools.partial(agree_to_stop, sum_over_workers=all_reduce_sum(strategy))
