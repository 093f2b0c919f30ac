"""The ceiling on ``precision=int8``'s gain: XNNPACK's dynamic int8 GEMM against its fp32 GEMM on this CPU.

``precision=int8`` makes every ``FULLY_CONNECTED`` weight int8 (:func:`tfsent.inference.litert.quantize`); XNNPACK
then quantizes each input row at run time and multiplies in int8. Those GEMMs are most of a forward pass, so the
int8 model cannot gain more over the fp32 one than XNNPACK's int8 GEMM gains over its fp32 GEMM at the model's own
shapes. With VNNI (AVX-512 VNNI, AVX-VNNI) its int8 kernels multiply 4 bytes per lane per instruction; on AVX2
alone they widen to 16 bits first. This module times both GEMMs, each a one-operator LiteRT model converted by
TensorFlow and quantized by the same recipe, in interleaved rounds.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np


@dataclasses.dataclass
class GemmRates:
    """FLOP/s per round of the fp32 and the dynamic int8 GEMM ``[rows, inner] x [inner, outer]``."""

    shape: tuple[int, int, int]
    fp32: list[float]
    int8: list[float]

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


def gemm_rates(rows: int, inner: int, outer: int, rounds: int = 5, calls: int = 20, threads: int | None = None
               ) -> GemmRates:
    """Both GEMMs' rates in ``rounds`` interleaved rounds of ``calls`` calls each (the order alternates)."""
    from tfsent.inference import litert

    float32 = gemm_flat(inner, outer)
    x = np.random.default_rng(1).standard_normal((rows, inner)).astype(np.float32)
    runners = {}
    for name, flat in (("fp32", float32), ("int8", litert.quantize(float32))):
        runners[name] = runner(flat, threads or litert.threads())
        runners[name](x=x)  # resize and warm
    flop = 2.0 * rows * inner * outer * calls
    rates: dict[str, list[float]] = {"fp32": [], "int8": []}
    for i in range(rounds):
        for name in ("fp32", "int8") if i % 2 == 0 else ("int8", "fp32"):
            start = time.perf_counter()
            for _ in range(calls):
                runners[name](x=x)
            rates[name].append(flop / (time.perf_counter() - start))
    return GemmRates((rows, inner, outer), rates["fp32"], rates["int8"])
