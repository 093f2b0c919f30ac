"""Question answering: tfsent's evaluation of held-out SQuAD articles against transformers'
``pipeline("question-answering")`` and batched PyTorch on the same questions, in interleaved rounds.

``python bench/qa.py [--model <a QA folder>] [--rounds 5] [--out bench/RESULTS-qa.md]`` (on an otherwise idle
machine). The questions are the held-out articles of ``+experiment=squad`` (its validation and test splits of the
shipped SQuAD v1.1 subset, split by article exactly as training splits them). The model is the given QA folder
(e.g. a ``+experiment=squad`` run's ``model/``), else the real MiniLM-L6 with a new span head: speed does not
depend on what the head learnt, and each mode's answers are compared with tfsent's on the last round.

Modes, each timed questions in, answers out (tokenization and post-processing included):

- ``tfsent``: the prediction engine on TensorFlow (XLA fp32) on one CPU (length buckets with filler rows, each
  window reduced to its top-k on the device, answers picked on the host), in this process, warm;
- ``tfsent litert fp32`` / ``tfsent litert int8``: ``tfsent.predict``'s CPU default (LiteRT in exact shapes) and
  ``precision=int8``, the same windows and span step;
- ``tfsent graph bf16``: TensorFlow's graph mode under ``mixed_bfloat16`` (oneDNN's bf16 kernels), the path
  ``precision=auto`` weighs against LiteRT fp32 on a CPU with native bf16 (the run says which it chose here);
- ``pipeline``: ``pipeline("question-answering")`` on the list of questions, as its documentation shows;
- ``batched``: PyTorch on the windows in batches of 64, padded to the longest, answers as ``run_qa.py`` picks them.

The torch modes run in ``bench/.venv-torch`` (``bench/torch_qa.py``), measuring their own work.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import table  # noqa: E402
from bench.rounds import Mode, run_rounds, speedup  # noqa: E402

TORCH_QA = REPO / "bench" / "torch_qa.py"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=pathlib.Path, help="a QA model folder (default: MiniLM-L6 with a new span head)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--max-length", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--limit", type=int, default=0, help="only the first N held-out questions (smoke runs)")
    p.add_argument("--smoke", action="store_true", help="allow fewer rounds (figures mean nothing)")
    p.add_argument("--out", help="also write the section to this file")
    return p.parse_args(argv)


def answer(questions: list, tokenizer, features, args, predict) -> tuple[list[str], list[int]]:
    """The questions' answers as ``tfsent.predict`` picks them: windows, ``predict(tokens, buckets)`` (one
    backend's ``predict_bucketed``), the span step on the host. Returns the answers and each window's tokens."""
    from tfsent.data.qa_windows import build_windows
    from tfsent.inference.engine import DEFAULT_BUCKETS, bucket_lengths
    from tfsent.inference.spans import SpanOptions, predict_answers
    from tfsent.inference.tokens import TokenRows

    windows = build_windows(questions, tokenizer, args.max_length, args.doc_stride, features=features)
    tokens = TokenRows.from_ragged(windows.features)
    out = predict(tokens, bucket_lengths(DEFAULT_BUCKETS, args.max_length))
    picked = predict_answers(out, windows.example, windows.char_start, windows.char_end,
                             [q.context for q in questions], SpanOptions())
    return [p.answer.text for p in picked], [int(n) for n in tokens.lengths]


def litert_mode(folder: pathlib.Path, questions: list, precision: str, args, answers: dict, cache: pathlib.Path):
    """``tfsent.predict``'s CPU path for a QA model: LiteRT in exact shapes (``precision`` float32 or int8), the
    model converted once into ``cache`` (``bench.compare._litert_predictor``); the same windows and span step as
    the engine mode."""
    from bench.compare import _litert_predictor
    from tfsent.inference import litert
    from tfsent.inference.options import PredictOptions

    predictor = _litert_predictor(folder, PredictOptions(precision=precision, max_length=args.max_length), cache)
    name = f"tfsent litert {'fp32' if precision == 'float32' else 'int8'}"

    def predict(tokens, buckets):
        return litert.predict_bucketed(predictor.model, tokens, buckets=buckets, global_batch_size=args.batch,
                                       pad_values={"input_ids": predictor.tokenizer.pad_token_id})

    def run() -> None:
        answers[name] = answer(questions, predictor.tokenizer, predictor.features, args, predict)[0]

    return run


def tensorflow_mode(name: str, folder: pathlib.Path, questions: list, args, answers: dict, strategy, *,
                    precision: str = "float32", jit_compile: bool | None = None, lengths: list | None = None):
    """The prediction engine on TensorFlow: XLA fp32 (``jit_compile=None``: XLA per strategy, as
    ``tfsent.predict`` runs it), or graph mode under ``mixed_bfloat16`` (``jit_compile=False``): what
    ``tfsent.predict precision=auto`` runs when it finds graph bf16 faster than LiteRT fp32 (a CPU with native
    bf16). ``lengths`` (when given) receives each window's tokens."""
    from tfsent.inference.engine import predict_bucketed
    from tfsent.inference.predictor import compiled
    from tfsent.models import load_tokenizer
    from tfsent.models.question_answering import load_question_answering
    from tfsent.runtime.precision import set_policy

    set_policy(precision, strategy, jit_compile=jit_compile is not False)
    try:
        model = compiled(strategy, lambda: load_question_answering(folder), jit_compile=jit_compile,
                         steps_per_execution=1)
    finally:
        set_policy("float32", strategy)  # the policy is global: the other modes build float32 models
    tokenizer = load_tokenizer(folder)

    def predict(tokens, buckets):
        return predict_bucketed(model, strategy, tokens, buckets=buckets, global_batch_size=args.batch,
                                pad_values={"input_ids": tokenizer.pad_token_id})

    def run() -> None:
        answers[name], windows = answer(questions, tokenizer, model.features, args, predict)
        if lengths is not None:
            lengths[:] = windows

    return run


