"""Stop training on SIGTERM or SIGINT with a fresh backup, so a resumed run repeats no finished step.

A preemptible VM or a TPU maintenance event sends SIGTERM and kills the process some seconds later; a user sends
SIGINT with Ctrl-C. Either way, the periodic backup may be many steps old. :func:`stop_on_signals` installs, for
the duration of ``fit()``, handlers that only record the signal; ``StepBackupAndRestore`` checks that record after
each execution (and after each epoch's own backup), writes a backup of the step just finished through the same
BackupAndRestore machinery, and raises :class:`TrainingInterrupted`. The entry point turns that into one line
saying how to resume, and the shell's status for the signal (143 for SIGTERM, 130 for SIGINT).

Keras offers the same for TPU and multi-worker strategies only, through ``PreemptionCheckpointHandler``
(``BackupAndRestore(save_before_preemption=True)``), which also agrees across workers on the step to save at. The
handlers here serve every single-host strategy (default, one device, mirrored replicas, a single TPU host); with
``strategy=multi_worker`` a worker cannot save alone (a save is collective), so the handlers are not installed
there and a killed multi-worker run resumes from its last periodic backup.

A second signal while the backup is being written is not waited for: it raises ``KeyboardInterrupt`` at once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving a backup.

    Attributes:
        signum: the signal that stopped it.
        epoch: the epoch (0-based) the backup was taken in.
        steps_done: training steps the backup holds; a resumed run starts after them.
        backup_dir: where the backup is.
    """

    def __init__(self, signum: int, epoch: int, steps_done: int, backup_dir: str):
        self.signum, self.epoch, self.steps_done, self.backup_dir = signum, epoch, steps_done, backup_dir
        super().__init__(f"stopped by {signal.Signals(signum).name} in epoch {epoch + 1} after {steps_done} training "
                         f"steps; backup saved in {backup_dir}")

    @property
    def exit_status(self) -> int:
        """The shell's status for a process ended by this signal (128 + its number)."""
        return 128 + self.signum


class StopRequest:
    """The signal received while training, if any (set by the handlers of :func:`stop_on_signals`)."""

    def __init__(self):
        self.signum: int | None = None


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
