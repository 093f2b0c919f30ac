"""Whole processes, file to file (issue 36): ``python -m tfsent.predict`` against ``bench/ort_score.py`` (ONNX Runtime
fp32 and dynamic int8, the short script a speed-minded user writes) on the same text file, alternated in rounds.

Every command runs in a fresh process; its wall time and its CPU time (the child's user + system, from
``resource.getrusage``) are taken around it. tfsent runs warm: an untimed first run with ``backend=litert`` fills
``$TFSENT_CACHE_DIR`` (the LiteRT conversion in the foreground; ``backend: auto`` would leave it to a background
process after a job too small to repay it), and every timed run reuses it. Each process says where its start-up
went: tfsent's ``verbose=true`` line (imports, tokenizer, model, convert, first batch) and the script's
``ort-timing:`` JSON (imports, tokenizer, session, first batch); both are kept per round and shown as medians.
The labels of each command are compared with ONNX Runtime fp32's, row by row.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from bench.rounds import Series, Spread, speedup

REPO = pathlib.Path(__file__).resolve().parents[1]
ORT_SCRIPT = REPO / "bench" / "ort_score.py"


@dataclasses.dataclass
class Command:
    """One way to score the file: its name, its command line and environment, and how its labels are read."""

    name: str
    argv: list[str]
    env: dict[str, str]
    output: pathlib.Path


@dataclasses.dataclass
class WholeResult:
    model: str
    rows: int
    wall: dict[str, Series]
    cpu: dict[str, list[float]]
    startup: dict[str, dict[str, list[float]]]  # command -> phase -> seconds per round
    agreement: dict[str, float]  # command -> share of rows whose label equals ONNX Runtime fp32's


def _run(command: Command) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command.argv, capture_output=True, text=True, env=command.env, cwd=REPO)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command.argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def startup_split(stdout: str) -> dict[str, float]:
    """The start-up phases a process printed: tfsent's ``predict: start-up ... (imports 1.20, tokenizer 0.10, ...)``
    or the script's ``ort-timing: {...}`` (cumulative seconds from its start, made per phase here)."""
    for line in stdout.splitlines():
        if line.startswith("ort-timing: "):
            marks = json.loads(line.split(": ", 1)[1])
            split, last = {}, 0.0
            for phase in ("imports", "tokenizer", "session", "first_batch"):
                if phase in marks:
                    split[phase], last = marks[phase] - last, marks[phase]
            return split
        if line.startswith("predict: start-up ") and "(" in line:
            inner = line.rsplit("(", 1)[1].rstrip(")")
            return {" ".join(part.split()[:-1]).replace(" ", "_"): float(part.split()[-1])
                    for part in inner.split(", ")}
    return {}


def _labels(command: Command) -> list[int]:
    import pandas as pd

    frame = pd.read_csv(command.output)
    return frame["label_id"].astype(int).tolist()


