"""bench/isa.py: the AVX2 machine's bench on an AVX-512 one, through each library's own instruction-set switch."""

from bench import isa
from tfsent.runtime import execution as ex


def test_apply_caps_every_library_and_keeps_the_users_xla_flags():
    env = {"XLA_FLAGS": "--xla_dump_to=/tmp/x"}
    set_ = isa.apply("avx2", env)
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_cpu_max_isa=AVX2" and set_["XLA_FLAGS"] == env["XLA_FLAGS"]
    assert isa.describe(env) == ("ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2, "
                                 "XLA_FLAGS=--xla_cpu_max_isa=AVX2")
    assert isa.describe({"XLA_FLAGS": "--xla_dump_to=/tmp/x"}) is None


def test_graph_bf16_is_left_out_only_where_the_cap_would_abort_it(monkeypatch):
    paths = [ex.XLA_FP32, ex.GRAPH_FP32, ex.GRAPH_BF16, ex.XLA_BF16]
    monkeypatch.setattr(ex, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert isa.runnable(paths) == paths
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert isa.runnable(paths) == [ex.XLA_FP32, ex.GRAPH_FP32, ex.XLA_BF16]
    monkeypatch.setattr(ex, "cpu_flags", lambda: frozenset({"avx2"}))  # TF keeps bf16 off oneDNN there
    assert isa.runnable(paths) == paths
