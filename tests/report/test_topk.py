"""The bounded heap behind the example lists: exact, bounded, and the same however the file is chunked."""

import numpy as np
import pytest

from tfsent.reporting.topk import TopK


@pytest.mark.parametrize("largest", [True, False])
def test_keeps_the_n_best_with_earlier_rows_winning_ties(largest):
    scores = np.array([0.5, 0.9, 0.1, 0.9, np.nan, 0.3, 0.1, 0.7])
    expected = sorted(range(len(scores)), key=lambda i: ((-scores[i] if largest else scores[i]), i))
    expected = [i for i in expected if not np.isnan(scores[i])][:3]
    for size in (1, 2, 3, 8):
        top = TopK(3, largest=largest)
        for lo in range(0, len(scores), size):
            part = scores[lo:lo + size]
            top.offer(part, np.arange(lo, lo + len(part)), lambda i, lo=lo: lo + i)
            assert len(top) <= 3
        assert [p for _, p in top.items()] == expected
        assert [s for s, _ in top.items()] == [scores[i] for i in expected]


def test_builds_payloads_only_for_rows_it_keeps():
    built = []
    top = TopK(2)
    top.offer(np.arange(1000.0), np.arange(1000), lambda i: built.append(i) or i)
    assert [p for _, p in top.items()] == [999, 998] and len(built) == 2
    empty = TopK(0)
    empty.offer(np.arange(5.0), np.arange(5), lambda i: i)
    assert empty.items() == []
