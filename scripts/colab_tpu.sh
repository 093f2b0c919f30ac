#!/usr/bin/env bash
# Colab / Kaggle / Cloud TPU VM: install the TPU build of TensorFlow (+ libtpu) and tfsent, then run the demo on
# the TPU (`make colab-tpu`): `make demo`'s commands (scripts/demo.sh) with strategy=tpu. Nothing here ran on a TPU
# while it was written: see docs/TPU.md for what was tested.
#
#   bash scripts/colab_tpu.sh              # install, then the demo (train, sentences, transcripts) with strategy=tpu
#   INSTALL=0 bash scripts/colab_tpu.sh    # demo only (already installed)
#   DEMO=0 bash scripts/colab_tpu.sh       # install only
#   DRY_RUN=1 bash scripts/colab_tpu.sh    # print the commands instead of running them
#
# Why the install is split: tfsent's own metadata asks for tensorflow-cpu (the CPU wheel), and tf-keras's and
# tensorflow-text's ask for `tensorflow`; any of them would land a second TensorFlow beside tensorflow-tpu. So
# TensorFlow is the TPU build from the libtpu wheel index, at the major.minor in tfsent/stack.toml (the version
# every test runs on), kept as it is when the runtime already has that TPU build; tf-keras, tensorflow-text, the
# offline checkpoint and tfsent itself go in with --no-deps.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
LIBTPU_INDEX="${LIBTPU_INDEX:-https://storage.googleapis.com/libtpu-tf-releases/index.html}"

run() {
  echo "+ $*"
  if [[ "${DRY_RUN:-0}" != 1 ]]; then "$@"; fi
}

if [[ "${INSTALL:-1}" == 1 ]]; then
  echo "colab_tpu: TensorFlow $("$PYTHON" tfsent/stack.py tensorflow).x (tfsent/stack.toml)"
  # keep / uninstall / install lines, decided from the TensorFlow wheels this interpreter has now.
  mapfile -t plan < <("$PYTHON" tfsent/stack.py tpu-plan)
  for step in "${plan[@]}"; do
    read -r action name version <<<"$step"
    case "$action" in
      keep) echo "colab_tpu: keeping the preinstalled TPU build $name $version" ;;
      uninstall) run "$PYTHON" -m pip uninstall -y -q "$name" ;;
      install) run "$PYTHON" -m pip install -q "$name" -f "$LIBTPU_INDEX" ;;
    esac
  done
  mapfile -t no_deps < <("$PYTHON" tfsent/stack.py no-deps)
  run "$PYTHON" -m pip install -q --no-deps "${no_deps[@]}"
  # tfsent's runtime dependencies except the tensorflow-cpu wheel (from pyproject.toml and the stack file).
  mapfile -t deps < <("$PYTHON" tfsent/stack.py base-deps)
  run "$PYTHON" -m pip install -q "${deps[@]}"
  run "$PYTHON" -m pip install -q --no-deps -e .
  run "$PYTHON" -m tfsent.doctor
fi

if [[ "${DEMO:-1}" == 1 ]]; then
  # `make demo`'s commands; only the strategy differs (and it is the only TPU-specific code: the resolver).
  # RUN_DIR, TRANSCRIPTS and DRY_RUN pass through the environment.
  PYTHON="$PYTHON" STRATEGY=tpu bash scripts/demo.sh
fi
