"""The run record beside a prediction output: the model's metadata as saved, the settings, the timing."""

import datetime
import json

from tfsent.inference.record import model_description, read_record, record_path, write_record


def test_record_holds_model_metadata_settings_and_timing(tmp_path):
    ckpt = tmp_path / "model"
    ckpt.mkdir()
    meta = {"arch": "bert", "label_names": ["negative", "neutral", "positive"],
            "source": {"hub_id": "org/finbert", "revision": "abc123"}}
    (ckpt / "tfsent_model.json").write_text(json.dumps(meta))
    started = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    path = write_record(tmp_path / "scores.csv", ckpt_path=ckpt, settings={"global_batch_size": 64},
                        summary={"rows": 3, "seconds": 1.5}, started=started)
    assert path == record_path(tmp_path / "scores.csv") == tmp_path / "scores.run.json"
    got = read_record(tmp_path / "scores.csv")
    assert got["model"] == {"checkpoint": str(ckpt.resolve()), **meta}
    assert got["settings"] == {"global_batch_size": 64} and got["summary"] == {"rows": 3, "seconds": 1.5}
    assert got["started"] == "2026-01-02T03:04:05+00:00" and got["finished"] >= got["started"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


def test_missing_or_damaged_records_read_as_none(tmp_path):
    assert read_record(tmp_path / "scores.csv") is None
    (tmp_path / "scores.run.json").write_text("[1, 2")
    assert read_record(tmp_path / "scores.csv") is None
    assert model_description(tmp_path / "nowhere") == {"checkpoint": str((tmp_path / "nowhere").resolve())}


def test_a_hub_id_is_recorded_as_given_with_its_revision(tmp_path):
    described = model_description("yiyanghkust/finbert-tone", revision="4921590d")
    assert described == {"checkpoint": "yiyanghkust/finbert-tone", "revision": "4921590d"}


def test_the_record_reads_every_kinds_metadata_file():
    from tfsent.inference.record import MODEL_FILES
    from tfsent.models import kinds

    assert MODEL_FILES == tuple(k.meta_file for k in kinds.KINDS.values())
