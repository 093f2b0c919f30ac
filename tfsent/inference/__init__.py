"""Inference: the streaming prediction engine, one predictor per model kind, inputs, parts, outputs, documents,
sharding over many hosts, and export for serving."""
