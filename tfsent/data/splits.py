"""Deterministic, seeded, stratified train/validation/test splits.

The same inputs give the same split on every machine: one ``numpy.random.Generator(PCG64(seed))`` permutes the
members of each class in a fixed class order, and split sizes come from a largest-remainder rule (no float
rounding that could differ between platforms decides a count).
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Sequence

import numpy as np

from tfsent.data.errors import DataError


def check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    """Validate split fractions: named, positive, summing to 1.

    Raises:
        DataError: no splits, a fraction <= 0, or a sum other than 1 (to 1e-6).
    """
    if not fractions:
        raise DataError("split fractions are empty; expected e.g. {train: 0.8, validation: 0.1, test: 0.1}")
    out = {}
    for name, value in fractions.items():
        value = float(value)
        if not value > 0:
            raise DataError(f"split fraction {name}={value} must be > 0 (leave the split out instead)")
        out[str(name)] = value
    total = math.fsum(out.values())
    if abs(total - 1.0) > 1e-6:
        raise DataError(f"split fractions must sum to 1, got {total:g} ({out})")
    return out


def _allocate(n: int, fractions: Sequence[float]) -> list[int]:
    exact = [n * f for f in fractions]
    counts = [math.floor(x) for x in exact]
    # Largest remainder first; ties go to the earlier split (train before validation before test).
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def split_indices(labels: Sequence[Hashable | None], fractions: Mapping[str, float], seed: int, *,
                  stratified: bool = True, groups: Sequence[Hashable] | None = None) -> dict[str, np.ndarray]:
    """Assign every example to exactly one split.

    Args:
        labels: one label per example (None for unlabeled); with ``stratified`` each label is split separately,
            so every split keeps the label proportions.
        fractions: split name -> fraction, in split order, summing to 1.
        seed: the random seed; the same seed gives the same split everywhere.
        stratified: split each label separately (True) or all examples together.
        groups: optional group key per example (e.g. the text): every member of a group follows the split of the
            group's first member, so exact duplicates never straddle train and test.

    Returns:
        split name -> sorted int64 indices into ``labels``. The index sets are disjoint and cover every example.

    Raises:
        DataError: bad fractions, or ``groups`` of the wrong length.
    """
    fractions = check_fractions(fractions)
    names = list(fractions)
    n = len(labels)
    rng = np.random.Generator(np.random.PCG64(seed))
    assignment = np.full(n, -1, dtype=np.int64)
    keys = [labels[i] if stratified else None for i in range(n)]
    # Sorting the class keys by repr gives one order for mixed or None labels, independent of hash seeds.
    for key in sorted(set(keys), key=repr):
        members = np.array([i for i in range(n) if keys[i] == key], dtype=np.int64)
        members = members[rng.permutation(len(members))]
        start = 0
        for split, count in enumerate(_allocate(len(members), [fractions[s] for s in names])):
            assignment[members[start:start + count]] = split
            start += count
    if groups is not None:
        if len(groups) != n:
            raise DataError(f"groups has {len(groups)} entries for {n} examples")
        first: dict[Hashable, int] = {}
        for i, group in enumerate(groups):
            assignment[i] = assignment[first.setdefault(group, i)]
    return {name: np.flatnonzero(assignment == s).astype(np.int64) for s, name in enumerate(names)}
