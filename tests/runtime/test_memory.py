"""steady_heap(): glibc keeps mapping large blocks after a bigger one was freed, pyarrow allocates through it, and a
user's own setting wins."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tfsent.runtime import memory

pytestmark = pytest.mark.skipif(memory._mallopt() is None, reason="not glibc: steady_heap() changes nothing")

# In a fresh interpreter: free a 16 MiB block (glibc then raises its mmap threshold to 16 MiB unless it was fixed),
# then count how many of ten 1 MiB blocks are mapped (and so returned to the system when freed).
PROBE = textwrap.dedent("""
    import ctypes, json, sys
    from tfsent.runtime import memory

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = Info
    applied = memory.steady_heap() if sys.argv[1] == "steady" else {}
    libc.free(libc.malloc(16 << 20))
    before = libc.mallinfo2().hblks
    blocks = [libc.malloc(1 << 20) for _ in range(10)]
    mapped = libc.mallinfo2().hblks - before
    import pyarrow
    print(json.dumps({"applied": applied, "mapped": mapped, "pool": pyarrow.default_memory_pool().backend_name}))
""")


def _probe(mode, **env):
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ARROW_DEFAULT"))}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                         env={**inherited, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_large_blocks_stay_mapped_after_a_bigger_one_was_freed():
    plain, steady = _probe("plain"), _probe("steady")
    assert plain["mapped"] == 0  # glibc's own rule: 1 MiB blocks now come from the heap and stay there when freed
    assert steady["mapped"] == 10
    assert steady["applied"] == {**{name: value for name, (_, _, value) in memory.SETTINGS.items()},
                                 "arrow_pool": "system"}
    assert steady["pool"] == "system"


def test_a_users_setting_wins():
    got = _probe("steady", MALLOC_ARENA_MAX="4", ARROW_DEFAULT_MEMORY_POOL="mimalloc")
    assert got["applied"] == {"mmap_threshold": 256 * 1024, "trim_threshold": 1 << 20}
    assert got["pool"] == "mimalloc"
