"""pytorch_model.bin without torch: both torch.save layouts, and a pickle that would run code never runs."""

import io
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tfsent.models import torch_pickle
from tfsent.models.loading import CheckpointError

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"


class _Global:
    """Pickles as a reference to ``module.name`` called with ``args`` (what torch.save's pickles contain)."""

    def __init__(self, module, name, *args):
        self.module, self.name, self.args = module, name, args

    def __reduce__(self):
        return _stub(self.module, self.name), self.args


def _stub(module, name):
    # A stand-in function whose pickled reference reads `module.name`.
    def f(*a):
        return None
    f.__module__, f.__qualname__, f.__name__ = module, name, name
    sys.modules.setdefault(module, type(sys)(module))
    setattr(sys.modules[module], name, f)
    return f


def _evil_zip(path, command):
    """A zip-layout .bin whose data.pkl calls os.system(command) when unpickled by an ordinary unpickler."""
    payload = pickle.dumps({"w": _Global("os", "system", command)}, protocol=2)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", "3\n")


def _evil_legacy(path, command):
    with open(path, "wb") as f:
        for header in (torch_pickle.LEGACY_MAGIC, torch_pickle.LEGACY_PROTOCOL, {"little_endian": True}):
            pickle.dump(header, f, protocol=2)
        f.write(pickle.dumps(_Global("posix", "system", command), protocol=2))


@pytest.mark.parametrize("write", [_evil_zip, _evil_legacy], ids=["zip", "legacy"])
def test_a_pickle_that_runs_a_command_is_refused_before_it_runs(write, tmp_path):
    marker = tmp_path / "pwned"
    write(tmp_path / "pytorch_model.bin", f"touch {marker}")
    # The payload is real: an ordinary unpickler would run the command.
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: its pickle asks for (os|posix)\.system, which "
                                              r"a tensor checkpoint never needs; refused before anything ran"):
        torch_pickle.load(tmp_path / "pytorch_model.bin")
    assert not marker.exists()


def test_the_command_line_refuses_it_in_one_line(tmp_path):
    marker = tmp_path / "pwned"
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("config.json", "vocab.txt"):
        (folder / name).write_bytes((FIXTURES / "bert_legacy_bin" / name).read_bytes())
    _evil_zip(folder / "pytorch_model.bin", f"touch {marker}")
    (tmp_path / "in.txt").write_text("profit rose\n")
    proc = subprocess.run([sys.executable, "-m", "tfsent.predict", f"ckpt_path={folder}", f"input={tmp_path / 'in.txt'}",
                           f"output={tmp_path / 'out.csv'}"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "os.system" in errors[0] and "Traceback" not in proc.stderr
    assert not marker.exists() and not (tmp_path / "out.csv").exists()


def test_legacy_file_reads_like_torch_wrote_it():
    state = torch_pickle.load(FIXTURES / "bert_legacy_bin" / "pytorch_model.bin")
    assert state["bert.embeddings.word_embeddings.weight"].shape[1] == 32
    assert all(isinstance(v, np.ndarray) for v in state.values())


def test_cut_short_and_foreign_files_are_one_line(tmp_path):
    raw = (FIXTURES / "bert_legacy_bin" / "pytorch_model.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(raw[:len(raw) - 100])
    with pytest.raises(CheckpointError, match=r"cut\.bin: storage .* is cut short"):
        torch_pickle.load(tmp_path / "cut.bin")
    (tmp_path / "text.bin").write_bytes(b"hello world\n")
    with pytest.raises(CheckpointError, match=r"text\.bin: not a readable PyTorch checkpoint"):
        torch_pickle.load(tmp_path / "text.bin")
    buf = io.BytesIO()
    for header in (torch_pickle.LEGACY_MAGIC, torch_pickle.LEGACY_PROTOCOL, {}):
        pickle.dump(header, buf, protocol=2)
    pickle.dump([1, 2], buf, protocol=2)
    (tmp_path / "list.bin").write_bytes(buf.getvalue() + pickle.dumps([]) + struct.pack("<q", 0))
    with pytest.raises(CheckpointError, match=r"list\.bin: holds a list, not a state dict"):
        torch_pickle.load(tmp_path / "list.bin")
