"""Progress: Keras's live bar on a terminal and one line per epoch in a file or pipe; the bar ends its line before
callbacks log; preparation bars only on a terminal and never when turned off; prediction piped gets one line per
part; the quiet stderr filter passes a bar's redraws on at once."""

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tf_keras

from tfsent.config import ConfigError, TrainerSpec
from tfsent.data.features import encode_texts
from tfsent.models import load_tokenizer
from tfsent.runtime import progress
from tfsent.runtime.quiet import NativeLogFilter


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_fit_verbose_follows_the_terminal_unless_forced(tmp_path):
    assert progress.fit_verbose("auto", Terminal()) == progress.BAR == 1
    assert progress.fit_verbose("auto", io.StringIO()) == progress.EPOCH == 2
    with open(tmp_path / "train.log", "w") as log_file:
        assert progress.fit_verbose("auto", log_file) == 2
    assert progress.fit_verbose("bar", io.StringIO()) == 1
    assert progress.fit_verbose("epoch", Terminal()) == 2
    with pytest.raises(ConfigError, match=r"trainer\.progress='live'; expected one of auto, bar, epoch"):
        TrainerSpec(progress="live")


def test_bars_only_on_a_terminal_and_never_when_off(tmp_path):
    assert progress.bar_enabled(True, Terminal())
    assert not progress.bar_enabled(False, Terminal())
    with open(tmp_path / "prepare.log", "w") as log_file:
        assert not progress.bar_enabled(True, log_file)
    # Under pytest stderr is captured (not a terminal): the bar is off even when asked for.
    with progress.bar(total=3, desc="tokenize", unit="text", progress=True) as shown:
        assert shown.disable


def test_tokenizing_in_chunks_with_a_bar_gives_the_same_features():
    tokenizer = load_tokenizer("minilm_l6")
    texts = ["Profit rose.", "Sales fell sharply in the third quarter " * 20, "Flat."]
    whole, cut = encode_texts(tokenizer, texts, 16)
    pieces, cut_pieces = encode_texts(tokenizer, texts, 16, progress=True, chunk_size=2)
    assert whole.keys() == pieces.keys()
    for name in whole:
        np.testing.assert_array_equal(whole[name], pieces[name])
    assert cut.tolist() == cut_pieces.tolist() == [False, True, False]


def test_the_live_bar_ends_its_line_before_callbacks_log(monkeypatch):
    from tfsent.training.metrics import ClassPrecision

    class Report(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            print("REPORT written")

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    model = tf_keras.Sequential([tf_keras.layers.Dense(2)])
    model.compile(loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[ClassPrecision(0, 2, name="precision_negative")])
    verbose = progress.fit_verbose("auto")
    history = model.fit(np.zeros((8, 2)), np.zeros(8, np.int32), batch_size=4, epochs=1, verbose=verbose,
                        callbacks=progress.bar_first([Report()], verbose))
    shown = screen.getvalue()
    assert verbose == 1 and "2/2 [" in shown
    assert "\nREPORT written" in shown, shown  # not glued to the bar's unfinished line
    # Per-class metrics stay out of the live line (too wide to redraw in place), not out of the history.
    assert "loss:" in shown and "precision_negative" not in shown
    assert "precision_negative" in history.history


def test_quiet_filter_passes_a_bar_redraw_at_once_and_drops_native_lines():
    read_fd, write_fd = os.pipe()
    filt = NativeLogFilter()
    try:
        held = filt._forward(b"\rpredict: 1/3 rows", write_fd)
        assert held == b"" and os.read(read_fd, 1000) == b"\rpredict: 1/3 rows"  # no newline needed
        held = filt._forward(b"\rpredict: 2/3 rows W1203 10:00:00.123 42 x.cc:1] noise\nnext line\n", write_fd)
        assert held == b"" and os.read(read_fd, 1000) == b"\rpredict: 2/3 rows next line\n"
        # A native line cut mid-way is held until its end, then dropped.
        held = filt._forward(b"done\nI1203 10:00:00.5 7 y.cc:2] half", write_fd)
        assert held == b"I1203 10:00:00.5 7 y.cc:2] half" and os.read(read_fd, 1000) == b"done\n"
        assert filt._forward(held + b" of it\n", write_fd) == b""
        os.write(write_fd, b"end")
        assert os.read(read_fd, 1000) == b"end"
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_native_bar_gets_the_real_stderr_and_filtering_resumes_after():
    import subprocess

    script = (
        "import os\n"
        "from tfsent.runtime import quiet\n"
        "f = quiet.NativeLogFilter()\n"
        "f.start()\n"
        "os.write(2, b'W1203 10:00:00.1 1 a.cc:1] hidden before\\n')\n"
        "with f.paused():\n"
        "    os.write(2, b'W1203 10:00:00.2 1 b.cc:2] a native bar draws here\\n')\n"
        "os.write(2, b'W1203 10:00:00.3 1 c.cc:3] hidden after\\nkept\\n')\n"
        "f.stop()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.stderr == b"W1203 10:00:00.2 1 b.cc:2] a native bar draws here\nkept\n"


def test_quiet_filter_drops_a_beam_workers_start_up_lines():
    read_fd, write_fd = os.pipe()
    filt = NativeLogFilter()
    try:
        held = filt._forward(b"INFO:__main__:Logging handler created.\nWARNING:root:apitools not found, and\n"
                             b"TensorFlow and JAX classes are deprecated and will be removed\nerror: kept\n"
                             b"WARNING:apache_beam.options.pipeline_options:Disc", write_fd)
        assert held == b"WARNING:apache_beam.options.pipeline_options:Disc" and os.read(read_fd, 1000) == (
            b"error: kept\n")
        assert filt._forward(held + b"arding\nERROR:root:a worker failed\n", write_fd) == b""
        assert os.read(read_fd, 1000) == b"ERROR:root:a worker failed\n"
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_prediction_piped_gets_one_line_per_part_and_one_summary(tmp_path):
    from helpers.tiny import tiny_checkpoint

    ckpt = tiny_checkpoint(tmp_path / "model", max_seq_length=32)
    (tmp_path / "in.txt").write_text("".join(f"sentence {i} on margins\n" for i in range(10)))
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TF_CPP_MIN_LOG_LEVEL")}
    done = subprocess.run([sys.executable, "-m", "tfsent.predict", f"ckpt_path={ckpt}", "input=in.txt",
                           "output=out.csv", "strategy=cpu", "global_batch_size=4", "part_size=4"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\r" not in done.stderr + done.stdout
    assert [re.sub(r"\([\d.]+ s\)", "(s)", line) for line in done.stderr.splitlines()] == [
        "predict (classifier): part 1 done, 4 rows (s)", "predict (classifier): part 2 done, 8 rows (s)",
        "predict (classifier): part 3 done, 10 rows (s)"]
    assert re.fullmatch(r"predict: 10 rows in [\d.]+ s \([\d.]+ rows/s\) -> out\.csv; labels \{.*\}\n", done.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.csv", "out.run.json"]
