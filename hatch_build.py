"""Hatchling metadata hook: the TensorFlow, transformers and extras' pins come from tfsent/stack.toml (one place)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hatchling.metadata.plugin.interface import MetadataHookInterface


def _stack_module():
    spec = importlib.util.spec_from_file_location("tfsent_stack", Path(__file__).parent / "tfsent" / "stack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CustomMetadataHook(MetadataHookInterface):
    def update(self, metadata: dict) -> None:
        stack = _stack_module()
        metadata["dependencies"] = stack.runtime_pins() + list(self.config["dependencies"])
        metadata["optional-dependencies"] = {**self.config["optional-dependencies"], **stack.extras()}
