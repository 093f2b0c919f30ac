"""What the benchmark ran on, and how much memory a timed part used."""

from __future__ import annotations

import os
import platform
import resource
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")


def describe() -> dict[str, str]:
    """nproc, CPU model and flags that matter for matmuls, RAM, Python and TensorFlow versions."""
    cpu, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and cpu == "unknown":
                    cpu = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    ram = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        ram = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    import tensorflow as tf

    from bench import isa

    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    out = {"nproc": str(os.cpu_count()), "cpu": cpu, "simd": " ".join(simd) or "none listed"}
    cap = isa.describe()
    if cap:
        out["instruction set capped (bench/isa.py)"] = cap
    return {**out, "ram": ram, "python": platform.python_version(), "tensorflow": tf.__version__,
            "load average (1, 5, 15 min) at start": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def current_rss_mb() -> float:
    """Resident memory of this process now, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def max_rss_mb() -> float:
    """Peak resident memory of this process since it started, in MiB (``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RssSampler:
    """Samples this process's resident memory in a thread; ``peak_mb`` is the highest value seen inside the
    ``with`` block, ``start_mb`` the value on entry (the process-wide ``ru_maxrss`` cannot be reset)."""

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = interval_s
        self.start_mb = 0.0
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, current_rss_mb())
            time.sleep(self.interval_s)

    def __enter__(self) -> RssSampler:
        self.start_mb = self.peak_mb = current_rss_mb()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, current_rss_mb())
