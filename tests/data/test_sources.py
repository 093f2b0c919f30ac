"""Reading raw sources: PhraseBank counts, every format, and bad input named by file and line."""

import collections
import json

import pytest

from tfsent.data.errors import DataError
from tfsent.data.sources import iter_records, read_records

# data/financial_phrasebank/SOURCE.md: lines, neutral, positive, negative.
PHRASEBANK = {"50Agree": (4846, 2879, 1363, 604), "66Agree": (4217, 2535, 1168, 514),
              "75Agree": (3453, 2146, 887, 420), "AllAgree": (2264, 1391, 570, 303)}


@pytest.mark.parametrize("level", sorted(PHRASEBANK))
def test_phrasebank_counts_match_source_table(phrasebank_dir, level):
    records = read_records(phrasebank_dir / f"Sentences_{level}.txt", "phrasebank")
    lines, neutral, positive, negative = PHRASEBANK[level]
    assert len(records) == lines
    assert collections.Counter(r.label for r in records) == {"neutral": neutral, "positive": positive,
                                                             "negative": negative}
    assert [r.line for r in records] == list(range(1, lines + 1))
    assert all(r.text == r.text.strip() and "\r" not in r.text for r in records)


def test_phrasebank_keeps_duplicates_and_decodes_latin1(phrasebank_dir):
    records = read_records(phrasebank_dir / "Sentences_50Agree.txt", "phrasebank")
    assert len(records) - len({r.text for r in records}) == 8
    assert records[0].text.startswith("According to Gran , the company has no plans")
    assert records[0].label == "neutral"


def test_phrasebank_splits_on_last_at(tmp_path):
    path = tmp_path / "pb.txt"
    path.write_bytes(b"Mail ir@example.com for caf\xe9 news .@positive\r\nFlat .@neutral\r\n")
    records = read_records(path, "phrasebank")
    assert [(r.text, r.label, r.line) for r in records] == [
        ("Mail ir@example.com for caf\u00e9 news .", "positive", 1), ("Flat .", "neutral", 2)]


def test_csv_jsonl_parquet_text(tmp_path):
    csv_path = tmp_path / "a.csv"
    csv_path.write_text('id,text,label\nx1,"Up, a lot",pos\nx2,"two\nlines",neg\n', encoding="utf-8")
    got = read_records(csv_path, "csv", id_column="id")
    assert [(r.text, r.label, r.line, r.source_id) for r in got] == [
        ("Up, a lot", "pos", 2, "x1"), ("two\nlines", "neg", 4, "x2")]

    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(json.dumps({"sentence": "Good", "y": 1}) + "\n" + json.dumps({"sentence": "Bad", "y": 0}) + "\n")
    got = read_records(jsonl, "jsonl", text_column="sentence", label_column="y")
    assert [(r.text, r.label, r.line) for r in got] == [("Good", "1", 1), ("Bad", "0", 2)]

    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": ["a b", "c"], "label": ["neg", "pos"]}), tmp_path / "a.parquet")
    got = read_records(tmp_path / "a.parquet", "parquet")
    assert [(r.text, r.label, r.line) for r in got] == [("a b", "neg", 1), ("c", "pos", 2)]

    text = tmp_path / "a.txt"
    text.write_text("first line\nsecond line\n")
    got = read_records(text, "text")
    assert [(r.text, r.label, r.line) for r in got] == [("first line", None, 1), ("second line", None, 2)]


