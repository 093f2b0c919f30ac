"""Scoring on a CPU with LiteRT and XNNPACK, in a process that never imports TensorFlow once the model is cached.

The model's reduced ``predict_step`` is converted once per checkpoint by TensorFlow's own converter
(:mod:`tfsent.inference.litert_convert`), with a dynamic batch and length, and cached under
``$TFSENT_CACHE_DIR/litert/<key>/`` (:func:`cache_key`: the checkpoint files' identity as the prediction
fingerprint takes it, the model kind, the versions of TensorFlow, transformers and tfsent, and the converter's
settings). Every later run reads the file, checks its sha256 against the one recorded when it was written (a damaged
file is converted again, never trusted) and runs it with LiteRT's interpreter, XNNPACK on as many threads as the
process may use (its CPU affinity mask).

:func:`predict_bucketed` runs the engine's plan (:mod:`tfsent.inference.plan`: packing, the exact ``example_id``
check) on it with the plan's exact shapes: a new shape compiles nothing here, so rows run sorted by length in batches
as long as their longest row (:func:`~tfsent.inference.plan.exact_batches`), not padded to buckets; the one model is
resized to each batch. A model or signature the converter cannot lower to LiteRT's builtins is recorded in the
cache as unsupported (with the reason), so later runs go to TensorFlow's path without trying again. Beside a
classifier's signatures the cache holds what its warm runs read instead of transformers' loaders: the folder's facts
and its tokenizer (:meth:`Cache.store_checkpoint`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata as md
import importlib.util
import json
import logging
import os
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

import tfsent
from tfsent.inference.packing import Packing, PackedRows
from tfsent.inference.plan import choose_units, plan_batches, reorder
from tfsent.inference.tokens import TokenRows
from tfsent.runtime import atomic, execution

log = logging.getLogger(__name__)

# /2: a classifier's last layer computed at its head tokens only (converted_step); /3: Dense layers traced as one
# matmul (litert_convert.dense_as_matmul). Files of an older format are converted again.
FORMAT = "tfsent.litert/3"
META = "meta.json"
# The checkpoint's tokenizer as transformers built it (tfsent.inference.stored_tokenizer), for warm runs.
TOKENIZER = "tokenizer.json"
# A signature's dynamic int8 file sits beside its float32 one: <signature>-int8-<ai-edge-quantizer version>.tflite.
INT8_SUFFIX = "-int8"


def available() -> bool:
    """Whether LiteRT (``ai-edge-litert``) is installed for this interpreter."""
    return importlib.util.find_spec("ai_edge_litert") is not None


def threads() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or ``taskset``'s share, not the host's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks (macOS)
        return max(1, os.cpu_count() or 1)


class LiteRTModel:
    """One converted signature, run by LiteRT's interpreter with XNNPACK, resized to each batch's shape.

    Args:
        flat: the ``.tflite`` bytes.
        threads: XNNPACK's threads (set explicitly: LiteRT's default is one).
    """

    def __init__(self, flat: bytes, threads: int):
        from ai_edge_litert.interpreter import Interpreter

        self.threads = threads
        self._interpreter = Interpreter(model_content=flat, num_threads=threads)
        self._runner = self._interpreter.get_signature_runner()
        self.inputs = tuple(sorted(self._runner.get_input_details()))

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for a batch holding (at least) its inputs, int32 ``[batch, length]``."""
        return self._runner(**{name: np.ascontiguousarray(batch[name], dtype=np.int32) for name in self.inputs})


