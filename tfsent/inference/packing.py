"""Sequence packing: short rows share one sequence, so a batch computes tokens instead of padding.

Rows are placed first-fit decreasing, one sequence at a time (:func:`plan`): a sequence opens with the longest row
left, its capacity that row's bucket or the pack length where that is longer, and takes the longest rows that still
fit (so short rows fill the spare end of a long row's bucket). A placed row is a *segment*: its tokens keep their
order, its positions restart (each architecture's numbering: ``first_position`` is 0, or one past the embeddings' pad
index for the RoBERTa family and MPNet), and ``segment_ids`` (1, 2, ... per sequence, 0 for padding) give the model its block-diagonal
attention mask (``tfsent.models.packing``). A finished sequence is then bucketed by its length like a row.

A sequence of ``L`` tokens holds at most :func:`slots` ``(L)`` segments: each batch has a fixed number of head slots
(``[sequences, slots]`` arrays of ``example_id`` and ``first_token``), so every shape is static for XLA and TPUs;
empty slots carry ``example_id == -1`` and are dropped like filler rows.

Packed probabilities equal unpacked ones within float rounding (1e-5 in the tests), not bit for bit: attention sums
over a longer row of exact zeros, in another order.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from tfsent.inference.flops import EncoderFlops
from tfsent.inference.tokens import TokenRows

FILLER_ID = -1
# Head slots per sequence: one per 4 tokens. Rows of 4 tokens or more never run out of slots; the head costs
# 2*H*H per slot, under 0.3% of a MiniLM-L6 sequence's FLOPs at any length.
TOKENS_PER_SLOT = 4
# Features the packed batch adds: the model reads them instead of an attention mask.
SEGMENT_IDS, POSITION_IDS, FIRST_TOKEN = "segment_ids", "position_ids", "first_token"
# The pack length keeps a token's attention, 4*L*H FLOPs per layer, under 1/16 of its other work, 4*H*(2*H + I)
# (MiniLM-L6: 128 tokens, BERT-base: 256), but at least 64 tokens so that small models pack too.
ATTENTION_SHARE = 16
MIN_PACK_LENGTH = 64


@dataclasses.dataclass(frozen=True)
class Packing:
    """How one model packs; its predictor builds this (``Predictor.packing``).

    Attributes:
        auto: pack only where the packed plan computes fewer FLOPs than the padded one (``packing: auto``);
            False packs every part (``packing: true``).
        first_position: position id of a segment's first token (0, or the pad index + 1).
        uncounted_id: a token id that takes position ``first_position - 1`` and is not counted (the RoBERTa family's
            and MPNet's positions, transformers' ``create_position_ids_from_input_ids``: the pad index), or None.
        gap: padding tokens between segments (``Architecture.packing_gap``).
        flops: the encoder's sizes: the pack length and the engine's comparisons are counted with them.
        capacity: one pack length instead of :meth:`capacities` (tests).
    """

    auto: bool
    first_position: int
    uncounted_id: int | None = None
    gap: int = 0
    flops: EncoderFlops | None = None
    capacity: int | None = None

    def capacities(self, buckets: Sequence[int]) -> list[int]:
        """The pack lengths worth planning with: the buckets from half :func:`pack_length` up to it. The engine keeps
        the plan whose batches count the fewest FLOPs: 1,400 tokens of 32 PhraseBank rows fill 11 sequences of 128
        (run as a batch of 16, five of them fillers) but 16 of 96 (one batch, no filler)."""
        if self.capacity:
            return [self.capacity]
        top = pack_length(buckets, self.flops)
        return [b for b in sorted(int(b) for b in buckets) if top // 2 <= b <= top]

    def pack(self, tokens: TokenRows, buckets: Sequence[int], pad_values: Mapping[str, int],
             capacity: int | None = None) -> "PackedRows":
        """``tokens`` packed into sequences of ``buckets``' lengths (:func:`plan`, then :func:`pack_rows`) at
        ``capacity`` (default: the longest of :meth:`capacities`)."""
        capacity = capacity or self.capacities(buckets)[-1]
        return self.lay_out(tokens, plan(tokens.lengths, buckets, capacity, self.gap), pad_values)

    def lay_out(self, tokens: TokenRows, the_plan: "Plan", pad_values: Mapping[str, int]) -> "PackedRows":
        """:func:`pack_rows` with this model's positions."""
        return pack_rows(tokens, the_plan, first_position=self.first_position, uncounted_id=self.uncounted_id,
                         pad_values=pad_values)


def model_packing(*, auto: bool, first_position: int, gap: int, flops: EncoderFlops | None) -> Packing:
    """A model's :class:`Packing`: a first position above 0 (the RoBERTa family, MPNet) makes the pad id, one
    below it, the uncounted token (transformers' ``create_position_ids_from_input_ids``)."""
    uncounted = first_position - 1 if first_position else None
    return Packing(auto=auto, first_position=first_position, uncounted_id=uncounted, gap=gap, flops=flops)