BAD = [
    # (format, bytes, expected fragment after the file name, kwargs)
    ("phrasebank", b"ok .@neutral\r\nno label here\r\n", ":2: malformed line", {}),
    ("phrasebank", b"ok .@neutral\r\n  @positive\r\n", ":2: empty sentence", {}),
    ("phrasebank", b"ok .@neutral\r\nbad .@bullish\r\n", ":2: unknown label 'bullish'", {}),
    ("phrasebank", b"ok .@neutral\r\nnul \x00 .@neutral\r\n", ":2: NUL byte", {}),
    ("phrasebank", b"", ": no examples (empty file)", {}),
    ("phrasebank", b"\r\n \r\n", ": no examples (empty file)", {}),
    ("csv", b"text,label\ngood,pos\ncaf\xe9,neg\n", ":3: cannot decode byte b'\\xe9' at byte offset 23 as utf-8", {}),
    ("csv", b"sentence,label\ngood,pos\n", ": header has no column 'text' (text_column)", {}),
    ("csv", b"text,label\ngood,pos\n   ,neg\n", ":3: empty text in column 'text'", {}),
    ("csv", b"text,label\ngood,pos\nbad,\n", ":3: empty label in column 'label'", {}),
    ("csv", b"text,label\ngood,pos\nbad,neg,extra\n", ":3: 3 fields, header has 2", {}),
    ("jsonl", b'{"text": "a", "label": "pos"}\n{"text": "b"\n', ":2: malformed JSON", {}),
    ("jsonl", b'{"text": "a", "label": "pos"}\n{"text": "b"}\n', ": line 2 has no column 'label'", {}),
    ("jsonl", b'{"text": "a", "label": "pos"}\n{"text": "b", "label": "meh"}\n', ":2: unknown label 'meh'",
     {"label_names": ["neg", "pos"]}),
    ("text", b"one\n\nthree\n", ":2: empty line", {}),
    # issue 16: an unclosed quote merged the rest of the file into one row; duplicate columns let the last one win
    ("csv", b'id,text\nx1,"Profit rose.\nx2,Sales fell.\nx3,Outlook cut.\n',
     ":2: a quoted field starting on line 2 is never closed", {"label_column": None}),
    ("csv", b"text,label,text\ngood,pos,bad\n", ":1: duplicate column name(s) 'text' in the header", {}),
    # issue 16: texts that draw nothing (zero-width space, BOM, joiners, control characters) are empty texts
    ("text", "one\n\u200b\u200b\nthree\n".encode(), ":2: empty line (only invisible characters: U+200B)", {}),
    ("csv", "text,label\ngood,pos\n\ufeff \x01\x7f,neg\n".encode(),
     ":3: empty text in column 'text' (only invisible characters: U+FEFF U+0020 U+0001 U+007F)", {}),
    ("jsonl", b'{"text": "a", "label": "pos"}\n{"text": "\\u200d\\u2060\\u00ad", "label": "pos"}\n',
     ":2: empty text in column 'text' (only invisible characters: U+200D U+2060 U+00AD)", {}),
    ("phrasebank", "ok .@neutral\r\n\u200b@positive\r\n".encode("utf-8"),
     ":2: empty sentence (only invisible characters: U+200B)", {"encoding": "utf-8"}),
]


@pytest.mark.parametrize("fmt,raw,expected,kwargs", BAD, ids=[b[2].split(":")[-1].strip()[:30] for b in BAD])
def test_bad_input_names_file_and_line(tmp_path, fmt, raw, expected, kwargs):
    path = tmp_path / f"bad.{fmt}"
    path.write_bytes(raw)
    with pytest.raises(DataError) as info:
        read_records(path, fmt, **kwargs)
    assert str(info.value).startswith(f"{path}{expected}")


def test_invisible_characters_inside_a_text_are_kept(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("x\u200by zero\ufeffwidth\n\u200bProfit rose.\n", encoding="utf-8")
    assert [r.text for r in read_records(path, "text")] == ["x\u200by zero\ufeffwidth", "\u200bProfit rose."]


def test_an_invisible_parquet_text_names_its_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": ["fine", "\u200b\u200c"]}), tmp_path / "a.parquet")
    with pytest.raises(DataError, match=r"a\.parquet:2: empty text in column 'text' \(only invisible"):
        read_records(tmp_path / "a.parquet", "parquet", label_column=None)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(DataError, match=r"nope\.txt: source file not found"):
        read_records(tmp_path / "nope.txt", "phrasebank")
    with pytest.raises(DataError, match="unknown source format 'xml'"):
        read_records(tmp_path / "nope.txt", "xml")


def test_streaming_yields_every_record_before_the_bad_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\nbad \xff\nfour\n")
    stream = iter_records(path, "text")
    assert [next(stream).text, next(stream).text] == ["one", "two"]
    with pytest.raises(DataError, match=r"in\.txt:3: cannot decode byte b'\\xff' at byte offset 12"):
        next(stream)


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_text_or_column(tmp_path):
    (tmp_path / "in.csv").write_bytes(b"\xef\xbb\xbftext,label\ngood,pos\n")
    (tmp_path / "in.txt").write_bytes(b"\xef\xbb\xbffirst\nsecond\n")
    assert [r.text for r in read_records(tmp_path / "in.csv", "csv")] == ["good"]
    assert [r.text for r in read_records(tmp_path / "in.txt", "text")] == ["first", "second"]
