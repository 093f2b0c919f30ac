"""The tested software stack, read from ``stack.toml`` beside this file.

Runs without tfsent or TensorFlow installed (``make install`` and ``scripts/colab_tpu.sh`` call it as a script
before anything else is in place), so it imports nothing but the standard library:

    python tfsent/stack.py no-deps       # requirement lines installed with --no-deps
    python tfsent/stack.py tensorflow    # the TensorFlow major.minor, e.g. 2.20
    python tfsent/stack.py tpu-plan      # what a TPU VM must uninstall / keep / install (scripts/colab_tpu.sh)
    python tfsent/stack.py base-deps     # tfsent's dependencies without the tensorflow-cpu wheel (from a checkout)
    python tfsent/stack.py extras        # the optional extras' names (beam, ...)
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

STACK_FILE = Path(__file__).with_name("stack.toml")
# Distributions that provide the `tensorflow` package; a TPU VM must end with exactly one, the TPU build.
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-intel", "tensorflow-macos",
                    "tensorflow-aarch64", "tf-nightly", "tf-nightly-cpu")


def load(path: Path = STACK_FILE) -> dict:
    """The parsed stack file."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def tensorflow_version(stack: dict | None = None) -> str:
    """The supported TensorFlow major.minor (``"2.20"``)."""
    return (stack or load())["tensorflow"]


def no_deps_requirements(stack: dict | None = None) -> list[str]:
    """Requirement lines for the packages installed with ``--no-deps`` (tf-keras, tensorflow-text, ...)."""
    stack = stack or load()
    return [name + spec.format(tensorflow=stack["tensorflow"]) for name, spec in stack["no_deps"].items()]


def runtime_pins(stack: dict | None = None) -> list[str]:
    """Requirement lines that pyproject's dependencies take from the stack (TensorFlow CPU wheel, transformers,
    LiteRT and its quantizer)."""
    stack = stack or load()
    return [f"tensorflow-cpu=={stack['tensorflow']}.*; sys_platform == 'linux' and platform_machine == 'x86_64'",
            f"transformers=={stack['transformers']}",
            f"ai-edge-litert=={stack['litert']}.*; sys_platform == 'linux' and platform_machine == 'x86_64'",
            f"ai-edge-quantizer=={stack['litert_quantizer']}.*; sys_platform == 'linux' and platform_machine == 'x86_64'"]


def extras(stack: dict | None = None) -> dict[str, list[str]]:
    """Requirement lines of each optional extra (``{"beam": ["apache-beam>=2.77,<2.78"]}``)."""
    return {name: list(pins) for name, pins in (stack or load()).get("extras", {}).items()}


def installed_tensorflow() -> dict[str, str]:
    """{distribution: version} of the TensorFlow wheels installed for this interpreter."""
    found = {}
    for name in TF_DISTRIBUTIONS:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return found


def tpu_plan(installed: dict[str, str], stack: dict | None = None) -> list[str]:
    """What a TPU VM must do to end with the TPU build of the supported TensorFlow and nothing else.

    A runtime's preinstalled ``tensorflow-tpu`` of the supported major.minor is kept (it was built for that VM's
    libtpu); any other TensorFlow wheel (a CPU/GPU build, or another version) is uninstalled, because two wheels
    share the ``tensorflow`` package and the last one installed silently wins.

    Args:
        installed: {distribution: version} of the TensorFlow wheels present (:func:`installed_tensorflow`).
        stack: the stack file's contents; default: ``stack.toml``.

    Returns:
        Lines ``keep NAME VERSION``, ``uninstall NAME VERSION`` and ``install REQUIREMENT``, in that order of
        execution (uninstalls first).
    """
    version = tensorflow_version(stack)
    keep = installed.get("tensorflow-tpu", "").split(".")[:2] == version.split(".")
    plan = [f"uninstall {name} {v}" for name, v in sorted(installed.items())
            if not (keep and name == "tensorflow-tpu")]
    if keep:
        return [f"keep tensorflow-tpu {installed['tensorflow-tpu']}"] + plan
    return plan + [f"install tensorflow-tpu=={version}.*"]


def base_dependencies(pyproject: Path = STACK_FILE.parents[1] / "pyproject.toml") -> list[str]:
    """tfsent's dependencies less the tensorflow-cpu wheel: what a TPU VM installs beside tensorflow-tpu."""
    with open(pyproject, "rb") as f:
        listed = tomllib.load(f)["tool"]["hatch"]["metadata"]["hooks"]["custom"]["dependencies"]
    return [pin for pin in runtime_pins() if not pin.startswith("tensorflow-cpu")] + listed


def main(argv: list[str]) -> int:
    commands = {"no-deps": lambda: "\n".join(no_deps_requirements()),
                "tensorflow": tensorflow_version,
                "transformers": lambda: load()["transformers"],
                "tpu-plan": lambda: "\n".join(tpu_plan(installed_tensorflow())),
                "base-deps": lambda: "\n".join(base_dependencies()),
                "extras": lambda: "\n".join(extras())}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python tfsent/stack.py {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    print(commands[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
