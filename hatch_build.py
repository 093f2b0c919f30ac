"""Hatchling metadata hook: the TensorFlow and transformers pins come from tfsent/stack.toml (one place)."""

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
        metadata["dependencies"] = _stack_module().runtime_pins() + list(self.config["dependencies"])
