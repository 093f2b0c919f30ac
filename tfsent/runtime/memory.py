"""A flat heap for long streaming runs: glibc malloc settings that return part-sized buffers to the system.

glibc starts with a 128 KiB mmap threshold and raises it to the size of every mmapped block freed (up to 32 MiB).
After the first part, the tokenizer's batches, the engine's padded arrays and XLA's per-execution buffers all come
from the heap arenas instead, where freed space stays with the process and fragments, and every thread (TensorFlow's
pools, the tokenizer's, the prefetch thread) grows an arena of its own: a 1M-row run's peak crept up part after part
while a 10k-row run stayed low (numbers in bench/STREAMING.md). A fixed threshold sends blocks above it back to the
system when freed, a fixed trim threshold gives back the heap's free top, and two arenas bound the per-thread growth.

pyarrow (the readers and the part files) allocates from its own mimalloc pool, which keeps freed pages for reuse;
it is switched to the system allocator, so the same settings cover it.

The price is throughput on small models, whose steps are short next to the page faults of freshly mapped buffers:
BERT-tiny ran about 18% slower for 15% less memory (bench/STREAMING.md).

Only glibc has ``mallopt``; elsewhere (musl, macOS) nothing changes. A ``MALLOC_*`` variable or
``ARROW_DEFAULT_MEMORY_POOL`` set by the user wins over the matching default, and ``GLIBC_TUNABLES`` (even empty)
turns all of them off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

# name -> (mallopt parameter, environment variable that would have set it, value)
SETTINGS = {
    "mmap_threshold": (M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 256 * 1024),
    "trim_threshold": (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 1 << 20),
    "arena_max": (M_ARENA_MAX, "MALLOC_ARENA_MAX", 2),
}


def _mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # musl exports a mallopt that does nothing; gnu_get_libc_version exists only in glibc.
    if not hasattr(libc, "gnu_get_libc_version"):
        return None
    return getattr(libc, "mallopt", None)


def steady_heap() -> dict[str, int]:
    """Apply :data:`SETTINGS` to this process's malloc, once it is known to be glibc's, and send pyarrow's
    allocations to it.

    Call it early (before TensorFlow starts its thread pools), e.g. at the start of a prediction run; calling it
    again is harmless.

    Returns:
        The settings applied (name -> value, ``arrow_pool`` included); empty when the allocator is not glibc's or
        the user configured malloc through ``GLIBC_TUNABLES``.
    """
    mallopt = _mallopt()
    if mallopt is None or "GLIBC_TUNABLES" in os.environ:
        return {}
    applied = {}
    for name, (param, env, value) in SETTINGS.items():
        if env in os.environ:
            continue
        if mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1:
            applied[name] = value
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        import pyarrow

        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
        applied["arrow_pool"] = "system"
    log.debug("memory settings: %s", applied)
    return applied