def auto_choice(folder: pathlib.Path, questions: list, args, strategy, cache: pathlib.Path) -> str:
    """What ``tfsent.predict precision=auto`` picks for these questions on this machine (its log line)."""
    from tfsent.inference.calibration import resolve_backend
    from tfsent.inference.options import PredictOptions
    from tfsent.inference.qa_inputs import questions_bytes
    from tfsent.models.loading import read_config

    options = dataclasses.replace(PredictOptions(max_length=args.max_length), precision="auto", backend="auto")
    job_bytes = questions_bytes(questions)  # as tfsent.predict sizes a question file's job
    return resolve_backend(options, "question_answering", strategy=strategy, config=read_config(folder),
                           job_bytes=lambda: job_bytes, cache=cache / "execution.json").describe()


def ceiling(config, lengths: list[int], series) -> str:
    """What bounds the ratio to the pipeline: the job's useful FLOPs (every window at its real length), the rate the
    pipeline runs them at, and this machine's fp32 and bf16 matmul rates (``bench/flops.py``, timed now)."""
    from bench import flops

    useful = flops.useful_flops(flops.EncoderShape.from_config(config, num_labels=2), lengths)
    rates = {dtype: flops.matmul_rate(dtype) for dtype in ("float32", "bfloat16")}
    pipeline = useful / series["pipeline"].time.median
    return (f"Ceiling: the {len(lengths)} windows hold {sum(lengths):,} tokens, {useful / 1e12:.2f} TFLOP of useful "
            f"forward work; the pipeline runs it at {pipeline / 1e9:.0f} GFLOP/s, "
            f"{pipeline / rates['float32']:.0%} of TensorFlow's fp32 matmul rate here "
            f"({rates['float32'] / 1e9:.0f} GFLOP/s; bf16 {rates['bfloat16'] / 1e9:.0f}). A path running only those "
            f"FLOPs at 100% of the fp32 rate would be at most **{rates['float32'] / pipeline:.2f}x** the pipeline, "
            f"at 100% of the bf16 rate **{rates['bfloat16'] / pipeline:.2f}x**.")


