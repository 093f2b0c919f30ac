"""Inference: the streaming prediction engine, one predictor per model kind, inputs, parts, outputs, documents and sharding over many hosts."""
