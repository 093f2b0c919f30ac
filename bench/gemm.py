"""The ceiling on ``precision=int8``'s gain: XNNPACK's dynamic int8 GEMM against its fp32 GEMM on this CPU.

``precision=int8`` makes every ``FULLY_CONNECTED`` weight int8 (:func:`tfsent.inference.litert.quantize`); XNNPACK
then quantizes each input row at run time and multiplies in int8. Those GEMMs are most of a forward pass, so the
int8 model cannot gain more over the fp32 one than XNNPACK's int8 GEMM gains over its fp32 GEMM at the model's own
shapes. With VNNI (AVX-512 VNNI, AVX-VNNI) its int8 kernels multiply 4 bytes per lane per instruction; on AVX2
alone they widen to 16 bits first. This module times both GEMMs, each a one-operator LiteRT model converted by
TensorFlow and quantized by the same recipe, in interleaved rounds.

The same rounds time the fp32 GEMM of the runtimes tfsent's default path is measured against: ONNX Runtime's (MLAS,
in the bench's torch worker) and TensorFlow's graph mode (oneDNN). The default path's LiteRT model spends most of
its time in XNNPACK's fp32 GEMM (88% of a BERT-base batch's samples in ``perf``), so where that GEMM is slower than
MLAS's, exact scoring cannot lead ONNX Runtime by more than the rest of the model gives.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass
class GemmRates:
    """FLOP/s per round of the fp32 and the dynamic int8 GEMM ``[rows, inner] x [inner, outer]``."""

    shape: tuple[int, int, int]
    fp32: list[float]
    int8: list[float]
    mlas: list[float] | None = None  # ONNX Runtime's fp32 MatMul, same rounds
    onednn: list[float] | None = None  # TensorFlow's fp32 matmul in graph mode, same rounds

    @property
    def ratio(self) -> float:
        """Median of the per-round int8 / fp32 rate ratios."""
        return statistics.median(i / f for i, f in zip(self.int8, self.fp32))

    def line(self, model: str) -> str:
        rows, inner, outer = self.shape
        return (f"- {model}: XNNPACK's dynamic int8 GEMM (`precision=int8`'s kernel, `[{rows}, {inner}] x "
                f"[{inner}, {outer}]`, the feed-forward's shape at a batch of 64 x 32 tokens) runs "
                f"{statistics.median(self.int8) / 1e9:.1f} GFLOP/s against its fp32 GEMM's "
                f"{statistics.median(self.fp32) / 1e9:.1f}: **{self.ratio:.2f}x** (median of {len(self.fp32)} "
                f"interleaved rounds, {min(i / f for i, f in zip(self.int8, self.fp32)):.2f}-"
                f"{max(i / f for i, f in zip(self.int8, self.fp32)):.2f}). The int8 model's gain over the fp32 one "
                f"is bounded by it.")

    @property
    def fp32_ratios(self) -> list[float]:
        """Per round, XNNPACK's fp32 rate over MLAS's (empty without MLAS's rates)."""
        return [x / m for x, m in zip(self.fp32, self.mlas or [])]

    def fp32_line(self, model: str) -> str | None:
        """How XNNPACK's fp32 GEMM (the default path's) compares with ONNX Runtime's and oneDNN's, or None."""
        ratios = self.fp32_ratios
        if not ratios:
            return None
        rows, inner, outer = self.shape
        onednn = (f", TensorFlow's oneDNN (graph mode) {statistics.median(self.onednn) / 1e9:.1f}"
                  if self.onednn else "")
        return (f"- {model}: fp32 GEMM `[{rows}, {inner}] x [{inner}, {outer}]`, GFLOP/s: XNNPACK (LiteRT, the "
                f"default path) {statistics.median(self.fp32) / 1e9:.1f}, ONNX Runtime's MLAS "
                f"{statistics.median(self.mlas) / 1e9:.1f}{onednn}: XNNPACK runs **{statistics.median(ratios):.2f}x** "
                f"MLAS's rate (median of {len(ratios)} interleaved rounds, {min(ratios):.2f}-{max(ratios):.2f}).")


def gemm_flat(inner: int, outer: int, seed: int = 0) -> bytes:
    """A float32 LiteRT model of one ``FULLY_CONNECTED`` (with bias) taking ``[rows, inner]``."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    weight = tf.constant((rng.standard_normal((inner, outer)) / np.sqrt(inner)).astype(np.float32))
    bias = tf.constant(rng.standard_normal(outer).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, inner], tf.float32, name="x")])
    def layer(x):
        return {"y": tf.matmul(x, weight) + bias}

    # With a trackable object the converter writes a signature, which LiteRT's runner needs.
    converter = tf.lite.TFLiteConverter.from_concrete_functions([layer.get_concrete_function()], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def runner(flat: bytes, threads: int):
    """A LiteRT signature runner of ``flat`` on XNNPACK with ``threads`` threads (float inputs, unlike
    :class:`tfsent.inference.litert.LiteRTModel`'s int32 token features)."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_content=flat, num_threads=threads).get_signature_runner()


def onednn_timer(rows: int, inner: int, outer: int, seed: int = 0) -> Callable[[int], float]:
    """``calls -> seconds`` of TensorFlow's graph-mode fp32 ``x @ w + b`` (oneDNN's kernel on a CPU), warmed up."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    weight = tf.constant((rng.standard_normal((inner, outer)) / np.sqrt(inner)).astype(np.float32))
    bias = tf.constant(rng.standard_normal(outer).astype(np.float32))
    x = tf.constant(np.random.default_rng(1).standard_normal((rows, inner)).astype(np.float32))
    layer = tf.function(lambda a: tf.matmul(a, weight) + bias, jit_compile=False)
    return timer(lambda: layer(x).numpy())


def timer(call: Callable[[], object]) -> Callable[[int], float]:
    """``calls -> seconds`` of ``call`` run that many times, after one untimed warm-up call now."""
    call()

    def run(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            call()
        return time.perf_counter() - start
    return run


def gemm_rates(rows: int, inner: int, outer: int, rounds: int = 5, calls: int = 20, threads: int | None = None,
               mlas: Callable[[int], float] | None = None) -> GemmRates:
    """XNNPACK's fp32 and int8 GEMMs' rates in ``rounds`` interleaved rounds of ``calls`` calls each (the order
    rotates), with TensorFlow's oneDNN fp32 GEMM and, given ``mlas`` (``calls -> seconds`` of ONNX Runtime's, e.g.
    :meth:`bench.torch_client.TorchWorker.gemm_timer`), MLAS's in the same rounds."""
    from tfsent.inference import litert

    float32 = gemm_flat(inner, outer)
    x = np.random.default_rng(1).standard_normal((rows, inner)).astype(np.float32)
    timers: dict[str, Callable[[int], float]] = {}
    for name, flat in (("fp32", float32), ("int8", litert.quantize(float32))):
        run = runner(flat, threads or litert.threads())
        timers[name] = timer(lambda run=run: run(x=x))  # its warm-up call resizes the model
    timers["onednn"] = onednn_timer(rows, inner, outer)
    if mlas is not None:
        timers["mlas"] = mlas
    flop = 2.0 * rows * inner * outer * calls
    rates: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            rates[name].append(flop / timers[name](calls))
    return GemmRates((rows, inner, outer), rates["fp32"], rates["int8"], rates.get("mlas"), rates["onednn"])
