"""The claim behind ``auto`` on CPUs with native bf16 (``tfsent/runtime/execution.py``): a model built under
``mixed_bfloat16`` and run as a graph does its matmuls on oneDNN's native bf16 kernels, while XLA's CPU dot does
not go through oneDNN at all. Read from oneDNN's own verbose log, in a fresh process (the variable is read when
oneDNN starts)."""

import os
import subprocess
import sys

import pytest

from tfsent.runtime import execution as ex

PROGRAM = """
import tfsent
from transformers import BertConfig
from tfsent.inference import probe
from tfsent.runtime import execution as ex
config = BertConfig(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=64)
print("PATH", flush=True)
probe._runner(config, ex.{path}, 32)()
"""


def matmuls(path: str) -> list[tuple[str, str, str]]:
    """(implementation, source data type, problem) of every oneDNN matmul/inner product the probe's model ran on
    ``path``; the problem is ``MxK:KxN`` for a dense layer, with leading batch dimensions for attention's products."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(path=path)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = []
    for line in done.stdout.split("PATH", 1)[1].splitlines():
        parts = line.split(",")
        if line.startswith("onednn_verbose") and "exec" in parts and ("matmul" in parts or "inner_product" in parts):
            kind = parts.index("matmul") if "matmul" in parts else parts.index("inner_product")
            impl, descs = parts[kind + 1], parts[kind + 3]
            out.append((impl, descs.split("src:")[1].split(":")[0] if "src:" in descs else "?", parts[-2]))
    return out


@pytest.mark.skipif(not ex.has_native_bf16(ex.cpu_flags()), reason="this CPU has no avx512_bf16 / amx_bf16")
def test_graph_bf16_runs_on_native_bf16_kernels_and_xla_does_not_use_onednn():
    graph = matmuls("GRAPH_BF16")
    # The dense layers (query, key, value, output, both feed-forward products: six per layer, nearly all FLOPs):
    # 2-D products on a native kernel. Attention's batched [rows, heads, L, L] products (4 per model here, 2-3% of
    # a BERT-base layer's FLOPs at 128 tokens) may take oneDNN's generic gemm.
    dense = [(impl, problem) for impl, dtype, problem in graph if dtype == "bf16" and problem.count("x") == 2]
    assert len(dense) >= 12, graph
    native = ("avx512_core_bf16", "amx")  # AMX's kernels: avx512_core_amx, or avx10_1_512_amx in newer oneDNN names
    assert all(any(n in impl for n in native) for impl, _ in dense), graph
    assert matmuls("XLA_BF16") == []  # XLA computes its dots itself: no native bf16 kernel there
