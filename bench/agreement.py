"""bf16 against fp32 labels on Financial PhraseBank, with a trained classifier (issue 26, item 2).

A random classification head puts many rows near a tie, where any rounding flips the label: agreement measured
with it says nothing about a real model. So this section fine-tunes MiniLM-L6 as ``make demo`` does (PhraseBank
AllAgree plus, 2 epochs; cached in ``bench/.cache/agreement-model`` and reused) and predicts every 50Agree sentence
on each execution path, packed as ``packing: auto`` runs it. Reported: the share of rows whose label equals XLA
fp32's (the target is 99.5% for the bf16 path ``auto`` may choose), the largest probability difference, and packed
against padded fp32 (exactness of packing on a trained model).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Sequence

import numpy as np

from bench import table

REPO = pathlib.Path(__file__).resolve().parents[1]
MODEL_RUN = REPO / "bench" / ".cache" / "agreement-model"
TRAIN = ["+experiment=finbert_tone", "data=phrasebank_allagree_plus", "trainer.epochs=2", "overwrite=true"]
MIN_AGREEMENT = 0.995


@dataclasses.dataclass
class PathLabels:
    name: str
    packing: bool | str
    labels: np.ndarray
    probs: np.ndarray


def trained_classifier(log: Callable[[str], None] | None = None, run_dir: pathlib.Path = MODEL_RUN) -> pathlib.Path:
    """The fine-tuned MiniLM-L6 folder, trained once (``python -m tfsent.train``, as ``make demo``) and reused."""
    model = run_dir / "model"
    if (model / "config.json").is_file():
        return model
    if log:
        log(f"agreement: fine-tuning MiniLM-L6 into {run_dir} (once; reused by later runs)")
    cmd = [sys.executable, "-m", "tfsent.train", *TRAIN, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return model


def path_labels(ckpt: pathlib.Path, strategy, texts: Sequence[str], batch_size: int, buckets: Sequence[int]
                ) -> list[PathLabels]:
    """Labels and probabilities of every path (packed as ``auto`` packs), and of fp32 XLA with packing off."""
    from bench import isa
    from tfsent.inference.driver import load_with_options
    from tfsent.inference.engine import predict_bucketed
    from tfsent.inference.options import PredictOptions
    from tfsent.inference.tokens import tokenize_texts
    from tfsent.runtime import execution as ex
    from tfsent.runtime.precision import set_policy

    options = PredictOptions(strategy="cpu", global_batch_size=batch_size, buckets=tuple(buckets), progress=False)
    out = []
    runs = ((ex.XLA_FP32, "auto"), (ex.XLA_FP32, False), (ex.GRAPH_FP32, "auto"), (ex.GRAPH_BF16, "auto"),
            (ex.XLA_BF16, "auto"))
    keep = isa.runnable([path for path, _ in runs])
    for path, packing in [(path, packing) for path, packing in runs if path in keep]:
        predictor = load_with_options(ckpt, strategy, 1, dataclasses.replace(
            options, precision=path.precision, jit_compile=path.jit_compile))
        tokens = tokenize_texts(predictor.tokenizer, texts, buckets[-1], features=predictor.features)
        res = predict_bucketed(predictor.model, strategy, tokens, buckets=buckets, global_batch_size=batch_size,
                               pad_values=predictor.pad_values, packing=predictor.packing(packing))
        out.append(PathLabels(path.name, packing, np.asarray(res["label_id"]), np.asarray(res["probs"])))
        del predictor
    set_policy("float32", strategy)
    out.extend(_litert_labels(ckpt, texts, batch_size, buckets, options))
    return out


def _litert_labels(ckpt: pathlib.Path, texts: Sequence[str], batch_size: int, buckets: Sequence[int], options
                   ) -> list[PathLabels]:
    """LiteRT fp32 (the CPU default) and int8 (``precision=int8``), converted into one cache and scored as the
    driver scores."""
    import tempfile

    from bench.compare import _litert_predictor
    from bench.inference import bucketed
    from tfsent.inference.tokens import tokenize_texts

    out = []
    with tempfile.TemporaryDirectory(prefix="tfsent-agreement-litert-") as tmp:
        for precision in ("float32", "int8"):
            predictor = _litert_predictor(ckpt, dataclasses.replace(options, precision=precision), pathlib.Path(tmp))
            tokens = tokenize_texts(predictor.tokenizer, texts, buckets[-1], features=predictor.features)
            res = bucketed(predictor, None, tokens, batch_size, predictor.packing("auto"))
            name = "litert fp32" if precision == "float32" else "litert int8"
            out.append(PathLabels(name, "auto", np.asarray(res["label_id"]), np.asarray(res["probs"])))
    return out


def render(results: Sequence[PathLabels], rows: int, source: str) -> tuple[list[str], list[table.Target]]:
    """The section's markdown and its target (the best-agreeing bf16 path, which ``auto`` may choose, >= 99.5%)."""
    reference = results[0]
    lines = ["## 8. bf16 and int8 against fp32 labels (issues 26, 36)", "",
             f"MiniLM-L6 fine-tuned as `make demo` does ({source}), every one of the {rows:,} PhraseBank 50Agree "
             "sentences predicted on each path; the reference is XLA fp32, packed as `packing: auto` packs.", ""]
    body = []
    for r in results:
        same = int(np.sum(r.labels == reference.labels))
        body.append([f"{r.name}, packing {str(r.packing).lower()}", f"{same / len(r.labels):.2%}",
                     str(len(r.labels) - same), f"{np.max(np.abs(r.probs - reference.probs)):.2g}",
                     f"{np.mean(np.abs(r.probs - reference.probs)):.2g}"])
    lines += [table.markdown(["path", "labels equal to the reference", "rows that differ", "max |prob diff|",
                              "mean |prob diff|"], body), ""]
    bf16 = [r for r in results if r.name == "graph bf16"]
    targets = [table.Target("bf16 labels equal to fp32 (graph bf16, trained MiniLM-L6, PhraseBank 50Agree)",
                            float(np.mean(bf16[0].labels == reference.labels)), MIN_AGREEMENT)] if bf16 else []
    int8 = [r for r in results if r.name == "litert int8"]
    if int8:  # issue 36: an int8 path counts only at this agreement
        targets.append(table.Target("int8 labels equal to fp32 (litert int8, trained MiniLM-L6, PhraseBank 50Agree)",
                                    float(np.mean(int8[0].labels == reference.labels)), MIN_AGREEMENT))
    return lines, targets
