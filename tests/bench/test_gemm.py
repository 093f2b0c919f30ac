"""bench/gemm.py (the ceiling on precision=int8's gain): both one-operator models compute the same GEMM, the int8
one through the quantizer tfsent uses, and the ratio and its line come from the rounds; no timing is asserted."""

import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))

from bench import gemm  # noqa: E402


def test_the_two_gemms_compute_one_product_and_the_line_reports_their_rounds():
    pytest.importorskip("ai_edge_litert")
    from tfsent.inference import litert

    float32 = gemm.gemm_flat(32, 48)
    x = np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)
    want = gemm.runner(float32, 1)(x=x)["y"]
    got = gemm.runner(litert.quantize(float32), 1)(x=x)["y"]
    assert want.shape == (16, 48)
    # int8 weights and per-row int8 inputs: close to the float product, not equal to it.
    assert 0 < np.abs(got - want).max() < 0.05 * np.abs(want).max()
    # ONNX Runtime's GEMM runs in the torch worker: a stand-in timer here, at 1 ms a call.
    rates = gemm.gemm_rates(16, 32, 48, rounds=3, calls=1, threads=1, mlas=lambda calls: 1e-3 * calls)
    assert rates.shape == (16, 32, 48) and len(rates.fp32) == len(rates.int8) == len(rates.onednn) == 3
    assert rates.mlas == [2 * 16 * 32 * 48 / 1e-3] * 3
    assert rates.ratio == sorted(i / f for i, f in zip(rates.int8, rates.fp32))[1]
    assert "`[16, 32] x [32, 48]`" in rates.line("tiny") and f"**{rates.ratio:.2f}x**" in rates.line("tiny")


def test_the_results_page_gives_the_int8_ceiling_per_model():
    from bench.run import _ceilings

    rates = gemm.GemmRates((2048, 384, 1536), [100e9, 100e9, 110e9], [120e9, 130e9, 110e9])
    lines = _ceilings(100e9, None, [], [], (), {"MiniLM-L6": rates})
    assert lines[0] == "Ceiling on `precision=int8`'s gain over the fp32 path (`bench/gemm.py`):"
    assert "runs 120.0 GFLOP/s against its fp32 GEMM's 100.0: **1.20x** (median of 3 interleaved rounds, " \
           "1.00-1.30)" in lines[2]
    assert len(lines) == 4  # no ONNX Runtime rates, no fp32 line


def test_the_results_page_gives_xnnpack_fp32_gemm_against_onnx_runtimes():
    from bench.run import _ceilings

    rates = gemm.GemmRates((2048, 768, 3072), [200e9, 210e9, 180e9], [900e9] * 3, [280e9, 300e9, 300e9],
                           [290e9, 270e9, 280e9])
    lines = _ceilings(100e9, None, [], [], (), {"BERT-base": rates})
    assert lines[4].startswith("Ceiling on the default (exact) path against ONNX Runtime fp32")
    assert lines[6] == ("- BERT-base: fp32 GEMM `[2048, 768] x [768, 3072]`, GFLOP/s: XNNPACK (LiteRT, the default "
                        "path) 200.0, ONNX Runtime's MLAS 300.0, TensorFlow's oneDNN (graph mode) 280.0: XNNPACK runs "
                        "**0.70x** MLAS's rate (median of 3 interleaved rounds, 0.60-0.71).")