def whole_process(model: str, ckpt: pathlib.Path, onnx: pathlib.Path, onnx_int8: pathlib.Path,
                  torch_python: pathlib.Path, texts: pathlib.Path, rows: int, folder: pathlib.Path, n_rounds: int,
                  log: Callable[[str], None] | None = None, tfsent_extra: Sequence[str] = (),
                  int8: bool = True) -> WholeResult:
    """Alternate tfsent's command and the ONNX Runtime script (fp32, and with ``int8`` both int8 paths) on ``texts``
    for ``n_rounds``.

    Args:
        model: its name in the tables (``MiniLM-L6``).
        ckpt: the tfsent classifier folder (the ONNX files are its export).
        onnx, onnx_int8: ``bench/onnx_export.py``'s files of that folder.
        torch_python: the interpreter of the torch venv (it has onnxruntime and tokenizers).
        texts: one text per line.
        rows: the file's lines.
        folder: scratch space (outputs, tfsent's cache).
        n_rounds: rounds of every command.
        tfsent_extra: more ``key=value`` settings for tfsent's command.
    """
    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / "tfsent-cache"
    env = {**os.environ, "TFSENT_CACHE_DIR": str(cache),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    torch_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    tfsent_out = folder / "tfsent.csv"
    commands = [Command("tfsent.predict (default)", [sys.executable, "-m", "tfsent.predict", f"ckpt_path={ckpt}",
                                                     f"input={texts}", f"output={tfsent_out}", "overwrite=true",
                                                     "progress=false", "verbose=true", *tfsent_extra],
                        env, tfsent_out)]
    ort = [("ONNX Runtime fp32 script", onnx)] + ([("ONNX Runtime int8 script", onnx_int8)] if int8 else [])
    for name, onnx_file in ort:
        out = folder / f"{name.split()[2]}.csv"
        commands.append(Command(name, [str(torch_python), str(ORT_SCRIPT), str(onnx_file), str(ckpt), str(texts),
                                       str(out)], torch_env, out))
    if int8:
        int8_out = folder / "tfsent-int8.csv"
        commands.append(Command("tfsent.predict precision=int8", [
            sys.executable, "-m", "tfsent.predict", f"ckpt_path={ckpt}", f"input={texts}", f"output={int8_out}",
            "overwrite=true", "progress=false", "verbose=true", "precision=int8", *tfsent_extra], env, int8_out))
    if log:
        log(f"whole process, {model}: first tfsent runs fill {cache} (untimed)")
    _run(dataclasses.replace(commands[0], argv=[*commands[0].argv, "backend=litert"]))
    if int8:
        _run(commands[-1])
    wall = {c.name: [] for c in commands}
    cpu = {c.name: [] for c in commands}
    startup: dict[str, dict[str, list[float]]] = {c.name: {} for c in commands}
    for r in range(n_rounds):
        for c in commands:
            seconds, cpu_seconds, stdout = _run(c)
            wall[c.name].append(seconds)
            cpu[c.name].append(cpu_seconds)
            for phase, value in startup_split(stdout).items():
                startup[c.name].setdefault(phase, []).append(value)
            if log:
                log(f"whole process, {model}, round {r + 1}: {c.name} {seconds:.1f} s wall, {cpu_seconds:.1f} CPU-s")
    reference = _labels(commands[1])
    agreement = {c.name: sum(a == b for a, b in zip(_labels(c), reference)) / len(reference) for c in commands}
    return WholeResult(model, rows, {n: Series(n, rows, s) for n, s in wall.items()}, cpu, startup, agreement)


def render(result: WholeResult) -> list[str]:
    """Markdown: wall and CPU seconds per command, tfsent's per-round ratio to each, labels against ONNX Runtime
    fp32, and each process's start-up split (medians)."""
    from bench import table

    tfsent = next(iter(result.wall.values()))
    rows = []
    for name, series in result.wall.items():
        ratio = "1 (reference)" if series is tfsent else str(speedup(tfsent, series))
        rows.append([name, str(series.time), str(Spread.of(result.cpu[name])), ratio,
                     f"{result.agreement[name]:.2%}"])
    phases = sorted({p for split in result.startup.values() for p in split},
                    key=lambda p: ("imports", "tokenizer", "model", "session", "convert", "first_batch").index(p)
                    if p in ("imports", "tokenizer", "model", "session", "convert", "first_batch") else 9)
    start_rows = [[name] + [f"{statistics.median(split[p]):.2f}" if p in split else "" for p in phases]
                  + [f"{sum(statistics.median(v) for v in split.values()):.2f}"]
                  for name, split in result.startup.items() if split]
    return [f"{result.model}: whole processes on the same {result.rows}-row file, alternated, {len(tfsent.seconds)} "
            "rounds (tfsent warm: its LiteRT conversion cached by an untimed first run):", "",
            table.markdown(["command", "wall s median (min-max)", "CPU s median (min-max)",
                            "tfsent x (per-round median)", "labels = ORT fp32"], rows), "",
            "Start-up, seconds from process start to the first scored batch, per phase (medians):", "",
            table.markdown(["command", *phases, "to first batch"], start_rows), ""]


def target_rows(result: WholeResult) -> list:
    """Issue 36's whole-process and start-up targets: tfsent's wall time at most ONNX Runtime fp32's, and at most
    3 s from process start to the first batch."""
    from bench import table

    tfsent_name, ort_name = list(result.wall)[:2]
    out = [table.Target(f"whole process, {result.model}, {result.rows} rows: tfsent / ONNX Runtime fp32 script wall "
                        "seconds",
                        1 / speedup(result.wall[tfsent_name], result.wall[ort_name]).median, 1.0,
                        higher_is_better=False)]
    split = result.startup.get(tfsent_name)
    if split:
        out.append(table.Target(f"tfsent start-up to the first batch, warm, {result.model}, seconds",
                                sum(statistics.median(v) for v in split.values()), 3.0, higher_is_better=False))
    return out


def plan(model: str, rounds: int) -> tuple[int, bool]:
    """Rounds and whether the int8 commands run, for one model: BERT-base's 4,846-row processes take minutes each,
    so its fp32 commands only, in at most 3 rounds."""
    return (rounds, True) if model == "MiniLM-L6" else (min(rounds, 3), False)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.whole``: this section alone, on the bench's own checkpoints (MiniLM-L6 and BERT-base shapes,
    random weights, the MiniLM tokenizer, as ``bench/run.py`` builds them), its Markdown printed or written."""
    import argparse
    import gc
    import tempfile

    from bench import cold, inference, machine, table
    from bench.run import PHRASEBANK, ensure_torch_venv
    from bench.torch_client import TorchWorker
    from tfsent.data.tokenize import load_tokenizer
    from tfsent.runtime.strategy import make_strategy

    p = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    p.add_argument("--models", default="MiniLM-L6,BERT-base")
    p.add_argument("--rounds", type=int, default=5, help="rounds (BERT-base: at most 3, fp32 commands only)")
    p.add_argument("--rows", type=int, default=4846)
    p.add_argument("--out", default=None, help="write the Markdown here (default: print it)")
    args = p.parse_args(argv)
    keys = {"MiniLM-L6": "minilm", "BERT-base": "bert_base"}
    sentences = inference.read_phrasebank(PHRASEBANK)
    tokenizer = load_tokenizer("minilm_l6")
    strategy = make_strategy("cpu")
    lines = ["Machine: " + "; ".join(f"{k} {v}" for k, v in machine.describe().items()), ""]
    with tempfile.TemporaryDirectory(prefix="tfsent-whole-") as tmp:
        tmp = pathlib.Path(tmp)
        texts = cold.write_texts(tmp / "whole.txt", sentences, args.rows)
        for label in args.models.split(","):
            clf = inference.build_model(strategy, keys[label])
            ckpt = clf.save_pretrained(tmp / keys[label], tokenizer=tokenizer)
            del clf
            gc.collect()
            with TorchWorker(ensure_torch_venv()) as worker:
                worker.load_onnx(f"{label} onnx", ckpt, tmp / "onnx")
            onnx = tmp / "onnx" / f"{label} onnx.onnx"
            rounds, int8 = plan(label, args.rounds)
            result = whole_process(label, ckpt, onnx, onnx.with_suffix(".int8.onnx"), ensure_torch_venv(), texts,
                                   args.rows, tmp / "whole" / label, rounds, log=lambda m: print(m, flush=True),
                                   int8=int8)
            lines += render(result) + [table.targets_table(target_rows(result)), ""]
    text = "\n".join(lines)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