def gold_scores(questions: list, answers: list[str]) -> dict:
    """SQuAD v1.1 exact match and F1 of one mode's answers."""
    from tfsent.inference.squad_metrics import squad_scores

    return squad_scores({q.id: a for q, a in zip(questions, answers)},
                        {q.id: [g.text for g in q.answers] for q in questions})


def held_out(limit: int = 0) -> list:
    """The validation and test questions of ``+experiment=squad``, split as its training run splits them."""
    from hydra import compose, initialize_config_dir

    from tfsent.config import conf_dir
    from tfsent.data.prepare_qa import read_qa_examples, split_by_article
    from tfsent.train import train_spec

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        spec = train_spec(compose(config_name="train", overrides=["+experiment=squad",
                                                                   f"paths.root_dir={REPO}"])).data
    examples = read_qa_examples(spec)
    splits = split_by_article(examples, spec.split_fractions, spec.split_seed)
    chosen = [examples[i] for name in ("validation", "test") for i in splits[name]]
    return chosen[:limit] if limit else chosen


def minilm_qa(folder: pathlib.Path) -> pathlib.Path:
    """MiniLM-L6 with a new span head, saved as a tfsent QA folder."""
    from tfsent.data.tokenize import load_tokenizer
    from tfsent.models.question_answering import QuestionAnsweringSpec, build_question_answering

    model = build_question_answering(QuestionAnsweringSpec(source="minilm_l6", max_seq_length=384))
    model.save_pretrained(folder, tokenizer=load_tokenizer("minilm_l6"))
    return folder


