"""TensorFlow Datasets builder for Financial PhraseBank v1.0 from a local folder (nothing is downloaded).

Importing this module registers the builder, after which ``tfds.load`` works offline::

    import tfsent.data.phrasebank_tfds  # noqa: F401  (registers "financial_phrasebank")
    ds = tfds.load("financial_phrasebank/sentences_allagree", split="train", data_dir="/tmp/tfds",
                   builder_kwargs={"source_dir": "data/financial_phrasebank"})

The source folder is ``source_dir`` if given, else the TFDS manual folder (``download_config.manual_dir``) when
it holds the files, else the copy tfsent ships (``financial_phrasebank`` in :func:`tfsent.config.data_dir`: the
repository's ``data/``, or the installed package's ``datasets/``). The release has no official split, so
there is one ``train`` split in file order; carve validation/test with ``tfds.Split`` slicing or use
``tfsent.prepare`` (stratified, seeded).
"""

from __future__ import annotations

import pathlib

import tensorflow_datasets as tfds
from etils import epath

from tfsent.config import data_dir
from tfsent.data.sources import PHRASEBANK_LABELS, read_records


_CITATION = """@article{malo2014good,
  title={Good debt or bad debt: Detecting semantic orientations in economic texts},
  author={Malo, Pekka and Sinha, Ankur and Korhonen, Pekka and Wallenius, Jyrki and Takala, Pyry},
  journal={Journal of the Association for Information Science and Technology}, volume={65}, number={4},
  pages={782--796}, year={2014}}"""


class PhrasebankConfig(tfds.core.BuilderConfig):
    """One agreement level: which ``Sentences_*.txt`` file to read."""

    def __init__(self, *, filename: str, **kwargs):
        super().__init__(**kwargs)
        self.filename = filename


class FinancialPhrasebank(tfds.core.GeneratorBasedBuilder):
    """Financial PhraseBank sentences labeled negative/neutral/positive (CC BY-NC-SA 3.0)."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Financial PhraseBank v1.0, read from local latin-1 files."}
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Place Sentences_50Agree.txt, Sentences_66Agree.txt, Sentences_75Agree.txt and Sentences_AllAgree.txt "
        "(Financial PhraseBank v1.0) in the manual folder, or pass builder_kwargs={'source_dir': ...}.")
    BUILDER_CONFIGS = [
        PhrasebankConfig(name=f"sentences_{level.lower()}", filename=f"Sentences_{level}.txt",
                         description=f"Sentences where {level} of the annotators agree on the label.")
        for level in ("50Agree", "66Agree", "75Agree", "AllAgree")
    ]

    # TFDS 4.9's default code_path needs the `importlib_resources` backport (declared for Python < 3.9 only) for
    # builders that live in a package; this builder's code path is simply this file.
    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(__file__)

    def __init__(self, *, source_dir: str | None = None, **kwargs):
        self._source_dir = pathlib.Path(source_dir) if source_dir else None
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict({
                "sentence": tfds.features.Text(),
                "label": tfds.features.ClassLabel(names=list(PHRASEBANK_LABELS)),
            }),
            supervised_keys=("sentence", "label"),
            homepage="https://arxiv.org/abs/1307.5336",
            citation=_CITATION,
        )

    def _folder(self, dl_manager: tfds.download.DownloadManager) -> pathlib.Path:
        if self._source_dir is not None:
            return self._source_dir
        try:
            manual = pathlib.Path(dl_manager.manual_dir)
        except AssertionError:  # TFDS raises it when the manual folder does not exist
            manual = None
        if manual is not None and (manual / self.builder_config.filename).is_file():
            return manual
        return data_dir() / "financial_phrasebank"

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        return {"train": self._generate_examples(self._folder(dl_manager) / self.builder_config.filename)}

    def _generate_examples(self, path: pathlib.Path):
        # read_records raises DataError naming the file and line on any bad line.
        for record in read_records(path, "phrasebank"):
            yield record.line, {"sentence": record.text, "label": record.label}
