"""A documents run's table aggregated chunk by chunk: net tone per document sorted, the sorted curve, extremes."""

import pytest

from tfsent.reporting.documents import DocumentStats
from tfsent.reporting.tables import DOCUMENTS, open_table

from helpers.predictions import document_table


@pytest.mark.parametrize("chunk_rows", [1, 2, 10])
def test_every_document_sorted_by_net_tone(tmp_path, chunk_rows):
    document_table().to_csv(tmp_path / "docs.csv", index=False)
    table = open_table(tmp_path / "docs.csv")
    assert table.kind == DOCUMENTS and table.labels == ("negative", "neutral", "positive")
    stats = DocumentStats(table, examples=2)
    for frame in table.chunks(chunk_rows):
        stats.add(frame)
    assert (stats.documents, stats.empty, stats.chunks) == (5, 1, 16)
    assert stats.counts.tolist() == [2, 0, 2]
    every = stats.every_document()
    assert [d.name for d in every] == ["c.txt", "b.txt", "a.txt", "d.txt", "empty.txt"]
    assert [d.tone for d in every[:4]] == pytest.approx([0.75, 0.35, -0.25, -0.55]) and every[4].tone is None
    assert stats.mean_tone() == pytest.approx((0.75 + 0.35 - 0.25 - 0.55) / 4)
    assert [d.name for _, d in stats.most_positive.items()] == ["c.txt", "b.txt"]
    assert [d.name for _, d in stats.most_negative.items()] == ["d.txt", "a.txt"]
    assert stats.tones().tolist() == pytest.approx([0.75, 0.35, -0.25, -0.55])
    share, tones = stats.sorted_curve()
    assert share.tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1]) and tones.tolist() == pytest.approx(stats.tones())


def test_many_documents_keep_their_tones_and_the_extremes_not_their_rows(tmp_path):
    tones = {f"doc{i:03d}": (i - 50) / 60 for i in range(100)}
    document_table(tones).to_parquet(tmp_path / "docs.parquet", index=False)
    table = open_table(tmp_path / "docs.parquet")
    stats = DocumentStats(table, examples=3, bars=60)
    for frame in table.chunks(7):
        stats.add(frame)
        assert stats._all is None or len(stats._all) <= 60
    assert stats.every_document() is None and len(stats.tones()) == 100
    share, tones = stats.sorted_curve(points=11)
    assert share.tolist() == pytest.approx([i / 99 for i in (0, 10, 20, 30, 40, 50, 59, 69, 79, 89, 99)])
    assert tones[0] == pytest.approx(49 / 60) and tones[-1] == pytest.approx(-50 / 60)
    assert all(a >= b for a, b in zip(tones, tones[1:]))
    assert [d.name for _, d in stats.most_positive.items()] == ["doc099.txt", "doc098.txt", "doc097.txt"]
    assert [d.name for _, d in stats.most_negative.items()] == ["doc000.txt", "doc001.txt", "doc002.txt"]
