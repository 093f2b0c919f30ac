"""The bench's side of the persistent PyTorch worker (``bench/torch_baselines.py`` in ``bench/.venv-torch``).

One worker process lives for the whole bench: torch, transformers and each model load once, and every interleaved
round sends only the texts and gets back the seconds the worker measured around the work itself (the pipe round
trip is left out, as a TF mode's own timing leaves out nothing but its call).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

WORKER = pathlib.Path(__file__).resolve().parent / "torch_baselines.py"


class TorchWorker:
    """A running ``torch_baselines.py``; use as a context manager (the worker quits on exit)."""

    def __init__(self, python: str | os.PathLike, script: str | os.PathLike = WORKER):
        # PYTHONPATH/VIRTUAL_ENV must not leak tfsent's venv into torch's.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self._proc = subprocess.Popen([str(python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=env)

    def request(self, **req) -> dict:
        """Send one request and return its answer.

        Raises:
            RuntimeError: the worker answered with an error, or died.
        """
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the torch worker exited ({self._proc.wait()}) on {req.get('cmd')}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"torch worker, {req.get('cmd')}: {answer['error']}\n{answer.get('trace', '')}")
        return answer

    def load(self, name: str, model_dir: str | os.PathLike, random_config: dict | None = None) -> None:
        """Load a model under ``name``: the packaged one in ``model_dir``, or a random ``random_config`` BERT."""
        self.request(cmd="load", name=name, model_dir=str(model_dir), random_config=random_config)

    def load_onnx(self, name: str, model_dir: str | os.PathLike, folder: str | os.PathLike) -> None:
        """Export the tfsent classifier folder ``model_dir`` to ONNX in ``folder`` (fp32 and dynamic int8) and open
        an ONNX Runtime session of each under ``name`` (modes ``ort fp32``, ``ort int8``)."""
        self.request(cmd="load_onnx", name=name, model_dir=str(model_dir), folder=str(folder))

    def timer(self, name: str, mode: str, texts: list[str], batch_size: int, max_length: int = 128):
        """A ``bench.rounds.Mode`` run function: each call times ``mode`` on ``texts`` in the worker (warmed up on
        its first call) and returns the seconds it measured."""
        def run() -> float:
            return float(self.request(cmd="run", name=name, mode=mode, texts=list(texts), batch_size=batch_size,
                                      max_length=max_length)["seconds"])
        return run

    def gemm_timer(self, rows: int, inner: int, outer: int, threads: int):
        """``calls -> seconds`` of ONNX Runtime's fp32 GEMM ``[rows, inner] x [inner, outer]`` in the worker
        (:func:`bench.gemm.gemm_rates`' ``mlas``)."""
        def run(calls: int) -> float:
            return float(self.request(cmd="gemm", rows=rows, inner=inner, outer=outer, calls=calls,
                                      threads=threads)["seconds"])
        return run

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self._proc.stdin.close()
            except OSError:
                pass
            self._proc.wait(timeout=60)

    def __enter__(self) -> TorchWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
