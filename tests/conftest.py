"""Test setup: split the CPU into 8 logical devices before TensorFlow starts.

TensorFlow fixes its devices on first use, so this must happen at import time of the test session. Tests then
ask for ``virtual_cpu:8`` (8 replicas, like a TPU v3-8 host) or ``cpu`` (the single-replica reference).
"""

import os
import pathlib

import pytest

import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
import tensorflow as tf

N_VIRTUAL_CPUS = 8
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * N_VIRTUAL_CPUS)

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """The real data beside the checkout (PhraseBank, transcripts); skip cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def transcripts_dir(shared_data) -> pathlib.Path:
    path = shared_data / "transcripts" / "ectsum"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def phrasebank_dir() -> pathlib.Path:
    """Financial PhraseBank as shipped in the repository's data/ folder."""
    return REPO / "data" / "financial_phrasebank"


@pytest.fixture(autouse=True)
def _execution_cache(tmp_path_factory, monkeypatch):
    """Each test's calibration cache (``precision/jit_compile: auto``) in its own folder, never ~/.cache."""
    monkeypatch.setenv("TFSENT_CACHE_DIR", str(tmp_path_factory.mktemp("tfsent-cache")))
    # backend=auto means TensorFlow in the suite: a LiteRT conversion costs seconds per checkpoint, and most tests
    # build their own. The LiteRT tests (tests/inference/test_litert*.py) unset it.
    monkeypatch.setenv("TFSENT_BACKEND", "tensorflow")
