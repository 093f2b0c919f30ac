"""Model card: the ``README.md`` of a saved model folder, in the Hugging Face convention.

YAML front matter (``license``, ``base_model``, ``tags``, ``datasets``, ``metrics``, ``pipeline_tag``,
``library_name``) for the hub and other tools, then prose a person reads: base model, labels, training data and its
license, the metrics of the run and the command that made it. What the folder itself says (labels, architecture,
where the weights came from) is read from its files; what only the training run knows (data, metrics, command) is
passed in, so the training entry point calls :func:`write_model_card` once ``metrics.json`` exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, Sequence

import yaml

from tfsent.models.loading import CONFIG_FILE, CheckpointError
from tfsent.runtime import atomic

CARD_FILE = "README.md"

# Packaged checkpoint name -> the hub repository its weights come from (for `base_model`).
PACKAGED_BASE_MODELS = {"minilm_l6": "sentence-transformers/all-MiniLM-L6-v2"}


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """What a model was trained on, as the card states it.

    Attributes:
        name: a human-readable name.
        license: SPDX-style id as the hub spells it (``cc-by-nc-sa-3.0``), or a short phrase.
        hub_id: the dataset's Hugging Face id for the ``datasets`` front-matter key, if it has one.
        citation: where it comes from (paper or page).
        note: anything a user must know (use restrictions).
    """

    name: str
    license: str
    hub_id: str | None = None
    citation: str = ""
    note: str = ""


KNOWN_DATASETS = {
    "phrasebank": TrainingData(
        name="Financial PhraseBank", license="cc-by-nc-sa-3.0", hub_id="takala/financial_phrasebank",
        citation="Malo et al., Good debt or bad debt: Detecting semantic orientations in economic texts, JASIST 2014",
        note="Non-commercial use only (CC BY-NC-SA 3.0); ask the authors for a commercial license."),
    "squad": TrainingData(
        name="SQuAD v1.1 (the first 11 training articles, shipped in data/squad)", license="cc-by-sa-4.0",
        hub_id="rajpurkar/squad",
        citation="Rajpurkar et al., SQuAD: 100,000+ Questions for Machine Comprehension of Text, EMNLP 2016"),
    "transcripts": TrainingData(
        name="ECTSum earnings-call transcripts", license="other",
        citation="Mukherjee et al., ECTSum, EMNLP 2022",
        note="Public earnings-call text whose copyright may lie with the companies or the site it was collected "
             "from; the ECTSum repository is GPL-3.0. Do not redistribute the model as a product."),
}

_METRIC_IDS = (("f1", "f1"), ("exact_match", "exact_match"), ("perplexity", "perplexity"), ("accuracy", "accuracy"),
               ("loss", "loss"))
# What a model is, by its transformers class suffix: (the card's words, pipeline tag, tags, AutoModel class, the
# predict line's input and output).
_HEADS = {
    "ForMaskedLM": ("masked language model", "fill-mask", ["masked-lm"], "AutoModelForMaskedLM",
                    "input=held_out.txt output=mlm_eval.csv"),
    "ForQuestionAnswering": ("extractive question-answering model", "question-answering",
                             ["question-answering", "squad"], "AutoModelForQuestionAnswering",
                             "input=questions.jsonl output=answers.csv"),
    "ForSequenceClassification": ("sequence classifier", "text-classification", ["sentiment"],
                                  "AutoModelForSequenceClassification", "input=texts.csv output=scores.csv"),
}


def _read_json(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; not a saved model folder") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e


def _base_model(model_dir: pathlib.Path) -> str | None:
    # A classifier's or a QA model's metadata records where it started; a masked LM is trained from scratch.
    meta_path = next((model_dir / name for name in ("tfsent_model.json", "tfsent_qa.json")
                      if (model_dir / name).is_file()), None)
    if meta_path is None:
        return None
    source = _read_json(meta_path).get("source")
    return PACKAGED_BASE_MODELS.get(source, source) if source else None


def _metrics(metrics: Mapping[str, float] | str | os.PathLike | None) -> dict[str, float]:
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        metrics = _read_json(pathlib.Path(metrics))
    return {k: float(v) for k, v in sorted(metrics.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k.startswith(("test_", "val_"))}


def _metric_ids(names: Sequence[str]) -> list[str]:
    found = {metric for name in names for key, metric in _METRIC_IDS if key in name}
    return [metric for _, metric in _METRIC_IDS if metric in found]


def _is_hub_id(source: str) -> bool:
    return source.count("/") == 1 and not pathlib.Path(source).exists() and not source.startswith((".", "/", "~"))


def render_card(config: Mapping, *, base_model: str | None, dataset: TrainingData | None,
                metrics: Mapping[str, float], command: str | None, license: str | None,
                tags: Sequence[str] = (), title: str = "tfsent model") -> str:
    """The card's text for a model with transformers ``config`` (a ``config.json`` mapping).

    Args:
        config: the model's ``config.json`` as a mapping.
        base_model: the hub id or path the weights started from; None for a model trained from scratch.
        dataset: the training data.
        metrics: scalar results (``test_*``, ``val_*``).
        command: the command line that trained the model.
        license: the model's license; defaults to the training data's (its terms bind the weights too).
        tags: extra hub tags.
        title: the card's heading.

    Returns:
        Markdown with YAML front matter.
    """
    architecture = (config.get("architectures") or ["?"])[0]
    suffix = next((k for k in _HEADS if architecture.endswith(k)), "ForSequenceClassification")
    what, pipeline_tag, kind_tags, auto, io = _HEADS[suffix]
    labels = [config["id2label"][k] for k in sorted(config.get("id2label", {}), key=int)] \
        if suffix == "ForSequenceClassification" else []
    license = license or (dataset.license if dataset else None) or "other"
    front = {"license": license}
    if base_model and _is_hub_id(base_model):
        front["base_model"] = base_model
    front.update(library_name="transformers", pipeline_tag=pipeline_tag,
                 tags=["tfsent", "tensorflow", "finance", *kind_tags, *tags])
    if dataset and dataset.hub_id:
        front["datasets"] = [dataset.hub_id]
    if metrics:
        front["metrics"] = _metric_ids(list(metrics))

    lines = [f"# {title}", "",
             f"A {config.get('model_type', '?')} {what} "
             f"({architecture}, {config.get('num_hidden_layers', '?')} layers, hidden size "
             f"{config.get('hidden_size', '?')}) trained with tfsent. The folder "
             "holds `model.safetensors` (PyTorch names and layout: `AutoModel*.from_pretrained(<folder>)`) and "
             "`tf_model.h5` (TensorFlow: `TFAutoModel*.from_pretrained(<folder>, use_safetensors=False)`).", "",
             f"- Base model: {f'`{base_model}`' if base_model else 'none (trained from scratch)'}"]
    if labels:
        lines.append(f"- Labels (id: name): {', '.join(f'{i}: {n}' for i, n in enumerate(labels))}")
    if dataset:
        lines += [f"- Training data: {dataset.name}" + (f" ({dataset.citation})" if dataset.citation else ""),
                  f"- Training data license: {dataset.license}" + (f". {dataset.note}" if dataset.note else "")]
    else:
        lines.append("- Training data: not recorded")
    lines += ["", "## Results", ""]
    if metrics:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items()]
    else:
        lines.append("No metrics recorded.")
    lines += ["", "## Use", "", f"```bash\npython -m tfsent.predict ckpt_path=<this folder> {io}\n```", "",
              f"With PyTorch: `transformers.{auto}.from_pretrained(\"<this folder>\")`."]
    lines += ["", "## How it was made", "", f"```bash\n{command}\n```" if command else "Command not recorded.", ""]
    return "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n" + "\n".join(lines)


def write_model_card(model_dir: str | os.PathLike, *, metrics: Mapping[str, float] | str | os.PathLike | None = None,
                     command: str | None = None, dataset: TrainingData | str | None = None,
                     base_model: str | None = None, license: str | None = None, tags: Sequence[str] = (),
                     title: str | None = None) -> pathlib.Path:
    """Write ``model_dir/README.md`` atomically, for a folder written by a tfsent ``save_pretrained``.

    Args:
        model_dir: the saved model folder (``config.json`` and weights).
        metrics: the run's results, as a mapping or the path of its ``metrics.json``; ``test_*`` and ``val_*``
            scalars are listed.
        command: the command line that trained the model (e.g. ``python -m tfsent.train +experiment=...``).
        dataset: the training data, or a key of :data:`KNOWN_DATASETS` (``phrasebank``, ``transcripts``).
        base_model: overrides the source recorded in ``tfsent_model.json`` (packaged names map to hub ids).
        license: the model's license (default: the training data's).
        tags: extra hub tags.
        title: the heading (default: the folder's name).

    Returns:
        The card's path.

    Raises:
        CheckpointError: ``config.json`` (or ``metrics``' file) is missing or unreadable.
        ValueError: an unknown dataset key.
    """
    model_dir = pathlib.Path(model_dir)
    if isinstance(dataset, str):
        if dataset not in KNOWN_DATASETS:
            raise ValueError(f"dataset {dataset!r} is not one of {sorted(KNOWN_DATASETS)}; pass a TrainingData")
        dataset = KNOWN_DATASETS[dataset]
    text = render_card(_read_json(model_dir / CONFIG_FILE), base_model=base_model or _base_model(model_dir),
                       dataset=dataset, metrics=_metrics(metrics), command=command, license=license, tags=tags,
                       title=title or model_dir.name)
    path = model_dir / CARD_FILE
    atomic.write_text(path, text)
    return path
