"""Model card: Hugging Face front matter and the facts of the run, read from the folder and from metrics.json."""

import json

import pytest
import tf_keras
import yaml

from tfsent.models import ClassifierSpec, build_classifier
from tfsent.models.card import KNOWN_DATASETS, render_card, write_model_card
from tfsent.models.loading import CheckpointError

LABELS = ["negative", "neutral", "positive"]


def split_card(text: str) -> tuple[dict, str]:
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tf_keras.utils.set_random_seed(0)
    model = build_classifier(ClassifierSpec(
        config=dict(arch="bert", vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32), label_names=LABELS, max_seq_length=32))
    path = tmp_path_factory.mktemp("card") / "model"
    model.save_pretrained(path)
    return path


def test_classifier_card_from_folder_and_metrics_json(model_dir, tmp_path):
    meta = json.loads((model_dir / "tfsent_model.json").read_text())
    (model_dir / "tfsent_model.json").write_text(json.dumps({**meta, "source": "minilm_l6"}))
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"test_accuracy": 0.851234, "test_macro_f1": 0.8361, "val_loss": 0.41,
                                   "train_seconds": 12.5, "model_dir": str(model_dir)}))
    command = "python -m tfsent.train +experiment=finbert_tone"
    path = write_model_card(model_dir, metrics=metrics, command=command, dataset="phrasebank")

    assert path == model_dir / "README.md"
    front, body = split_card(path.read_text())
    assert front == {"license": "cc-by-nc-sa-3.0", "base_model": "sentence-transformers/all-MiniLM-L6-v2",
                     "library_name": "transformers", "pipeline_tag": "text-classification",
                     "tags": ["tfsent", "tensorflow", "finance", "sentiment"],
                     "datasets": ["takala/financial_phrasebank"], "metrics": ["f1", "accuracy", "loss"]}
    assert "- Labels (id: name): 0: negative, 1: neutral, 2: positive" in body
    assert "- Training data: Financial PhraseBank (Malo et al." in body
    assert "- Training data license: cc-by-nc-sa-3.0. Non-commercial use only" in body
    assert "| test_accuracy | 0.8512 |" in body and "| test_macro_f1 | 0.8361 |" in body
    assert "train_seconds" not in body  # only evaluation results are listed
    assert f"```bash\n{command}\n```" in body
    assert not list(model_dir.glob(".tmp-*"))


def test_masked_lm_card_has_no_base_model_and_says_what_is_missing():
    config = {"architectures": ["RobertaForMaskedLM"], "model_type": "roberta", "num_hidden_layers": 3,
              "hidden_size": 300}
    front, body = split_card(render_card(config, base_model=None, dataset=KNOWN_DATASETS["transcripts"],
                                         metrics={"test_perplexity": 41.5}, command=None, license=None))
    assert front == {"license": "other", "library_name": "transformers", "pipeline_tag": "fill-mask",
                     "tags": ["tfsent", "tensorflow", "finance", "masked-lm"], "metrics": ["perplexity"]}
    assert "Base model: none (trained from scratch)" in body and "Labels" not in body
    assert "Command not recorded." in body and "| test_perplexity | 41.5000 |" in body


def test_card_errors_name_the_file_or_key(model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"dataset 'imdb' is not one of \['phrasebank', 'squad', 'transcripts'\]"):
        write_model_card(model_dir, dataset="imdb")
    with pytest.raises(CheckpointError, match=r"nothing/config.json: missing; not a saved model folder"):
        write_model_card(tmp_path / "nothing")
    with pytest.raises(CheckpointError, match=r"absent.json: missing"):
        write_model_card(model_dir, metrics=tmp_path / "absent.json")


def test_question_answering_card_says_what_the_model_does(tmp_path):
    from tfsent.models.question_answering import QuestionAnsweringSpec, build_question_answering

    tf_keras.utils.set_random_seed(0)
    model = build_question_answering(QuestionAnsweringSpec(
        config=dict(arch="bert", vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32), max_seq_length=32))
    model.save_pretrained(tmp_path / "qa")
    path = write_model_card(tmp_path / "qa", metrics={"test_exact_match": 61.5, "test_f1": 70.25}, dataset="squad")
    front, body = split_card(path.read_text())
    assert front["pipeline_tag"] == "question-answering" and "question-answering" in front["tags"]
    assert front["license"] == "cc-by-sa-4.0" and front["datasets"] == ["rajpurkar/squad"]
    assert front["metrics"] == ["f1", "exact_match"]
    assert "extractive question-answering model (BertForQuestionAnswering" in body and "Labels" not in body
    assert "AutoModelForQuestionAnswering" in body and "input=questions.jsonl output=answers.csv" in body
    assert "| test_exact_match | 61.5000 |" in body