def tensorflow_version() -> str | None:
    """The installed TensorFlow wheel's version, read from its metadata (importing TensorFlow takes seconds)."""
    from tfsent import stack

    versions = stack.installed_tensorflow()
    return next(iter(versions.values()), None)


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def cache_key(ckpt_files: list, ckpt_path: pathlib.Path, kind: str, settings: Mapping) -> str:
    """What a converted model depends on: the checkpoint (its files' name, size and mtime, as the prediction
    fingerprint takes them, and its resolved path), its kind, the converter's settings (a QA model's ``top_k``),
    and the versions of TensorFlow (the converter), transformers (the model's code) and tfsent (the reduced
    ``predict_step``)."""
    material = {"ckpt": str(pathlib.Path(ckpt_path).resolve()), "files": ckpt_files, "kind": kind,
                "settings": dict(settings), "tensorflow": tensorflow_version(), "transformers": _version("transformers"),
                "tfsent": tfsent.__version__, "format": FORMAT}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cache_root() -> pathlib.Path:
    """``$TFSENT_CACHE_DIR/litert`` (default ``~/.cache/tfsent/litert``), beside the execution cache."""
    return execution.cache_file().parent / "litert"


class Cache:
    """One checkpoint's folder of converted signatures: ``<signature>.tflite`` and ``meta.json`` (each file's
    sha256, what the model reads, the signatures that do not convert and why)."""

    def __init__(self, folder: pathlib.Path):
        self.folder = pathlib.Path(folder)

    def meta(self) -> dict:
        try:
            meta = json.loads((self.folder / META).read_text())
        except (OSError, ValueError):
            return {}  # missing or damaged: everything is converted again
        return meta if isinstance(meta, dict) and meta.get("format") == FORMAT else {}

    def load(self, signature: str) -> bytes | None:
        """A signature's bytes, or None when absent or when they no longer match their recorded sha256."""
        entry = self.meta().get("signatures", {}).get(signature)
        if not isinstance(entry, dict):
            return None
        try:
            flat = (self.folder / f"{signature}.tflite").read_bytes()
        except OSError:
            return None
        if hashlib.sha256(flat).hexdigest() != entry.get("sha256"):
            log.warning("%s: %s.tflite does not match the sha256 recorded when it was written; converting again",
                        self.folder, signature)
            return None
        return flat

    def decided(self, signature: str) -> bool:
        """Whether an earlier run converted the signature, or found that it does not convert."""
        meta = self.meta()
        return signature in meta.get("signatures", {}) or signature in meta.get("unsupported", {})

    def unsupported(self, signature: str) -> str | None:
        """Why a signature does not convert, when an earlier run found out."""
        return self.meta().get("unsupported", {}).get(signature)

    def facts(self) -> dict:
        """What the converted model reads, recorded at conversion (features, positions of packed segments)."""
        return self.meta().get("facts", {})

    def checkpoint(self) -> tuple[dict, str] | None:
        """What a converting run stored of the checkpoint (:meth:`store_checkpoint`): its facts and its tokenizer's
        ``tokenizer.json``; None when absent or when the file no longer matches its recorded sha256."""
        record = self.meta().get("checkpoint")
        if not isinstance(record, dict) or not isinstance(record.get("tokenizer"), dict):
            return None
        try:
            text = (self.folder / TOKENIZER).read_text(encoding="utf-8")
        except (OSError, ValueError):
            return None
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != record["tokenizer"].get("sha256"):
            log.warning("%s: %s does not match the sha256 recorded when it was written; it is stored again",
                        self.folder, TOKENIZER)
            return None
        return record, text

    def store_checkpoint(self, facts: Mapping, tokenizer: Mapping) -> None:
        """Store what a warm run reads of the checkpoint instead of transformers' loaders: its facts
        (``tfsent.models.facts.facts_record``) and its tokenizer (``tfsent.inference.stored_tokenizer.definition``);
        beside converted signatures only, atomically, best effort."""
        meta = self.meta()
        if not meta.get("signatures"):
            return
        try:
            atomic.write_text(self.folder / TOKENIZER, tokenizer["json"])
            meta["checkpoint"] = {"facts": dict(facts),
                                  "tokenizer": {k: v for k, v in tokenizer.items() if k != "json"}}
            atomic.write_text(self.folder / META, json.dumps(meta, indent=1, sort_keys=True))
        except OSError as e:
            log.warning("LiteRT cache %s: the checkpoint's facts not stored (%s)", self.folder, e.strerror or e)

    def store(self, signature: str, flat: bytes | None, facts: Mapping, reason: str | None = None) -> None:
        """Record a converted signature (or, with ``reason``, one that does not convert), atomically; an
        unwritable cache costs the next run a conversion, never this run."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if flat is not None:
                with atomic.open_for_write(self.folder / f"{signature}.tflite", "wb") as f:
                    f.write(flat)
            meta = self.meta() or {"format": FORMAT, "signatures": {}, "unsupported": {}}
            meta["facts"] = dict(facts)
            if flat is not None:
                meta["signatures"][signature] = {"sha256": hashlib.sha256(flat).hexdigest(), "bytes": len(flat)}
                meta["unsupported"].pop(signature, None)
            else:
                meta["unsupported"][signature] = reason
            atomic.write_text(self.folder / META, json.dumps(meta, indent=1, sort_keys=True))
        except OSError as e:
            log.warning("LiteRT cache %s not written (%s); the next run converts again", self.folder,
                        e.strerror or e)


class Unsupported(Exception):
    """A signature that does not convert to LiteRT's builtins (the reason is its message)."""


