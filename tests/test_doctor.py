"""tfsent.doctor: the tested stack, exactly one TensorFlow wheel, and what strategy=auto would pick."""

import subprocess
import sys

from tfsent import doctor, stack


def test_this_install_is_healthy_and_reported():
    done = subprocess.run([sys.executable, "-m", "tfsent.doctor"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"tensorflow wheel: tensorflow-cpu {stack.tensorflow_version()}." in out
    assert f"transformers {stack.load()['transformers']}" in out
    assert f"ai-edge-litert {stack.load()['litert']}." in out  # LiteRT, tfsent.predict's CPU backend
    assert "doctor: strategy=auto would use: cpu" in out  # no TPU hint, no GPU on the CPU test bench
    assert out.rstrip().endswith("(TensorFlow %s.x stack, tfsent/stack.toml)" % stack.tensorflow_version())


def test_problems_name_each_mismatch():
    spec = dict(stack.load(), tensorflow="2.99", transformers="9.9.9", litert="9.9")
    found = doctor.problems(spec)
    assert any(p.startswith("ai-edge-litert ") and "tested on 9.9.x" in p for p in found), found
    assert any(p.startswith("tensorflow-cpu ") and "tested on 2.99.x" in p for p in found), found
    assert any(p.startswith("tf-keras ") and "does not match TensorFlow 2.99" in p for p in found), found
    assert any("tfsent needs exactly 9.9.9" in p for p in found), found
    assert doctor.problems() == []


def test_an_installed_extra_outside_its_tested_range_is_a_problem():
    spec = dict(stack.load(), extras={"beam": ["tensorboard<0.1"]})  # an installed package stands in for beam
    found = doctor.problems(spec)
    assert any(p.startswith("tensorboard ") and "the beam extra is tested on <0.1" in p
               and "make install-beam" in p for p in found), found
    assert not [p for p in doctor.problems(dict(stack.load(), extras={"beam": ["not-installed-pkg==1.0"]}))]


def test_on_a_tpu_vm_doctor_names_what_it_found_and_the_fallback(monkeypatch):
    from tfsent.runtime import strategy

    monkeypatch.setattr(strategy, "_tpu_hint", lambda: "/dev/accel0")
    assert "strategy=auto would use: tpu (found /dev/accel0; if it cannot start: cpu)" in doctor.report()
    monkeypatch.setattr(strategy, "_tpu_hint", lambda: None)
    assert doctor.report()[-1] == "strategy=auto would use: cpu"
