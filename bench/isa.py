"""``bench/run.py --max-isa avx2``: the bench of an AVX2-only machine, run on an AVX-512 one.

Every library that picks kernels by the CPU's instruction set at run time is capped, through its own documented
switch, before any of them loads (the torch worker and the cold-start processes inherit the environment):

- TensorFlow's oneDNN kernels: ``ONEDNN_MAX_CPU_ISA`` (its verbose log then names ``isa:Intel AVX2``);
- XLA's CPU code generation: ``XLA_FLAGS=--xla_cpu_max_isa`` (no EVEX/zmm instruction left in its object code);
- torch: ``ATEN_CPU_CAPABILITY`` (its vectorised kernels), ``MKL_ENABLE_INSTRUCTIONS`` (its fp32 GEMM) and the same
  ``ONEDNN_MAX_CPU_ISA``.

What stays: TensorFlow's Eigen kernels are compiled for one instruction set and run alike on both machines, and
the cores, caches and memory are this machine's. LiteRT's XNNPACK and ONNX Runtime's MLAS pick their kernels with no
documented switch to cap them (issue 36), so their rows still run AVX-512 and flatter an AVX2 machine. tfsent reads the oneDNN cap too
(:func:`tfsent.runtime.execution.has_native_bf16`): ``auto`` keeps fp32, as on a real AVX2 CPU.
"""

from __future__ import annotations

import os

CAPS = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                 "xla": "AVX2"}}


def apply(name: str, environ=None) -> dict[str, str]:
    """Cap every library at ``name`` (a key of :data:`CAPS`) in ``environ`` (default ``os.environ``); call it before
    TensorFlow or torch loads. Returns the variables set, for the results' header."""
    environ = os.environ if environ is None else environ
    cap = dict(CAPS[name])
    xla = f"--xla_cpu_max_isa={cap.pop('xla')}"
    cap["XLA_FLAGS"] = " ".join(f for f in (environ.get("XLA_FLAGS", ""), xla) if f)
    environ.update(cap)
    return cap


def describe(environ=None) -> str | None:
    """The cap in force, as the header states it; None when the bench runs on the whole instruction set."""
    environ = os.environ if environ is None else environ
    names = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
    xla = [f for f in environ.get("XLA_FLAGS", "").split() if f.startswith("--xla_cpu_max_isa=")]
    parts = [f"{n}={environ[n]}" for n in names if environ.get(n)] + [f"XLA_FLAGS={f}" for f in xla]
    return ", ".join(parts) or None


def runnable(paths):
    """``paths`` less those a oneDNN cap would abort (:func:`tfsent.runtime.execution.aborts`)."""
    from tfsent.runtime import execution as ex

    flags = ex.cpu_flags()
    return [p for p in paths if not ex.aborts(p, flags)]
