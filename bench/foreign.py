"""A BERT-base-shaped classifier folder that PyTorch transformers wrote, against the same model as tfsent saved it.

The same random BERT-base classifier (FinBERT's shape, 3 labels) is scored from three folders, each round in fresh
processes (``python -m tfsent.predict``, file to file, as a user runs it):

- ``tfsent``: the folder tfsent's ``save_pretrained`` writes (``tf_model.h5``, ``model.safetensors``,
  ``tfsent_model.json``);
- ``pt-safetensors``: what PyTorch transformers' ``save_pretrained`` writes today (``config.json`` with
  ``architectures``/``id2label``, PyTorch ``model.safetensors``, tokenizer files; no tfsent metadata);
- ``pt-legacy-bin``: how 2019-2020 hub models such as FinBERT-tone ship (``pytorch_model.bin`` in torch's legacy
  layout, ``vocab.txt``), written by torch in ``bench/.venv-torch``.

Each mode's time is what the command reports for its work (loading the weights, compiling and predicting; the
interpreter's start left out), timed in interleaved rounds (``bench/rounds.py``); the last round's outputs are
compared row by row. Prints a markdown section for ``bench/RESULTS.md``::

    python bench/foreign.py --rows 1000             # the real run (idle machine)
    python bench/foreign.py --rows 64 --tiny        # smoke run (numbers meaningless)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `bench` and `tfsent` importable from the checkout

from bench import table  # noqa: E402
from bench.beam import _command, write_input  # noqa: E402
from bench.rounds import MIN_ROUNDS, Mode, run_rounds, speedup  # noqa: E402

LABELS = ["Neutral", "Positive", "Negative"]
BERT_BASE = dict(arch="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512)
_LEGACY = """
import sys, safetensors.torch, torch
state = safetensors.torch.load_file(sys.argv[1])
torch.save(state, sys.argv[2], _use_new_zipfile_serialization=False)
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1000, help="sentences scored per run")
    p.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"interleaved rounds (at least {MIN_ROUNDS})")
    p.add_argument("--batch", type=int, default=64, help="global_batch_size")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model instead of BERT-base (smoke runs)")
    p.add_argument("--out", help="also write the section to this file")
    return p.parse_args(argv)


def folders(work: pathlib.Path, tiny: bool) -> dict[str, pathlib.Path]:
    """The three folders of one random model: tfsent's, PyTorch safetensors, PyTorch legacy .bin."""
    import tfsent  # noqa: F401  (legacy Keras before TensorFlow loads)
    from bench.inference import BERT_TINY
    from bench.run import ensure_torch_venv
    from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer

    config = {**BERT_TINY, "max_position_embeddings": 512} if tiny else BERT_BASE
    own = build_classifier(ClassifierSpec(config=config, label_names=LABELS, max_seq_length=512)).save_pretrained(
        work / "tfsent", tokenizer=load_tokenizer("minilm_l6"))
    pt = work / "pt-safetensors"
    pt.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt"):
        shutil.copy(own / name, pt / name)
    legacy = work / "pt-legacy-bin"
    legacy.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(own / name, legacy / name)
    done = subprocess.run([str(ensure_torch_venv()), "-c", _LEGACY, str(own / "model.safetensors"),
                           str(legacy / "pytorch_model.bin")], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"writing the legacy .bin failed:\n{done.stderr[-3000:]}")
    assert json.loads((pt / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
    return {"tfsent": own, "pt-safetensors": pt, "pt-legacy-bin": legacy}


def compare(a_csv: pathlib.Path, b_csv: pathlib.Path) -> tuple[bool, float]:
    """Whether labels and row order are equal, and the largest probability difference."""
    import numpy as np
    import pandas as pd

    a, b = pd.read_csv(a_csv), pd.read_csv(b_csv)
    probs = [c for c in a.columns if c.startswith("prob_")]
    same = len(a) == len(b) and (a["row"] == b["row"]).all() and (a["label"] == b["label"]).all()
    return bool(same), float(np.abs(a[probs].to_numpy() - b[probs].to_numpy()).max())


def main(argv=None) -> int:
    args = parse_args(argv)
    from bench import machine

    desc = machine.describe()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tfsent-bench-foreign-") as tmp:
        work = pathlib.Path(tmp)
        paths = folders(work, args.tiny)
        source = work / "sentences.csv"
        write_input(source, args.rows)
        modes = []
        for name, folder in paths.items():
            run = _command("tfsent.predict", [f"ckpt_path={folder}", f"input={source}", "strategy=cpu",
                                              f"global_batch_size={args.batch}", "progress=false",
                                              f"output={work / (name + '.csv')}"], work).run
            modes.append(Mode(name, args.rows, run))
        series = run_rounds(modes, args.rounds, log=lambda line: print(line, file=sys.stderr, flush=True),
                            smoke=args.tiny)
        checks = {name: compare(work / "tfsent.csv", work / f"{name}.csv") for name in paths if name != "tfsent"}
    seconds = time.perf_counter() - start
    rows = [[name, str(s.rate), str(s.time),
             "1" if name == "tfsent" else str(speedup(s, series["tfsent"]))] for name, s in series.items()]
    text = "\n".join([
        "## A classifier folder PyTorch transformers wrote, against the same model saved by tfsent", "",
        f"`python bench/foreign.py --rows {args.rows}{' --tiny' if args.tiny else ''}` ({args.rounds} interleaved "
        f"rounds, {seconds / 60:.1f} min). Model: {'2-layer' if args.tiny else 'BERT-base'} random classifier, "
        f"3 labels; {args.rows} Financial PhraseBank sentences, CSV in and out; `python -m tfsent.predict` in fresh "
        f"processes, strategy cpu, global_batch_size {args.batch}, float32, XLA per strategy.", "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in desc.items()), "",
        table.markdown(["folder", "rows/s median (min-max)", "seconds median (min-max)",
                        "rows/s / tfsent folder, median of per-round ratios"], rows), "",
        "Outputs of the last round against the tfsent folder's: " + "; ".join(
            f"{name}: labels and order {'equal' if same else 'DIFFER'}, largest probability difference {diff:.2g}"
            for name, (same, diff) in checks.items()) + ".", "",
        "Times include reading the weights (a legacy `.bin` is unpickled by tfsent's restricted reader) and the "
        "compilations; the scoring itself runs the same engine whatever the folder.", ""])
    return table.publish(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
