"""``precision: auto`` on a Beam worker is the rule every inference job uses (``inference.calibration``): the path
tfsent.predict takes for a run split over processes, never the probe, and never bf16 on a CPU that only emulates it
(the worker used to set training's policy, bf16 on any CPU)."""

import pytest

pytest.importorskip("apache_beam", reason="apache-beam is not installed: the beam extra (make install-beam)")

import tf_keras  # noqa: E402

from tfsent.beam.handler import PredictorHandler, describe  # noqa: E402
from tfsent.beam.options import BeamOptions  # noqa: E402
from tfsent.config import ConfigError  # noqa: E402
from tfsent.inference import calibration, probe  # noqa: E402
from tfsent.inference.options import PredictOptions  # noqa: E402
from tfsent.models.loading import read_config  # noqa: E402
from tfsent.runtime import execution  # noqa: E402
from tfsent.runtime import strategy as strategy_lib  # noqa: E402
from tfsent.runtime.strategy import make_strategy  # noqa: E402

from helpers.tiny import tiny_checkpoint  # noqa: E402

AVX2 = frozenset({"avx2", "fma"})
BF16 = frozenset({"avx2", "fma", "avx512f", "avx512_bf16"})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    tf_keras.mixed_precision.set_global_policy("float32")  # the policy is global: never leak it


@pytest.mark.parametrize("device, flags, path", [
    ("cpu", AVX2, ("float32", True)),
    ("cpu", BF16, ("float32", True)),  # native bf16: still the rule's first candidate, XLA fp32, on every worker
    ("tpu", AVX2, ("mixed_bfloat16", True)),
])
def test_a_worker_resolves_auto_by_the_inference_rule(ckpt, monkeypatch, device, flags, path):
    monkeypatch.setattr(execution, "cpu_flags", lambda: flags)
    # calibration imports the strategy module on use (it imports TensorFlow): its device_kind is patched there.
    monkeypatch.setattr(strategy_lib, "device_kind", lambda strategy: device)
    monkeypatch.setattr(probe, "probe", lambda *a, **kw: pytest.fail("a Beam worker never probes"))
    facts = describe(str(ckpt), (16, 32), None)
    handler = PredictorHandler(str(ckpt), facts, global_batch_size=8, strategy="cpu", precision="auto",
                               jit_compile="auto", documents=False)
    loaded = handler.load_model()
    assert (loaded.predictor.model.dtype_policy.name, loaded.predictor.model.jit_compile) == path
    assert tf_keras.mixed_precision.global_policy().name == path[0]
    # tfsent.predict split over processes (num_shards > 1, merge) resolves the same.
    rule = calibration.resolve_execution(make_strategy("cpu"), PredictOptions(precision="auto", jit_compile="auto"),
                                         config=read_config(ckpt), calibrate=False)
    assert (rule.options.precision, rule.options.jit_compile, rule.how) == (*path, "only candidate" if flags == AVX2
                                                                           or device == "tpu" else "rule")


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^precision='bf16' is unknown; expected one of auto, float32, "):
        BeamOptions(precision="bf16")
    with pytest.raises(ConfigError, match=r"^jit_compile='yes' must be true, false, null or auto$"):
        BeamOptions(jit_compile="yes")
    assert BeamOptions(precision="auto", jit_compile="auto").precision == "auto"
