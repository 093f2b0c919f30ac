"""Inference: running trained models on new text, and exporting them for serving."""