def slots(length: int) -> int:
    """Head slots of a packed sequence of ``length`` tokens."""
    return max(1, int(length) // TOKENS_PER_SLOT)


def pack_length(buckets: Sequence[int], flops: EncoderFlops | None) -> int:
    """The capacity of a sequence that short rows open: the longest bucket of at most ``(2*H + I) / 16`` tokens
    (:data:`ATTENTION_SHARE`) or :data:`MIN_PACK_LENGTH`, whichever is more; the shortest bucket where none is."""
    edges = sorted(int(b) for b in buckets)
    limit = MIN_PACK_LENGTH if flops is None else max(MIN_PACK_LENGTH,
                                                      (2 * flops.hidden + flops.intermediate) // ATTENTION_SHARE)
    within = [b for b in edges if b <= limit]
    return within[-1] if within else edges[0]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Where first-fit decreasing puts each row.

    Attributes:
        sequence: ``[rows]`` the sequence each row goes to (numbered in opening order).
        offset: ``[rows]`` the row's first token within its sequence.
        segment: ``[rows]`` the row's segment number within its sequence (0, 1, ...: placement order).
        lengths: ``[sequences]`` tokens used per sequence (gaps included).
    """

    sequence: np.ndarray
    offset: np.ndarray
    segment: np.ndarray
    lengths: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """Segments per sequence."""
        return np.bincount(self.sequence, minlength=len(self.lengths))


def plan(lengths: Sequence[int] | np.ndarray, buckets: Sequence[int], capacity: int, gap: int = 0) -> Plan:
    """First-fit decreasing of rows into sequences, one sequence at a time.

    Each sequence opens with the longest row left, with room for ``max(its bucket, capacity)`` tokens (never above
    the top bucket), and then takes the longest rows left that still fit (``gap + n`` tokens, and a free head slot at
    the bucket its new length falls in) until none does. Every sequence but the last few is full; the leftovers make
    a short last sequence that runs in a small bucket, where spreading them over all sequences would have left each
    a little short and the last batch one sequence over a power of two (filler sequences of the full length). Equal
    lengths keep input order, so the plan is deterministic.

    Args:
        lengths: tokens per row.
        buckets: sorted bucket lengths; no row may exceed the last.
        capacity: the pack length (:func:`pack_length`).
        gap: padding tokens between two segments (a convolution over the sequence, DeBERTa-v2's, must see padding
            at a segment's ends as it does unpacked).

    Raises:
        ValueError: a row longer than the top bucket.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    edges = [int(b) for b in buckets]
    top = edges[-1]
    if lengths.size and lengths.max() > top:
        raise ValueError(f"a row of {lengths.max()} tokens exceeds the top bucket {top}; truncate or chunk it first")
    n_rows = len(lengths)
    sequence = np.empty(n_rows, np.int64)
    offset = np.empty(n_rows, np.int64)
    segment = np.empty(n_rows, np.int64)
    # The rows left, by length: each length's rows in input order, and the sorted lengths that have rows left.
    order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(lengths[order]) != 0, True])
    left = {int(lengths[order[a]]): order[a:b][::-1].tolist() for a, b in zip(bounds[:-1], bounds[1:])}
    sizes = sorted(left)

    def take(n: int) -> int:
        rows = left[n]
        row = rows.pop()
        if not rows:
            del left[n]
            sizes.remove(n)
        return row

    def bucket(n: int) -> int:
        return edges[bisect.bisect_left(edges, n)]

    used: list[int] = []
    while sizes:
        s = len(used)
        n = sizes[-1]
        row = take(n)
        sequence[row], offset[row], segment[row] = s, 0, 0
        room, count, filled = min(max(bucket(n), capacity), top), 1, n
        while True:
            fits = bisect.bisect_right(sizes, room - filled - gap)
            # A sequence short of head slots for the longest row that fits is short of them for every shorter one.
            if fits == 0 or count + 1 > slots(bucket(filled + gap + sizes[fits - 1])):
                break
            n = sizes[fits - 1]
            row = take(n)
            sequence[row], offset[row], segment[row] = s, filled + gap, count
            filled += gap + n
            count += 1
        used.append(filled)
    return Plan(sequence, offset, segment, np.asarray(used, np.int64))


@dataclasses.dataclass
class PackedRows:
    """Packed sequences, ready to batch like rows (``lengths``, :meth:`batch`).

    Attributes:
        sequences: the sequences' token features, with ``segment_ids`` and ``position_ids`` beside the rows' own
            (no attention mask: the segments are the mask).
        slot_row: ``[segments]`` the row of each segment, sequence by sequence, in segment order.
        slot_first: ``[segments]`` each segment's first token within its sequence.
        slot_offsets: ``[sequences + 1]``: sequence ``i``'s segments are ``slot_offsets[i]:slot_offsets[i + 1]``.
        pad_values: pad value per feature.
    """

    sequences: TokenRows
    slot_row: np.ndarray
    slot_first: np.ndarray
    slot_offsets: np.ndarray
    pad_values: dict[str, int]

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def lengths(self) -> np.ndarray:
        """The shortest length each sequence can run at: its tokens, or :data:`TOKENS_PER_SLOT` per segment where
        that is more. The plan gives a sequence a head slot per ``TOKENS_PER_SLOT`` tokens of its bucket, so many
        very short rows can hold more segments than the sequence's own tokens have slots; in a bucket that changes
        nothing (the bucket is as long), in exact shapes it keeps a batch as long as its segments need."""
        counts = np.diff(self.slot_offsets)
        return np.maximum(self.sequences.lengths, TOKENS_PER_SLOT * counts)

    def batch(self, seqs: np.ndarray, length: int, multiple: int) -> dict[str, np.ndarray]:
        """Sequences ``seqs`` as ``[n, length]`` token arrays and ``[n, slots(length)]`` head-slot arrays, padded up
        to a multiple of ``multiple`` sequences with filler sequences (no segment, every slot ``-1``).

        Raises:
            ValueError: a sequence with more segments than ``slots(length)`` (its plan used a shorter bucket).
        """
        seqs = np.asarray(seqs, dtype=np.int64)
        total = -(-len(seqs) // multiple) * multiple
        out = self.sequences.gather(seqs, length, total, self.pad_values)
        k = slots(length)
        counts = self.slot_offsets[seqs + 1] - self.slot_offsets[seqs]
        if counts.size and counts.max() > k:
            raise ValueError(f"a sequence of {counts.max()} segments does not fit the {k} slots of length {length}")
        where = np.repeat(np.arange(len(seqs)), counts)
        col = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        src = np.repeat(self.slot_offsets[seqs], counts) + col
        example_id = np.full((total, k), FILLER_ID, np.int32)
        first_token = np.zeros((total, k), np.int32)
        example_id[where, col] = self.slot_row[src]
        first_token[where, col] = self.slot_first[src]
        out["example_id"] = example_id
        out[FIRST_TOKEN] = first_token
        return out


def pack_rows(tokens: TokenRows, the_plan: Plan, *, first_position: int, pad_values: Mapping[str, int],
              uncounted_id: int | None = None) -> PackedRows:
    """Lay the rows out as the plan says.

    Args:
        tokens: the rows (``attention_mask`` is dropped: the segments replace it).
        the_plan: from :func:`plan` on ``tokens.lengths``.
        first_position: position id of each segment's first token; padding (and gaps) gets ``first_position - 1``
            where that is a valid id (the pad position of the RoBERTa family), else 0.
        pad_values: pad value per token feature (``input_ids``: the tokenizer's pad id).
        uncounted_id: tokens of this id take position ``first_position - 1`` and the tokens after them count on
            as if they were absent (transformers numbers RoBERTa's and MPNet's positions so), or None.
    """
    lens = tokens.lengths
    seq_start = np.concatenate([[0], np.cumsum(the_plan.lengths)]).astype(np.int64)
    dest = np.repeat(seq_start[the_plan.sequence] + the_plan.offset, lens)
    col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    dest = dest + col
    src = np.repeat(tokens.offsets[:-1], lens) + col
    total = int(seq_start[-1])
    pads = {k: int(v) for k, v in pad_values.items()}
    pads[SEGMENT_IDS] = 0
    pads[POSITION_IDS] = max(first_position - 1, 0)
    values = {}
    for name, flat in tokens.values.items():
        if name == "attention_mask":
            continue
        arr = np.full(total, pads.get(name, 0), np.int32)
        arr[dest] = flat[src]
        values[name] = arr
    values[SEGMENT_IDS] = np.zeros(total, np.int32)
    values[SEGMENT_IDS][dest] = np.repeat(the_plan.segment + 1, lens)
    values[POSITION_IDS] = np.full(total, pads[POSITION_IDS], np.int32)
    if uncounted_id is None:
        values[POSITION_IDS][dest] = first_position + col
    else:
        # Per row: the running count of counted tokens, the position of the uncounted ones fixed at the pad's.
        counted = (tokens.values["input_ids"][src] != uncounted_id).astype(np.int64)
        running = np.cumsum(counted)
        before = np.repeat(running[np.cumsum(lens) - lens] - counted[np.cumsum(lens) - lens], lens) \
            if lens.size else running
        values[POSITION_IDS][dest] = (running - before) * counted + first_position - 1
    order = np.lexsort((the_plan.segment, the_plan.sequence))
    offsets = np.concatenate([[0], np.cumsum(the_plan.counts)]).astype(np.int64)
    sequences = TokenRows(values, seq_start, np.zeros(len(the_plan.lengths), bool))
    return PackedRows(sequences, order.astype(np.int32), the_plan.offset[order].astype(np.int32), offsets, pads)
