"""pytorch_model.bin without torch: both torch.save layouts, a pickle that would run code never runs, and a tensor
is read exactly as torch indexes it, or refused in one line when it reaches outside its storage."""

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

from helpers import torch_files
from tfsent.models import torch_pickle
from tfsent.models.loading import CheckpointError
from tfsent.models.stored import StoredTensor

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


def test_files_torch_wrote_read_back_the_same_in_both_layouts(tmp_path):
    state = torch_pickle.load(FIXTURES / "bert_legacy_bin" / "pytorch_model.bin")
    assert all(isinstance(v, StoredTensor) for v in state.values())
    assert state["bert.embeddings.word_embeddings.weight"].shape[1] == 32
    arrays = {name: t.read() for name, t in state.items()}
    assert {name: (a.shape, a.dtype) for name, a in arrays.items()} == {
        name: (t.shape, t.dtype) for name, t in state.items()}
    for legacy in (False, True):  # written again without torch
        torch_files.write_state_dict(tmp_path / "again.bin", arrays, legacy=legacy)
        again = torch_pickle.load(tmp_path / "again.bin")
        assert list(again) == list(arrays)
        assert all(np.array_equal(again[name].read(), a) for name, a in arrays.items())


# A storage of 12 float32 elements, 0..11; views of it as (offset, sizes, strides) and what torch gives for each.
VIEWS = {
    "contiguous": (0, (3, 4), (4, 1), np.arange(12).reshape(3, 4)),
    "transposed": (0, (4, 3), (1, 4), np.arange(12).reshape(3, 4).T),
    "reversed": (3, (4,), (-1,), [3, 2, 1, 0]),
    "both-negative": (11, (2, 2), (-4, -1), [[11, 10], [7, 6]]),
    "expanded": (4, (2, 3), (0, 1), [[4, 5, 6], [4, 5, 6]]),
    "scalar": (7, (), (), 7),
    "empty-at-the-end": (12, (0, 5), (5, 1), np.zeros((0, 5))),
    "one-element-any-stride": (5, (1, 2), (10 ** 30, 1), [[5, 6]]),
}


def _storage_file(path, views: dict, *, legacy: bool, storage=None) -> None:
    storage = np.arange(12, dtype=np.float32) if storage is None else storage
    tensors = {name: torch_files.TensorSpec("0", *view[:3]) for name, view in views.items()}
    pickled = torch_files.state_dict_pickle(tensors, {"0": (storage.dtype.name, storage.size)}, legacy=legacy)
    if legacy:
        torch_files.write_legacy(path, pickled, ["0"], {"0": (storage.size, storage.tobytes())})
    else:
        torch_files.write_zip(path, pickled, {"0": storage.tobytes()})


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_views_read_exactly_as_torch_indexes_them(tmp_path, legacy):
    _storage_file(tmp_path / "views.bin", VIEWS, legacy=legacy)
    state = torch_pickle.load(tmp_path / "views.bin")
    for name, (_, size, _, want) in VIEWS.items():
        got = state[name].read()
        assert got.shape == size and got.dtype == np.float32, name
        np.testing.assert_array_equal(got, np.asarray(want, np.float32).reshape(size), err_msg=name)


OUTSIDE = {
    "below-the-offset": ((2, (4,), (-1,)), "reaches elements -1..2 of a storage of 12"),
    "far-both-ways": ((0, (2, 2), (100000, -100000)), "reaches elements -100000..100000 of a storage of 12"),
    "segfault-stride": ((11, (2,), (-10 ** 12,)), "reaches elements -999999999989..11 of a storage of 12"),
    "past-the-end": ((9, (2, 2), (2, 1)), "reaches elements 9..12 of a storage of 12"),
}


@pytest.mark.parametrize("name", list(OUTSIDE))
def test_a_view_outside_its_storage_is_one_line_naming_the_tensor(tmp_path, name):
    (offset, size, stride), reach = OUTSIDE[name]
    _storage_file(tmp_path / "bad.bin", {"w": (offset, size, stride)}, legacy=True)
    with pytest.raises(CheckpointError) as e:
        torch_pickle.load(tmp_path / "bad.bin")
    assert str(e.value) == (f"{tmp_path / 'bad.bin'}: tensor 'w' (sizes {list(size)}, strides {list(stride)}, offset "
                            f"{offset}) {reach}; refused (outside its storage: the file is damaged or crafted)")


@pytest.mark.parametrize("view, message", [
    ((0, (2, -1), (1, 1)), "negative size or offset (sizes [2, -1], offset 0)"),
    ((-1, (2,), (1,)), "negative size or offset (sizes [2], offset -1)"),
    ((13, (0,), (1,)), "offset 13 is past the end of its storage (12 elements)"),
    ((0, (2, 2), (1,)), "2 sizes but 1 strides"),
    ((0, (2.0,), (1,)), "its sizes (2.0,) are not a list of integers"),
    ((b"0", (2,), (1,)), "its storage offset b'0' is not an integer"),
    ((0, 5, (1,)), "its sizes 5 are not a list of integers"),
    ((0, (2 ** 62, 0), (0, 1)), f"sizes [{2 ** 62}, 0] are beyond any array's"),
])
def test_a_malformed_view_is_one_line_naming_the_tensor(tmp_path, view, message):
    _storage_file(tmp_path / "bad.bin", {"w": view}, legacy=False)
    with pytest.raises(CheckpointError) as e:
        torch_pickle.load(tmp_path / "bad.bin")
    assert str(e.value).startswith(f"{tmp_path / 'bad.bin'}: tensor 'w'") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_huge_expanded_view_is_read_only_when_asked(tmp_path):
    # A 10^6 x 10^6 view of one float (torch saves expand()-ed tensors with stride 0): listed at once, never copied
    # unless a model reads it (it was a 1 GiB copy, or a MemoryError traceback).
    _storage_file(tmp_path / "big.bin", {"w": (0, (10 ** 6, 10 ** 6), (0, 0)), "small": (0, (2, 3), (0, 0))},
                  legacy=False, storage=np.ones(1, np.float32))
    state = torch_pickle.load(tmp_path / "big.bin")
    assert state["w"].shape == (10 ** 6, 10 ** 6) and state["w"].size == 10 ** 12
    np.testing.assert_array_equal(state["small"].read(), np.ones((2, 3), np.float32))


