"""Input sources: formats from names, documents read one at a time, strictly; counts without tokenizing."""

import logging

import pandas as pd
import pytest

from tfsent.data.errors import DataError
from tfsent.inference.inputs import DocumentSource, TextSource, infer_format


def test_format_from_name_and_folder(tmp_path):
    assert [infer_format(tmp_path / n, "auto") for n in ("a.csv", "a.JSONL", "a.parquet", "a.txt")] == [
        "csv", "jsonl", "parquet", "text"]
    assert infer_format(tmp_path, None) == "documents"
    with pytest.raises(DataError, match=r"a.xlsx: cannot tell the input format"):
        infer_format(tmp_path / "a.xlsx", "auto")


def test_documents_any_suffix_case_skipped_entries_listed(tmp_path, caplog):
    (tmp_path / "b.TXT").write_text("Revenue rose.")
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfCosts fell.")
    (tmp_path / "notes.md").write_text("not a document")
    (tmp_path / "sub").mkdir()
    with caplog.at_level(logging.WARNING):
        source = DocumentSource(tmp_path)
    assert "skipped 2 entries that are not .txt files: notes.md, sub/" in caplog.text
    assert list(source.units()) == [("a", "Costs fell."), ("b", "Revenue rose.")] and source.count() == 2


def test_documents_with_nul_bytes_are_an_error_naming_file_and_line(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"fine\nbad \x00 line\n")
    with pytest.raises(DataError, match=r"a.txt:2: NUL byte at byte offset 9"):
        list(DocumentSource(tmp_path).units())


def test_counts(tmp_path):
    (tmp_path / "in.txt").write_text("a\nb\nc\n")
    pd.DataFrame({"text": ["x", "y"]}).to_parquet(tmp_path / "in.parquet")
    assert TextSource(tmp_path / "in.txt", "text").count() == 3
    assert TextSource(tmp_path / "in.parquet", "parquet").count() == 2