@dataclasses.dataclass
class LiteRTBackend:
    """A checkpoint's converted model, one :class:`LiteRTModel` per signature, converted (or read) on first use.

    Attributes:
        cache: its cache folder.
        build: loads the TensorFlow model, for a conversion (imports TensorFlow; called at most once).
        threads: XNNPACK's threads.
        int8: run each signature's dynamic int8 file (:func:`quantize`), made from its float32 one.
        facts: what the converted model reads (``features``, ``first_position``, ``packing_gap``).
    """

    cache: Cache
    build: Callable[[], object]
    threads: int
    int8: bool = False
    facts: dict = dataclasses.field(default_factory=dict)
    convert_seconds: float = 0.0
    _models: dict = dataclasses.field(default_factory=dict)
    _tf_model: object = None

    def model(self, signature: str) -> LiteRTModel:
        """The signature's model: read from the cache, or converted now (and cached).

        Raises:
            Unsupported: it does not convert (found now, or recorded by an earlier run).
        """
        if signature not in self._models:
            self._models[signature] = LiteRTModel(self._flat(signature), self.threads)
        return self._models[signature]

    def supports(self, signature: str) -> bool:
        """Whether the signature runs on LiteRT (converting it now if no run did yet)."""
        try:
            self.model(signature)
        except Unsupported as e:
            log.info("LiteRT: the %s model does not convert (%s)", signature, e)
            return False
        return True

    def _flat(self, signature: str) -> bytes:
        if not self.int8:
            return self._float32(signature)
        name = f"{signature}{INT8_SUFFIX}-{_version('ai-edge-quantizer')}"  # a new quantizer writes a new file
        flat = self.cache.load(name)
        if flat is None:
            float32 = self._float32(signature)
            began = time.perf_counter()
            try:
                flat = quantize(float32)
            except Exception as e:  # the quantizer's own errors (an operator it cannot rewrite) carry no common type
                raise Unsupported(f"ai-edge-quantizer: {type(e).__name__}: {str(e).splitlines()[0][:160]}") from None
            finally:
                self.convert_seconds += time.perf_counter() - began
            self.cache.store(name, flat, self.facts)
        self.facts = self.facts or self.cache.facts()
        return flat

    def _float32(self, signature: str) -> bytes:
        reason = self.cache.unsupported(signature)
        if reason is not None:
            raise Unsupported(reason)
        flat = self.cache.load(signature)
        if flat is not None:
            self.facts = self.facts or self.cache.facts()
            return flat
        from tfsent.inference import litert_convert

        began = time.perf_counter()
        if self._tf_model is None:
            log.info("LiteRT: converting the model once (cached in %s)", self.cache.folder)
            self._tf_model = self.build()
        model = self._tf_model
        self.facts = {"features": list(model.features), "first_position": model.first_position(),
                      "packing_gap": model.architecture.packing_gap(model.hf_model.config)}
        try:
            flat = litert_convert.convert(model, signature)
        except litert_convert.Unsupported as e:
            self.cache.store(signature, None, self.facts, reason=str(e))
            raise Unsupported(str(e)) from None
        finally:
            self.convert_seconds += time.perf_counter() - began
        self.cache.store(signature, flat, self.facts)
        return flat