def test_a_storage_whose_bytes_disagree_with_its_count_is_refused(tmp_path):
    pickled = torch_files.state_dict_pickle({"w": torch_files.TensorSpec("0", 0, (3,), (1,))},
                                            {"0": ("float32", 3)}, legacy=False)
    torch_files.write_zip(tmp_path / "zip.bin", pickled, {"0": b"\0" * 11})
    with pytest.raises(CheckpointError) as e:
        torch_pickle.load(tmp_path / "zip.bin")
    assert str(e.value) == (f"{tmp_path / 'zip.bin'}: storage 0 holds 11 bytes, but 3 elements of float32 take 12; "
                            "the file is damaged or crafted")
    pickled = torch_files.state_dict_pickle({"w": torch_files.TensorSpec("0", 0, (3,), (1,))},
                                            {"0": ("float32", 3)}, legacy=True)
    torch_files.write_legacy(tmp_path / "legacy.bin", pickled, ["0"], {"0": (4, b"\0" * 16)})
    with pytest.raises(CheckpointError) as e:
        torch_pickle.load(tmp_path / "legacy.bin")
    assert str(e.value) == (f"{tmp_path / 'legacy.bin'}: storage 0 holds 4 elements, but its tensors were saved with "
                            "3; the file is damaged or crafted")


def test_an_unknown_codec_and_a_compressed_member_are_one_line(tmp_path):
    pickled = torch_files.emit({"w": torch_files.Call(torch_files.Global("_codecs", "encode"), ("x", "no-such"))})
    torch_files.write_zip(tmp_path / "codec.bin", pickled, {})
    with pytest.raises(CheckpointError) as e:
        torch_pickle.load(tmp_path / "codec.bin")
    assert str(e.value) == (f"{tmp_path / 'codec.bin'}: its pickle asks for _codecs.encode with codec 'no-such'; a "
                            "PyTorch pickle encodes bytes as latin1 only")
    _storage_file(tmp_path / "deflated.bin", {"w": (0, (2,), (1,))}, legacy=False)
    with zipfile.ZipFile(tmp_path / "deflated.bin") as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    with zipfile.ZipFile(tmp_path / "deflated.bin", "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    with pytest.raises(CheckpointError, match=r"deflated\.bin: member archive/byteorder is compressed; torch\.save "
                                              r"stores every member uncompressed"):
        torch_pickle.load(tmp_path / "deflated.bin")


def test_pickles_that_would_allocate_gigabytes_or_alter_the_stand_ins_are_one_line(tmp_path):
    # Four bytes made the C unpickler zero a 30 GB memo: the pure-Python one keeps a dict, and loads this.
    memo = b"\x80\x02}r" + struct.pack("<I", 3805348113) + b"."
    torch_files.write_zip(tmp_path / "memo.bin", memo, {})
    assert torch_pickle.load(tmp_path / "memo.bin") == {}
    cases = {
        # BYTEARRAY8 of 2**40 bytes (protocol 5): allocated before it is read.
        "bytearray.bin": b"\x80\x05\x96" + struct.pack("<Q", 2 ** 40) + b".",
        # BUILD on a storage stand-in, after its size was checked.
        "build.bin": torch_files.emit(torch_files.Persistent(("storage", torch_files.Global("torch", "FloatStorage"),
                                                              "0", "cpu", 1)))[:-1] + torch_files._emit(
            {"numel": 10 ** 12}) + b"b.",
    }
    for name, pickled in cases.items():
        torch_files.write_zip(tmp_path / name, pickled, {"0": b"\0" * 4})
        with pytest.raises(CheckpointError) as e:
            torch_pickle.load(tmp_path / name)
        assert str(e.value).startswith(f"{tmp_path / name}: not a readable PyTorch checkpoint (UnpicklingError: a "
                                       + ("protocol-5 buffer opcode" if name == "bytearray.bin" else
                                          "pickle that sets the state of a _Storage")), str(e.value)
    # A legacy pickle claiming 2 GiB of text reads what the file holds, and stops.
    buf = io.BytesIO()
    for header in (torch_pickle.LEGACY_MAGIC, torch_pickle.LEGACY_PROTOCOL, {}):
        pickle.dump(header, buf, protocol=2)
    (tmp_path / "claim.bin").write_bytes(buf.getvalue() + b"\x80\x02X" + struct.pack("<I", 2 ** 31 - 1) + b"abc")
    with pytest.raises(CheckpointError, match=r"claim\.bin: not a readable PyTorch checkpoint \(EOFError\); the file "):
        torch_pickle.load(tmp_path / "claim.bin")


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
