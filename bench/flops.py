"""FLOPs of a BERT/RoBERTa encoder for the shapes it actually ran, and this machine's TF matmul rate.

Counting convention: a multiply-add is 2 FLOPs; only matrix products are counted (they are >98% of the work at
sentence lengths). Softmax, LayerNorm, GELU, embedding gathers and biases are left out, so the achieved fraction
is, if anything, slightly understated.

Per sequence of padded length ``L`` with hidden ``H``, feed-forward ``I`` and ``N`` layers:

- projections Q, K, V and the attention output: ``4 * 2*L*H*H``
- feed-forward in and out: ``2 * 2*L*H*I``
- attention scores ``Q K^T`` and the weighted sum ``P V``: ``2 * 2*L*L*H`` (all heads together)
- pooler ``2*H*H`` and classifier ``2*H*C`` once per sequence (classification head), or the LM head
  ``2*L*H*H + 2*L*H*V`` (masked LM: dense transform and the tied vocabulary projection).

The encoder and head counts are tfsent's own (:mod:`tfsent.inference.flops`), which ``packing: auto`` decides with;
:func:`executed_flops` counts the batches the engine runs, padded or packed (``tfsent.inference.packing``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class EncoderShape:
    """The sizes FLOPs depend on.

    Attributes:
        hidden: hidden size ``H``.
        layers: number of transformer layers ``N``.
        intermediate: feed-forward size ``I``.
        num_labels: classifier outputs ``C`` (0 for no classification head).
        vocab: vocabulary size ``V`` when an LM head projects every position onto it, else 0.
    """

    hidden: int
    layers: int
    intermediate: int
    num_labels: int = 0
    vocab: int = 0

    def encoder(self):
        """tfsent's :class:`~tfsent.inference.flops.EncoderFlops` of this shape."""
        from tfsent.inference.flops import EncoderFlops

        return EncoderFlops(hidden=self.hidden, layers=self.layers, intermediate=self.intermediate,
                            num_labels=self.num_labels)

    @classmethod
    def from_config(cls, config, *, num_labels: int = 0, lm_head: bool = False) -> EncoderShape:
        """Read the sizes from a transformers config (``BertConfig``/``RobertaConfig``) or a dict of its fields."""
        get = config.get if isinstance(config, Mapping) else lambda k: getattr(config, k)
        return cls(hidden=int(get("hidden_size")), layers=int(get("num_hidden_layers")),
                   intermediate=int(get("intermediate_size")), num_labels=num_labels,
                   vocab=int(get("vocab_size")) if lm_head else 0)


def sequence_flops(shape: EncoderShape, length: int) -> int:
    """Matmul FLOPs of one forward pass over one sequence of (padded) length ``length``."""
    h, L = shape.hidden, int(length)
    encoder = shape.encoder()
    lm = 2 * L * h * h + 2 * L * h * shape.vocab if shape.vocab else 0
    return encoder.sequence(L) + encoder.head() + lm


def batch_flops(shape: EncoderShape, rows_by_length: Mapping[int, int] | Iterable[tuple[int, int]]) -> int:
    """Forward FLOPs of ``{padded length: number of rows}`` (e.g. the rows of each bucket, fillers included)."""
    items = rows_by_length.items() if isinstance(rows_by_length, Mapping) else rows_by_length
    return sum(int(rows) * sequence_flops(shape, length) for length, rows in items)


def useful_flops(shape: EncoderShape, lengths: Iterable[int]) -> int:
    """Forward FLOPs of rows at their real token counts: no padding, no filler rows (the work any run must do)."""
    return batch_flops(shape, ((int(n), 1) for n in lengths))


def training_flops(forward: int) -> int:
    """Forward + backward of a training step: the backward pass costs twice the forward (grads of inputs and
    weights), the usual ``3 x forward`` rule."""
    return 3 * forward


def padded_rows(lengths: Iterable[int], buckets: Iterable[int], global_batch_size: int,
                replicas: int = 1) -> dict[int, int]:
    """Rows per bucket length as ``tfsent.inference.engine.predict_bucketed`` runs them (its own assignment: smallest
    bucket that holds a row, partial batches spilled up where cheaper, whole batches plus a smaller last batch per
    bucket, ``engine.batch_plan``), filler rows included.

    Raises:
        ValueError: a length above the top bucket.
    """
    from tfsent.inference.engine import plan_batches

    edges = sorted(int(b) for b in buckets)
    rows: dict[int, int] = {}
    for length, _, batch, steps in plan_batches(np.fromiter(lengths, dtype=np.int64), edges, global_batch_size,
                                                replicas):
        rows[length] = rows.get(length, 0) + batch * steps
    return rows


