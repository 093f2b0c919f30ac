"""Does PyTorch transformers open a tfsent model folder, and does it score as tfsent does? (issue 13)

``.venv/bin/python bench/torch_open.py`` saves a MiniLM-L6 classifier with ``save_pretrained`` (real weights, a
seeded random head made large so that the probabilities are far from uniform), scores the demo sentences with
``tfsent.predict``, then loads the folder with ``AutoModelForSequenceClassification.from_pretrained`` in
``bench/.venv-torch`` (transformers 4.x) and, with ``--v5``, in ``bench/.venv-torch5`` (transformers 5.x), and prints
the largest probability difference and whether every label agrees. The venvs are created on first use, as
``bench/run.py`` does; torch never enters tfsent's venv.

Inside a torch venv the same file runs as ``python bench/torch_open.py --torch-side JOB.json``: it loads the folder
with PyTorch transformers and prints JSON (versions, loading report, probabilities).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo" / "sentences.txt"
TORCH5_VENV = REPO / "bench" / ".venv-torch5"
TORCH5_REQUIREMENTS = ["torch==2.13.0", "transformers>=5,<6"]
TOLERANCE = 1e-4


def torch_side(job_path: str) -> None:
    """Runs in a torch venv: load the folder with PyTorch transformers and print what it computes."""
    import torch
    import transformers

    job = json.loads(pathlib.Path(job_path).read_text())
    tokenizer = transformers.AutoTokenizer.from_pretrained(job["model_dir"])
    auto = getattr(transformers, job["auto_class"])
    model, info = auto.from_pretrained(job["model_dir"], output_loading_info=True)
    model.eval()
    with torch.inference_mode():
        if job["auto_class"] == "AutoModelForMaskedLM":
            ids = torch.tensor(job["input_ids"])
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        else:
            enc = tokenizer(job["texts"], padding=True, truncation=True, max_length=job["max_length"],
                            return_tensors="pt")
            out = model(**enc).logits.softmax(-1)
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "architecture": type(model).__name__,
                      "loading": {k: sorted(map(str, v)) for k, v in info.items()}, "values": out.tolist()}))


def run_torch_side(python: pathlib.Path, job: dict) -> dict:
    """Run :func:`torch_side` in the torch venv of ``python`` and return its JSON.

    Raises:
        RuntimeError: the subprocess failed (its stderr included).
    """
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        # tfsent's venv must not leak into torch's; no hub either: the folder is local.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        done = subprocess.run([str(python), str(pathlib.Path(__file__).resolve()), "--torch-side", f.name],
                              capture_output=True, text=True, env=env)
    finally:
        os.unlink(f.name)
    if done.returncode:
        raise RuntimeError(f"{python} could not open {job['model_dir']} ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def classifier_job(model_dir: pathlib.Path, texts: list[str], max_length: int) -> dict:
    """The job that scores ``texts`` with ``AutoModelForSequenceClassification``."""
    return {"model_dir": str(model_dir), "auto_class": "AutoModelForSequenceClassification", "texts": texts,
            "max_length": max_length}


def tfsent_probs(model_dir: pathlib.Path, texts: list[str], scratch: pathlib.Path):
    """``tfsent.predict`` on ``texts`` (one CPU replica): labels and probabilities in label-id order."""
    import pandas as pd

    from tfsent.models.loading import read_config
    from tfsent.predict import predict

    names = [read_config(model_dir).id2label[i] for i in range(len(read_config(model_dir).id2label))]
    (scratch / "texts.txt").write_text("\n".join(texts) + "\n")
    predict(model_dir, scratch / "texts.txt", scratch / "scores.csv", strategy="cpu", progress=False)
    frame = pd.read_csv(scratch / "scores.csv")
    return frame["label_id"].to_numpy(), frame[[f"prob_{n}" for n in names]].to_numpy()


def save_minilm_classifier(model_dir: pathlib.Path) -> None:
    """MiniLM-L6 with a seeded, large random head (its scores then spread far from uniform), saved with its
    tokenizer."""
    import numpy as np
    import tf_keras

    from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer

    tf_keras.utils.set_random_seed(0)
    model = build_classifier(ClassifierSpec(source="minilm_l6", label_names=["negative", "neutral", "positive"]))
    kernel = model.hf_model.classifier.kernel
    kernel.assign(np.random.default_rng(0).normal(0, 0.5, kernel.shape).astype(np.float32))
    model.save_pretrained(model_dir, tokenizer=load_tokenizer("minilm_l6"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch-side", metavar="JOB", help=argparse.SUPPRESS)
    p.add_argument("--v5", action="store_true", help="also check transformers 5.x in bench/.venv-torch5")
    args = p.parse_args(argv)
    if args.torch_side:
        torch_side(args.torch_side)
        return 0

    sys.path.insert(0, str(REPO))
    import numpy as np

    import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
    from bench.run import TORCH_REQUIREMENTS, TORCH_VENV, ensure_torch_venv, log

    venvs = [("transformers 4", TORCH_VENV, TORCH_REQUIREMENTS)]
    if args.v5:
        venvs.append(("transformers 5", TORCH5_VENV, TORCH5_REQUIREMENTS))

    texts = [t for t in DEMO.read_text().splitlines() if t.strip()]
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        model_dir = scratch / "model"
        save_minilm_classifier(model_dir)
        labels, probs = tfsent_probs(model_dir, texts, scratch)
        log(f"tfsent.predict on {len(texts)} demo sentences: labels {labels.tolist()}")
        for name, venv, requirements in venvs:
            python = ensure_torch_venv(venv, requirements)
            got = run_torch_side(python, classifier_job(model_dir, texts, 512))
            torch_probs = np.asarray(got["values"])
            diff = float(np.abs(torch_probs - probs).max())
            same = bool((torch_probs.argmax(-1) == labels).all())
            ok = diff <= TOLERANCE and same and not got["loading"]["missing_keys"]
            failed |= not ok
            print(f"{name}: torch {got['torch']}, transformers {got['transformers']}, {got['architecture']}: "
                  f"max |p_torch - p_tfsent| = {diff:.2e} over {probs.size} probabilities, labels "
                  f"{'all equal' if same else 'DIFFER'}, missing keys {got['loading']['missing_keys']}, "
                  f"unexpected {got['loading']['unexpected_keys']} -> {'ok' if ok else 'FAIL'} (tolerance {TOLERANCE})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
