"""Call an exported SavedModel as a serving user does: TensorFlow and tensorflow-text only, never tfsent.

Usage: ``python saved_model_client.py EXPORT_DIR TEXTS_JSON`` prints one JSON object: ``label``, ``label_id``,
``probs`` for the texts (a JSON list of strings), ``unregistered_ops`` (the graph's ops that TensorFlow does not know
before ``import tensorflow_text``) and ``tfsent_imported``.
"""

import json
import pathlib
import sys

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry


def graph_op_types(export_dir: pathlib.Path) -> set[str]:
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    graph = proto.meta_graphs[0].graph_def
    return {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


def main(export_dir: str, texts_json: str) -> None:
    export_dir = pathlib.Path(export_dir)
    unregistered = sorted(op for op in graph_op_types(export_dir) if op_def_registry.get(op) is None)
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the graph needs)

    serve = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    texts = json.loads(pathlib.Path(texts_json).read_text())
    out = serve(text=tf.constant(texts, tf.string))
    print(json.dumps({"label": [s.decode() for s in out["label"].numpy()],
                      "label_id": out["label_id"].numpy().tolist(), "probs": out["probs"].numpy().tolist(),
                      "unregistered_ops": unregistered,
                      "tfsent_imported": any(m == "tfsent" or m.startswith("tfsent.") for m in sys.modules)}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