def executed_flops(shape: EncoderShape, lengths: Iterable[int], buckets: Iterable[int], global_batch_size: int,
                   replicas: int = 1, *, packing: bool | str, exact: bool = False) -> int:
    """FLOPs the engine executes on rows of these token counts (a classifier) under ``packing: true|false|auto``:
    padded rows in their buckets (``exact``: in LiteRT's exact shapes, ``plan.exact_batches``), or the sequences
    ``tfsent.inference.packing`` packs them into; filler rows or sequences included, a head per row or per head slot
    (``engine.packing_choice``, ``engine.plan_flops``)."""
    from tfsent.inference.engine import packing_choice, plan_batches, plan_flops
    from tfsent.inference.packing import Packing

    edges = sorted(int(b) for b in buckets)
    lengths = np.fromiter(lengths, dtype=np.int64)
    encoder = shape.encoder()
    spec = None if packing is False else Packing(auto=packing == "auto", first_position=0, flops=encoder)
    chosen = packing_choice(lengths, edges, spec, global_batch_size, replicas, exact=exact)
    units = lengths if chosen is None else chosen.lengths
    return plan_flops(plan_batches(units, edges, global_batch_size, replicas, exact=exact), encoder,
                      packed=chosen is not None)


def _products(dtype: str, size: int, chain: int):
    """A function computing ``chain`` independent ``size x size`` products, reduced to one scalar so results are
    materialised without copying chain*size^2 values back."""
    import tensorflow as tf

    dt = tf.as_dtype(dtype)
    pairs = [(tf.cast(tf.random.normal([size, size]), dt), tf.cast(tf.random.normal([size, size]), dt))
             for _ in range(chain)]
    return lambda: tf.add_n([tf.reduce_sum(tf.cast(tf.linalg.matmul(x, y), tf.float32)) for x, y in pairs])


def _timed(fn) -> float:
    start = time.perf_counter()
    fn().numpy()
    return time.perf_counter() - start


def _fastest_variant(dtype: str, size: int, chain: int, repeats: int):
    """``(compiled function, its best seconds)``: graph or XLA, whichever ran ``repeats`` calls fastest."""
    import tensorflow as tf

    from bench import isa
    from tfsent.runtime import execution as ex

    products = _products(dtype, size, chain)
    precision = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
    variants = isa.runnable([ex.ExecutionPath(jit, precision) for jit in (False, True)])
    best = None
    for jit in [p.jit_compile for p in variants]:
        fn = tf.function(products, jit_compile=jit)
        fn().numpy()  # trace, compile and warm up
        seconds = min(_timed(fn) for _ in range(repeats))
        if best is None or seconds < best[1]:
            best = (fn, seconds)
    return best


def matmul_rate(dtype: str = "float32", size: int = 1024, chain: int = 8, repeats: int = 5) -> float:
    """This machine's sustained TF matmul rate in FLOP/s: the best of ``repeats`` timed calls of a tf.function
    that computes ``chain`` independent ``size x size`` products, compiled both by TF's graph runtime (oneDNN/Eigen
    kernels) and by XLA, whichever is faster. A ceiling must not be understated: one batched ``[chain, n, n]``
    product measured 15-25% slower here than the same work as separate 2-D products.

    Args:
        dtype: ``float32`` or ``bfloat16``.
        size: side of the square matrices.
        chain: products per call (amortises the call overhead; independent, so every core can work).
        repeats: timed calls per variant; the fastest counts (the machine is shared, so slow calls are other
            people's load).
    """
    return 2.0 * chain * size ** 3 / _fastest_variant(dtype, size, chain, repeats)[1]


def matmul_timer(dtype: str = "float32", size: int = 1024, chain: int = 8, repeats: int = 3):
    """A callable returning the matmul rate (FLOP/s) of one more call of :func:`matmul_rate`'s products, on its
    faster variant: for timing the matmul rate in rounds interleaved with something else."""
    fn, _ = _fastest_variant(dtype, size, chain, repeats)
    return lambda: 2.0 * chain * size ** 3 / _timed(fn)
