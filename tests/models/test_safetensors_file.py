"""model.safetensors read with its header checked first: the values of a sound file, one line naming the file (and
the tensor) for every way a header can lie, and no value read before a model asks for it."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from tfsent.models import safetensors_file
from tfsent.models.loading import CheckpointError


def _write(path, header, data: bytes, length: int | None = None) -> None:
    text = header if isinstance(header, (str, bytes)) else json.dumps(header)
    text = text.encode() if isinstance(text, str) else text
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def test_a_sound_file_reads_like_the_library_writes_it(tmp_path):
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64),
              "s": np.array(3.5, np.float16), "e": np.zeros((0, 4), np.float32)}
    safetensors.numpy.save_file(arrays, str(tmp_path / "m.safetensors"), metadata={"format": "pt"})
    metadata, tensors = safetensors_file.read(tmp_path / "m.safetensors")
    assert metadata == {"format": "pt"} and set(tensors) == set(arrays)
    for name, want in arrays.items():
        got = tensors[name].read()
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_bfloat16_reads_without_torch(tmp_path):
    # The library's numpy reader has no bfloat16 ("data type 'bfloat16' not understood"); tfsent reads it.
    values = np.array([1.5, -2.0, 3.0], ml_dtypes.bfloat16)
    _write(tmp_path / "m.safetensors", {"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}},
           values.tobytes())
    got = safetensors_file.read(tmp_path / "m.safetensors")[1]["w"].read()
    assert got.dtype == ml_dtypes.bfloat16 and got.tolist() == [1.5, -2.0, 3.0]


W = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
B = {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}
DATA = np.arange(3, dtype=np.float32).tobytes()


@pytest.mark.parametrize("header, data, length, message", [
    ({"w": W}, DATA[:8], 10 ** 9, "a header of 1000000000 bytes (over 100000000); not a safetensors file"),
    ({"w": W}, DATA[:8], 5000, "a header of 5000 bytes in a file of"),
    ("{not json", b"", None, "its header is not valid JSON (JSONDecodeError: "),
    (b"{\"w\": \xff}", b"", None, "its header is not valid JSON (UnicodeDecodeError: "),
    ("[1, 2]", b"", None, "its header is a JSON list, not an object"),
    ('{"w": %s, "w": %s}' % (json.dumps(W), json.dumps(W)), DATA[:8], None,
     "its header is not valid JSON (ValueError: key 'w' appears twice)"),
    ({"w": {**W, "dtype": "C64"}}, DATA[:8], None, "tensor 'w': dtype 'C64'; tfsent reads F64, F32"),
    ({"w": {**W, "shape": [-2]}}, DATA[:8], None, "tensor 'w': shape [-2] is not a list of non-negative integers"),
    ({"w": {**W, "shape": [2.0]}}, DATA[:8], None, "tensor 'w': shape [2.0] is not a list of non-negative integers"),
    ({"w": {**W, "data_offsets": [4, 0]}}, DATA[:8], None, "tensor 'w': data_offsets [4, 0] are not [begin, end]"),
    ({"w": {**W, "data_offsets": [0, 2 ** 64]}}, DATA[:8], None,
     f"tensor 'w': takes {2 ** 64} bytes, but shape [2] of F32 needs 8"),
    ({"w": {**W, "shape": [2 ** 62]}}, DATA[:8], None, f"tensor 'w': takes 8 bytes, but shape [{2 ** 62}] of F32"),
    ({"w": W, "b": {**B, "data_offsets": [4, 8]}}, DATA, None,
     "tensor 'b' starts at byte 4 of the data, expected 8 (tensors must follow one another"),
    ({"w": W, "b": {**B, "data_offsets": [12, 16]}}, DATA + DATA[:4], None,
     "tensor 'b' starts at byte 12 of the data, expected 8"),
    ({"w": W}, DATA, None, "its tensors take 8 bytes, but the file holds 12 after the header"),
    ({"w": W, "b": B}, DATA[:8], None, "its tensors take 12 bytes, but the file holds 8 after the header"),
    ({"__metadata__": {"format": 1}, "w": W}, DATA[:8], None, "its __metadata__ is not a map of strings"),
    ({"w": [0, 8]}, DATA[:8], None, "tensor 'w': its header entry lacks dtype, shape or data_offsets"),
])
def test_a_header_that_lies_is_one_line_naming_the_file(tmp_path, header, data, length, message):
    path = tmp_path / "m.safetensors"
    _write(path, header, data, length)
    with pytest.raises(CheckpointError) as e:
        safetensors_file.read(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_short_files_are_one_line(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\x10\x00")
    with pytest.raises(CheckpointError, match=r"m\.safetensors: 2 bytes, shorter than a safetensors header's length"):
        safetensors_file.read(path)


def test_values_are_read_when_asked_and_a_file_cut_since_is_one_line(tmp_path):
    path = tmp_path / "m.safetensors"
    _write(path, {"w": W, "b": B}, DATA)
    tensors = safetensors_file.read(path)[1]
    path.write_bytes(path.read_bytes()[:-2])  # cut short after the header was checked
    np.testing.assert_array_equal(tensors["w"].read(), [0, 1])
    with pytest.raises(CheckpointError) as e:
        tensors["b"].read()
    assert str(e.value) == (f"{path}: tensor 'b' cannot be read (EOFError: its 4 bytes end past the end of the "
                            "file); the file is damaged or cut short")
