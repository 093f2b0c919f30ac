"""The engine's plan, in numpy only: which bucket each row runs in, the batch shapes, the filler rows, the order back.

Every backend that scores rows runs this plan (:mod:`tfsent.inference.engine` through ``model.predict`` on any
strategy, :mod:`tfsent.inference.litert` through LiteRT on a CPU), so the plan lives apart from TensorFlow: a
process that scores with LiteRT imports none. See :mod:`tfsent.inference.engine` for why rows are bucketed, spilt
up, padded with filler rows and put back in order by ``example_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tfsent.inference import packing as packing_lib
from tfsent.inference.packing import FILLER_ID, Packing, PackedRows
from tfsent.inference.tokens import TokenRows

# `packing: auto` packs where the padded plan counts more FLOPs than the packed one by more than this share: the
# packed batch's own uncounted work (its [L, L] mask, the slot gathers) is a few elementwise ops per score.
AUTO_MARGIN = 0.02
# Steps of at most 1.5x (4/3 from 24 tokens on) where doubling buckets pad a sentence by up to 2x (PhraseBank,
# MiniLM-L6, 10k rows: 1.50x the useful FLOPs with 32/64/128, 1.16x with these).
# Only buckets that receive rows compile: sentences use a handful of shapes, 512-token chunks mostly one.
DEFAULT_BUCKETS = (16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)


def bucket_lengths(buckets: Sequence[int], max_length: int) -> tuple[int, ...]:
    """The sorted bucket lengths, each capped at the model's maximum length.

    Args:
        buckets: requested sequence lengths, e.g. ``(32, 64, 128, 256, 512)``.
        max_length: the longest sequence the model accepts (position embeddings).

    Returns:
        Sorted unique lengths ``<= max_length``; the last one is the truncation length.

    Raises:
        ValueError: no bucket, or a bucket or ``max_length`` below 2 (a special token pair needs 2).
    """
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2, got {max_length}")
    if not buckets or min(buckets) < 2:
        raise ValueError(f"buckets must be a non-empty list of lengths >= 2, got {list(buckets)}")
    return tuple(sorted({min(int(b), max_length) for b in buckets}))


def assign_buckets(lengths: np.ndarray, buckets: Sequence[int]) -> np.ndarray:
    """Index of the smallest bucket ``>= length`` for each row.

    Raises:
        ValueError: a row longer than the top bucket (truncate it, or chunk it, before bucketing).
    """
    lengths = np.asarray(lengths)
    edges = np.asarray(buckets)
    too_long = np.flatnonzero(lengths > edges[-1])
    if too_long.size:
        raise ValueError(f"{too_long.size} row(s) exceed the top bucket {edges[-1]} (first: row {too_long[0]}, "
                         f"{lengths[too_long[0]]} tokens); truncate or chunk them first")
    return np.searchsorted(edges, lengths, side="left")


def spill_partial_batches(which: np.ndarray, lengths: np.ndarray, buckets: Sequence[int],
                          global_batch_size: int) -> np.ndarray:
    """Move a bucket's last, partial batch up into the next bucket where that computes fewer padded tokens.

    A bucket of ``n`` rows runs ``ceil(n / B)`` global batches of ``B`` rows, so up to ``B - 1`` filler rows of
    its length are computed for nothing. Filling the next bucket's filler slots with the longest of those rows
    instead is cheaper whenever the extra length costs less than the filler batch (cost counted as rows x
    length); a bucket that never fills one batch disappears, which also saves its XLA compilation. Buckets are
    visited shortest first, so rows can cascade up; none goes past the top bucket. The cost counts a partial
    batch at the full global batch even though :func:`batch_plan` runs it smaller: a move also saves the tail's
    compiled shape, and fewer shapes matter more than a few rows for the small jobs where tails dominate.

    Args:
        which: bucket index per row (from :func:`assign_buckets`).
        lengths: token count per row.
        buckets: the sorted bucket lengths.
        global_batch_size: rows per step over all replicas.

    Returns:
        A new bucket index per row; every row still fits its bucket.
    """
    which = np.array(which, copy=True)
    lengths = np.asarray(lengths)
    size = global_batch_size

    def cost(n: int, length: int) -> int:
        return -(-n // size) * size * length

    for b in range(len(buckets) - 1):
        rows = np.flatnonzero(which == b)
        spare = len(rows) % size
        if spare == 0:
            continue
        above = int(np.count_nonzero(which == b + 1))
        keep = cost(len(rows), buckets[b]) + cost(above, buckets[b + 1])
        move = cost(len(rows) - spare, buckets[b]) + cost(above + spare, buckets[b + 1])
        if move < keep or (move == keep and spare == len(rows)):
            longest = rows[np.argsort(-lengths[rows], kind="stable")[:spare]]
            which[longest] = b + 1
    return which


def batch_plan(n_rows: int, global_batch_size: int, replicas: int = 1, *, shrink_tail: bool = True
               ) -> list[tuple[int, int]]:
    """The batch shapes that run ``n_rows`` rows of one bucket: ``[(global batch, steps), ...]``.

    Whole batches of ``global_batch_size``, then (``shrink_tail``) the remaining rows in one batch of the next
    power of two that holds them, rounded up to a multiple of ``replicas`` (each replica gets an equal slice).
    Powers of two bound the distinct tail shapes a long run can meet at ``log2(global_batch_size)`` per bucket.

    Args:
        n_rows: rows of the bucket (at least 1).
        global_batch_size: rows per full step over all replicas.
        replicas: replicas in sync; the global batch divides by it.
        shrink_tail: False pads the last batch to the full global batch (one shape per bucket).

    Returns:
        One or two ``(batch size, steps)`` pairs; their rows add up to at least ``n_rows``.
    """
    full, tail = divmod(n_rows, global_batch_size)
    if tail == 0:
        return [(global_batch_size, full)]
    size = 1 << (tail - 1).bit_length()
    size = -(-size // replicas) * replicas
    if not shrink_tail or size >= global_batch_size:
        return [(global_batch_size, full + 1)]
    return ([(global_batch_size, full)] if full else []) + [(size, 1)]


def plan_batches(lengths: np.ndarray, buckets: Sequence[int], global_batch_size: int, replicas: int = 1, *,
                 shrink_tail: bool = True, exact: bool = False) -> list[tuple[int, np.ndarray, int, int]]:
    """Every batch shape a run of these rows (or packed sequences) executes, in run order.

    Rows go to the smallest bucket that holds them, partial batches spill up where cheaper
    (:func:`spill_partial_batches`), and each bucket runs :func:`batch_plan`'s shapes. With ``exact`` (a backend
    that runs any shape without compiling it: LiteRT) rows run in :func:`exact_batches` instead.

    Returns:
        ``(bucket length, row indices, batch size, steps)`` per shape; the indices fill ``batch * steps`` slots
        (the rest are filler rows).

    Raises:
        ValueError: a row longer than the top bucket.
    """
    lengths = np.asarray(lengths)
    which = assign_buckets(lengths, buckets)  # also refuses a row longer than the top bucket, on every path
    if exact:
        return exact_batches(lengths, global_batch_size, replicas)
    which = spill_partial_batches(which, lengths, buckets, global_batch_size)
    shapes = []
    for b, length in enumerate(buckets):
        rows = np.flatnonzero(which == b)
        start = 0
        for batch, steps in (batch_plan(rows.size, global_batch_size, replicas, shrink_tail=shrink_tail)
                             if rows.size else []):
            shapes.append((int(length), rows[start:start + batch * steps], batch, steps))
            start += batch * steps
    return shapes


def exact_batches(lengths: np.ndarray, global_batch_size: int, replicas: int = 1
                  ) -> list[tuple[int, np.ndarray, int, int]]:
    """Rows sorted by length in batches of ``global_batch_size``, each as long as its longest row: no bucket, no
    filler row (but the last batch's rows rounded up to ``replicas``).

    For a backend where a new shape costs no compilation (LiteRT resizes one model): on PhraseBank's 4,846 rows
    (MiniLM-L6's tokens) batches of 64 compute 1.04x the real tokens where the buckets compute 1.16x.

    Batches are cut from the shortest rows up (the last, partial batch holds the longest rows) and run shortest
    batch first, then longest to shortest: LiteRT grows its tensor arena at every shape larger than any before, and
    a fresh process pays that growth (new memory, touched for the first time) at each step of an ascending run: 14%
    more time over MiniLM-L6's lengths 17-110 than the same shapes run again, against 1% run longest first. The
    shortest batch goes first so that a job's first rows (and its progress) come as soon as they can.

    Returns:
        :func:`plan_batches`' ``(length, row indices, batch size, 1)``, in run order.
    """
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    shapes = []
    for start in range(0, order.size, global_batch_size):
        rows = order[start:start + global_batch_size]
        batch = -(-rows.size // replicas) * replicas
        shapes.append((int(lengths[rows].max()), rows, batch, 1))
    return shapes[:1] + shapes[:0:-1]


def plan_flops(shapes: Sequence[tuple[int, np.ndarray, int, int]], flops, *, packed: bool) -> int:
    """FLOPs of :func:`plan_batches`' shapes (``flops``: :class:`~tfsent.inference.flops.EncoderFlops`): every
    sequence at its bucket length, fillers included; a head per row, or per slot of a packed sequence."""
    total = 0
    for length, _, batch, steps in shapes:
        heads = packing_lib.slots(length) if packed else 1
        total += batch * steps * (flops.sequence(length) + heads * flops.head())
    return total


class Rows:
    """The padded path's units: rows, batched by :func:`pad_rows`."""

    def __init__(self, tokens: TokenRows, pad_values: Mapping[str, int]):
        self.tokens = tokens
        self.pad_values = pad_values
        self.lengths = tokens.lengths

    def batch(self, rows: np.ndarray, length: int, multiple: int) -> dict[str, np.ndarray]:
        return pad_rows(self.tokens, rows, length, multiple, self.pad_values)


def choose_units(tokens: TokenRows, buckets: Sequence[int], packing: Packing | None, pad_values: Mapping[str, int],
                 global_batch_size: int, replicas: int = 1, *, shrink_tail: bool = True,
                 exact: bool = False) -> Rows | PackedRows:
    """What the run batches: the rows themselves, or the sequences ``packing`` packs them into.

    ``packing.auto`` packs only where :func:`plan_flops` of the packed plan, plus :data:`AUTO_MARGIN`, is below
    the padded plan's (the same rows, the same buckets and batch shapes, ``exact`` or not): a count, so the choice
    is the same on every run of the same part.
    """
    chosen = packing_choice(tokens.lengths, buckets, packing, global_batch_size, replicas, shrink_tail=shrink_tail,
                            exact=exact)
    if chosen is None:
        return Rows(tokens, pad_values)
    return packing.lay_out(tokens, chosen, pad_values)


def packing_choice(lengths: np.ndarray, buckets: Sequence[int], packing: Packing | None, global_batch_size: int,
                   replicas: int = 1, *, shrink_tail: bool = True, exact: bool = False) -> packing_lib.Plan | None:
    """The plan rows of these lengths are packed with (:func:`pack_plan`), or None where they run padded: no
    ``packing``, or ``packing.auto`` and a packed plan that does not save more than :data:`AUTO_MARGIN` of the
    padded plan's FLOPs."""
    if packing is None:
        return None
    best, packed_cost = pack_plan(lengths, buckets, packing, global_batch_size, replicas, shrink_tail=shrink_tail,
                                  exact=exact)
    if packing.auto and packed_cost is not None:  # without encoder sizes nothing is counted: pack
        padded = plan_batches(lengths, buckets, global_batch_size, replicas, shrink_tail=shrink_tail, exact=exact)
        if packed_cost * (1 + AUTO_MARGIN) >= plan_flops(padded, packing.flops, packed=False):
            return None
    return best


def pack_plan(lengths: np.ndarray, buckets: Sequence[int], packing: Packing, global_batch_size: int,
              replicas: int = 1, *, shrink_tail: bool = True, exact: bool = False
              ) -> tuple[packing_lib.Plan, int | None]:
    """The packing plan, among those of ``packing.capacities``, whose batches count the fewest FLOPs.

    Returns:
        ``(plan, its FLOPs)``; the FLOPs are None when ``packing`` has no encoder sizes (one capacity, not costed).
    """
    best, best_cost = None, None
    for capacity in packing.capacities(buckets):
        candidate = packing_lib.plan(lengths, buckets, capacity, packing.gap)
        if packing.flops is None:
            return candidate, None
        shapes = plan_batches(candidate.lengths, buckets, global_batch_size, replicas, shrink_tail=shrink_tail,
                              exact=exact)
        cost = plan_flops(shapes, packing.flops, packed=True)
        if best_cost is None or cost < best_cost:
            best, best_cost = candidate, cost
    return best, best_cost


def pad_rows(tokens: TokenRows, rows: np.ndarray, length: int, multiple: int,
             pad_values: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Stack the given rows into ``[n, length]`` int32 arrays, padded up to a multiple of ``multiple`` rows.

    The ids of real rows are their positions; filler rows get ``example_id == -1`` and a single attended
    position, so that attention never normalises over an all-masked row (harmless, but keeps NaN out of
    anything a model might compute on them).
    """
    n = len(rows)
    total = -(-n // multiple) * multiple
    out = tokens.gather(rows, length, total, pad_values)
    if "attention_mask" in out:
        out["attention_mask"][n:, 0] = 1
    out["example_id"] = np.concatenate([rows, np.full(total - n, FILLER_ID)]).astype(np.int32)
    return out


def reorder(pieces: Sequence[Mapping[str, np.ndarray]], n: int) -> dict[str, np.ndarray]:
    """Concatenate per-bucket outputs, drop filler rows and sort by ``example_id``, checking ids are 0..n-1.

    Raises:
        ValueError: an id is missing, duplicated or out of range.
    """
    ids = np.concatenate([p["example_id"] for p in pieces]).astype(np.int64)
    keep = ids != FILLER_ID
    ids = ids[keep]
    order = np.argsort(ids, kind="stable")
    if len(ids) != n or not np.array_equal(ids[order], np.arange(n)):
        seen = np.bincount(ids[(ids >= 0) & (ids < n)], minlength=n)
        raise ValueError(f"predict returned {len(ids)} rows for {n} inputs: missing ids "
                         f"{np.flatnonzero(seen == 0)[:10].tolist()}, duplicated {np.flatnonzero(seen > 1)[:10].tolist()}")
    result = {}
    for key in pieces[0]:
        if key == "example_id":
            continue
        result[key] = np.concatenate([p[key] for p in pieces])[keep][order]
    return result
