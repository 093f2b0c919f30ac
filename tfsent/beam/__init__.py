"""Batch scoring on Apache Beam: ``python -m tfsent.beam ckpt_path=... input=... output=...`` (``pip install
tfsent[beam]``).

The same inputs, tokenization, chunking, bucketed engine, output columns and writers as ``tfsent.predict``, run as a
Beam pipeline (DirectRunner here; Dataflow, Flink or Spark elsewhere): ``options`` (typed settings), ``files``
(local or remote paths through Beam's filesystems), ``read`` (rows and documents keyed by their input position),
``handler`` (the ``RunInference`` model handler), ``write`` (keyed results back in input order, written atomically)
and ``pipeline`` (the graph and its run). ``cli`` is the entry module. Only ``tfsent.beam`` imports apache_beam.
"""