def quantize(flat: bytes) -> bytes:
    """A float32 ``.tflite`` file with dynamic int8 matrix multiplications (ai-edge-quantizer, no TensorFlow).

    Every ``FULLY_CONNECTED`` weight becomes int8 per output channel; at run time XNNPACK quantizes each layer's
    input per row and multiplies in int8. Everything else stays float32: the embeddings (their int8 tables cost
    PhraseBank labels: 99.24% equal to float32 with TensorFlow's own dynamic-range quantizer, 99.59% without),
    attention's activation products, LayerNorm, softmax and the head's reductions.
    """
    from ai_edge_quantizer import qtyping, quantizer

    q = quantizer.Quantizer(flat)
    q.add_dynamic_config(".*", qtyping.TFLOperationName.FULLY_CONNECTED, 8)
    return bytes(q.quantize().quantized_model)


def open_backend(cache: Cache, build: Callable[[], object], *, num_threads: int | None = None,
                 int8: bool = False) -> LiteRTBackend:
    """The LiteRT backend of a checkpoint: its cache folder (:func:`cache_for`), and ``build`` for the one conversion
    it may need.

    Args:
        cache: the checkpoint's cache folder.
        build: loads the TensorFlow model (imports TensorFlow), only when a signature must be converted.
        num_threads: XNNPACK's threads; default :func:`threads`.
        int8: score with the dynamic int8 files (``precision=int8``).
    """
    return LiteRTBackend(cache, build, num_threads or threads(), int8)


def cache_for(ckpt_path: pathlib.Path, ckpt_files: list, kind: str, settings: Mapping) -> Cache:
    """A checkpoint's cache folder (:func:`cache_key`), whether or not anything is in it yet."""
    return Cache(cache_root() / cache_key(ckpt_files, ckpt_path, kind, settings))


def predict_bucketed(backend: LiteRTBackend, tokens: TokenRows, *, buckets: Sequence[int], global_batch_size: int,
                     pad_values: Mapping[str, int] | None = None, on_rows: Callable[[int], None] | None = None,
                     packing: Packing | None = None) -> dict[str, np.ndarray]:
    """:func:`tfsent.inference.engine.predict_bucketed`'s outputs, run on LiteRT (one replica) in exact shapes.

    Args:
        backend: the converted model.
        tokens: the rows' token features.
        buckets: sorted bucket lengths: the top one caps a row; packing plans with them.
        global_batch_size: rows per batch.
        pad_values: pad value per feature.
        on_rows: called after each batch with the units it ran (rows or packed sequences).
        packing: pack rows into sequences (the ``packed`` signature must convert; the caller checks).

    Returns:
        The model's outputs, one row per input row, in row order.

    Raises:
        ValueError: no rows, a row longer than the top bucket, or ids that do not come back exactly once.
    """
    n = len(tokens)
    if n == 0:
        raise ValueError("nothing to predict: 0 rows")
    units = choose_units(tokens, buckets, packing, pad_values or {}, global_batch_size, exact=True)
    packed = isinstance(units, PackedRows)
    if packed and not backend.supports("packed"):  # converted on the first part that packs, at most once
        units, packed = choose_units(tokens, buckets, None, pad_values or {}, global_batch_size, exact=True), False
    model = backend.model("packed" if packed else "padded")
    pieces: list[dict[str, np.ndarray]] = []
    for length, mine, batch, steps in plan_batches(units.lengths, buckets, global_batch_size, exact=True):
        arrays = units.batch(mine, length, batch)
        for step in range(steps):
            rows = slice(step * batch, (step + 1) * batch)
            out = model({k: v[rows] for k, v in arrays.items()})
            out["example_id"] = arrays["example_id"][rows].reshape(-1)
            pieces.append(out)
            if on_rows:
                on_rows(batch)
    return reorder(pieces, n)
