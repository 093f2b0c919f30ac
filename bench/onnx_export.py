"""Export a classifier folder to ONNX as ONNX Runtime's docs and ``optimum`` do it (runs in ``bench/.venv-torch``).

``bench/.venv-torch/bin/python bench/onnx_export.py MODEL_DIR OUT.onnx``: transformers' PyTorch class loads the
folder's ``model.safetensors`` (tfsent writes one beside ``tf_model.h5``), ``torch.onnx.export`` writes opset 17
with dynamic batch and sequence axes (TorchScript exporter, as ``optimum`` exports), and ``--int8`` also writes
``OUT.int8.onnx`` with ``onnxruntime.quantization.quantize_dynamic`` (the one-liner a speed-minded user tries).
This is the anchor of issue 36: what a user who wants CPU speed runs instead of tfsent.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export(model_dir: pathlib.Path, out: pathlib.Path, opset: int = 17) -> pathlib.Path:
    """Write ``out`` (inputs ``input_ids``, ``attention_mask``, ``token_type_ids``; output ``logits``)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    dummy = {k: torch.ones((2, 16), dtype=torch.long) for k in INPUTS}
    axes = {k: {0: "batch", 1: "sequence"} for k in INPUTS}
    axes["logits"] = {0: "batch"}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.onnx")
    with torch.inference_mode():
        torch.onnx.export(model, (dummy,), str(tmp), input_names=list(INPUTS), output_names=["logits"],
                          dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
    tmp.replace(out)
    return out


def quantize(model: pathlib.Path) -> pathlib.Path:
    """``quantize_dynamic`` with its defaults but int8 weights (QInt8), written beside ``model``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = model.with_suffix(".int8.onnx")
    quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=pathlib.Path)
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--int8", action="store_true", help="also write OUT.int8.onnx (quantize_dynamic)")
    args = p.parse_args(argv)
    print(export(args.model_dir, args.out))
    if args.int8:
        print(quantize(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