def main(argv=None) -> int:
    args = parse_args(argv)
    import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
    import tensorflow as tf

    from bench import machine
    from bench.run import ensure_torch_venv
    from bench.torch_client import TorchWorker
    from tfsent.models.loading import read_config
    from tfsent.runtime.strategy import make_strategy

    tf.get_logger().setLevel("ERROR")
    desc = machine.describe()
    started = time.perf_counter()
    questions = held_out(args.limit)
    with tempfile.TemporaryDirectory(prefix="tfsent-bench-qa-") as tmp:
        folder = args.model or minilm_qa(pathlib.Path(tmp) / "qa")
        config = read_config(folder)
        strategy = make_strategy("cpu")
        answers: dict[str, list[str]] = {}
        lengths: list[int] = []
        tfsent_mode = tensorflow_mode("tfsent", folder, questions, args, answers, strategy, lengths=lengths)
        tfsent_mode()  # warm-up: tracing and XLA compilation of every bucket the questions use
        litert_modes = [Mode(f"tfsent litert {short}", len(questions), litert_mode(folder, questions, precision, args,
                                                                                  answers, pathlib.Path(tmp)))
                        for precision, short in (("float32", "fp32"), ("int8", "int8"))]
        for mode in litert_modes:
            mode.run()  # warm-up: the conversion (and quantization) into the run's own cache
        bf16_mode = Mode("tfsent graph bf16", len(questions), tensorflow_mode(
            "tfsent graph bf16", folder, questions, args, answers, strategy, precision="mixed_bfloat16",
            jit_compile=False))
        bf16_mode.run()  # warm-up: tracing every bucket the questions use
        chosen = auto_choice(folder, questions, args, strategy, pathlib.Path(tmp))
        payload = [{"question": q.question, "context": q.context} for q in questions]
        with TorchWorker(ensure_torch_venv(), TORCH_QA) as worker:
            worker.request(cmd="load", name="qa", model_dir=str(folder))
            info = worker.request(cmd="info")

            def torch_mode(mode: str):
                def run() -> float:
                    done = worker.request(cmd="run", name="qa", mode=mode, questions=payload, batch_size=args.batch,
                                          max_length=args.max_length, doc_stride=args.doc_stride)
                    answers[mode] = done["answers"]
                    return float(done["seconds"])
                return run

            modes = [Mode("tfsent", len(questions), tfsent_mode), *litert_modes, bf16_mode,
                     Mode("pipeline", len(questions), torch_mode("pipeline")),
                     Mode("batched", len(questions), torch_mode("batched"))]
            series = run_rounds(modes, args.rounds, log=lambda line: print(line, file=sys.stderr, flush=True),
                                smoke=args.smoke)
    same = {m: sum(a == b for a, b in zip(answers[m], answers["tfsent"])) for m in ("pipeline", "batched")}
    ours = ("tfsent litert fp32", "tfsent litert int8", "tfsent graph bf16")
    scores = {m: gold_scores(questions, answers[m]) for m in ("tfsent", *ours, "pipeline", "batched")}

    def em_f1(mode: str) -> str:
        return f"{scores[mode]['exact_match']:.2f} / {scores[mode]['f1']:.2f}"

    note = {"tfsent litert fp32": "", "tfsent litert int8": ", precision=int8",
            "tfsent graph bf16": ", precision=mixed_bfloat16 jit_compile=false"}
    lines = ["## Question answering: held-out SQuAD articles", "",
             f"`python bench/qa.py{' --model ' + str(args.model) if args.model else ''}` ({args.rounds} interleaved "
             f"rounds, {(time.perf_counter() - started) / 60:.1f} min). {len(questions)} questions of the validation "
             f"and test articles of `+experiment=squad` ({len(lengths)} windows of at most "
             f"{args.max_length} tokens, stride {args.doc_stride}); model "
             + (str(args.model) if args.model else "MiniLM-L6 with a new span head") + f"; batch {args.batch}, "
             "one CPU replica, float32, XLA per strategy (tfsent); torch "
             f"{info['torch']} with {info['threads']} threads.", "",
             "Machine: " + "; ".join(f"{k}: {v}" for k, v in desc.items()), "",
             table.markdown(["mode", "questions/s median (min-max)", "seconds median (min-max)",
                             "answers equal to tfsent's", "EM / F1"], [
                 ["tfsent (engine + spans), TensorFlow XLA fp32", str(series["tfsent"].rate),
                  str(series["tfsent"].time), "-", em_f1("tfsent")],
                 *[[f"{name} (as tfsent.predict on a CPU{note[name]})",
                    str(series[name].rate), str(series[name].time),
                    f"{sum(a == b for a, b in zip(answers[name], answers['tfsent']))} of {len(questions)}",
                    em_f1(name)] for name in ours],
                 ["pipeline(\"question-answering\")", str(series["pipeline"].rate), str(series["pipeline"].time),
                  f"{same['pipeline']} of {len(questions)}", em_f1("pipeline")],
                 ["batched PyTorch (64, pad to longest) + run_qa.py post-processing", str(series["batched"].rate),
                  str(series["batched"].time), f"{same['batched']} of {len(questions)}", em_f1("batched")]]), "",
             f"`tfsent.predict precision=auto` on these questions here: {chosen}.", "",
             ceiling(config, lengths, series), "",
             "Medians of per-round ratios to the pipeline (target >= 2x): " + ", ".join(
                 f"{name} **{speedup(series[name], series['pipeline'])}**" for name in ("tfsent", *ours)) +
             f"; TensorFlow XLA / batched PyTorch: **{speedup(series['tfsent'], series['batched'])}**.", "",
             "The pipeline ranks candidates by start x end probability and sums the scores of equal answers over "
             "windows, and aligns answers to words; run_qa.py (and tfsent) rank by the sum of logits: answers of a "
             "question with several windows may differ for that reason alone.", ""]
    return table.publish("\n".join(lines), args.out)


if __name__ == "__main__":
    sys.exit(main())
