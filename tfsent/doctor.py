"""Install check: the tested stack (``tfsent/stack.toml``), exactly one TensorFlow wheel, and what ``auto`` picks.

``tf-keras`` and ``tensorflow-text`` declare a dependency on the ``tensorflow`` wheel; installed naively beside
``tensorflow-cpu`` (or the TPU build) they drag in a second, conflicting TensorFlow. ``make install`` avoids that;
this module proves it, prints every version that matters, and says which strategy ``strategy=auto`` would use.
Run: ``python -m tfsent.doctor``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import platform
import sys

from packaging.requirements import Requirement

from tfsent import stack

# Printed with their versions: what decides whether a run behaves like the tested one.
REPORTED = ("tf-keras", "tensorflow-text", "transformers", "ai-edge-litert", "tokenizers", "safetensors", "numpy",
            "protobuf", "pyarrow", "hydra-core", "tensorboard", "apache-beam")


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def problems(spec: dict | None = None) -> list[str]:
    """Everything wrong with the installation, as sentences; empty when healthy.

    Args:
        spec: the stack file's contents; default: ``tfsent/stack.toml``.
    """
    spec = spec or stack.load()
    tf_version, found = spec["tensorflow"], []
    wheels = list(stack.installed_tensorflow().items())
    if len(wheels) != 1:
        found.append(f"expected exactly one TensorFlow wheel, found {wheels or 'none'}; "
                     "uninstall all and run `make install`")
    elif _major_minor(wheels[0][1]) != tf_version:
        found.append(f"{wheels[0][0]} {wheels[0][1]} is installed; tfsent is tested on {tf_version}.x "
                     "(tfsent/stack.toml): run `make install`")
    for name in stack.no_deps_requirements(spec):
        dist = name.split("==")[0]
        version = _version(dist)
        if version is None:
            found.append(f"{dist} is missing: `make install` installs it with --no-deps")
        elif dist in ("tf-keras", "tensorflow-text") and _major_minor(version) != tf_version:
            found.append(f"{dist} {version} does not match TensorFlow {tf_version} (tfsent/stack.toml)")
    if (version := _version("transformers")) != spec["transformers"]:
        found.append(f"transformers {version or 'is missing'}; tfsent needs exactly {spec['transformers']} "
                     "(v5 removed the TensorFlow classes)")
    if (version := _version("ai-edge-litert")) is not None and _major_minor(version) != spec["litert"]:
        found.append(f"ai-edge-litert {version} is installed; tfsent is tested on {spec['litert']}.x "
                     "(tfsent/stack.toml): run `make install`")
    for extra, pins in stack.extras(spec).items():
        for pin in pins:
            requirement = Requirement(pin)
            version = _version(requirement.name)
            if version is not None and version not in requirement.specifier:
                found.append(f"{requirement.name} {version} is installed; the {extra} extra is tested on "
                             f"{requirement.specifier} (tfsent/stack.toml): run `make install-{extra}`")
    if importlib.util.find_spec("tensorboard") is None:
        found.append("tensorboard is missing (the default TensorBoard callback needs it): pip install -e .")
    return found


def report() -> list[str]:
    """One line per version that matters, then the strategy ``auto`` would pick (imports TensorFlow)."""
    wheels = list(stack.installed_tensorflow().items())
    lines = [f"python {platform.python_version()} ({platform.machine()})",
             "tensorflow wheel: " + (", ".join(f"{n} {v}" for n, v in wheels) or "none")]
    lines += [f"{name} {_version(name) or '-'}" for name in REPORTED]
    if importlib.util.find_spec("torch") is not None:
        lines.append(f"torch {_version('torch')} (tfsent does not use it; benchmarks may)")
    if wheels:
        import tfsent  # noqa: F401  (legacy Keras before TensorFlow loads)
        from tfsent.runtime.strategy import auto_choice
        lines.append(f"strategy=auto would use: {auto_choice()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m tfsent.doctor``: print the report, then ``ok`` (status 0) or each problem (status 1)."""
    argparse.ArgumentParser(
        prog="python -m tfsent.doctor",
        description="Print the versions that matter (tfsent/stack.toml), the TensorFlow wheels installed and the "
                    "strategy strategy=auto would use; exit 1 when the install differs from the tested stack.",
    ).parse_args(argv)
    found = problems()
    for line in report():
        print(f"doctor: {line}")
    for line in found:
        print(f"doctor: problem: {line}", file=sys.stderr)
    if not found:
        print(f"doctor: ok (TensorFlow {stack.tensorflow_version()}.x stack, tfsent/stack.toml)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
