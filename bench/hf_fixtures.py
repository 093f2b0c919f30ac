"""Write the PyTorch-format classifier fixtures of ``tests/fixtures/hf/`` with real torch and transformers.

Run in the optional torch environment (``bench/.venv-torch``: torch 2.13, transformers 4.57.6, sentencepiece), never
in tfsent's own::

    bench/.venv-torch/bin/python bench/hf_fixtures.py            # rewrites tests/fixtures/hf/

Each fixture is a tiny (2 layers, hidden 32) randomly initialised ``*ForSequenceClassification`` of one
architecture, saved the way published checkpoints are: by ``save_pretrained`` (PyTorch ``model.safetensors``, or
``pytorch_model.bin`` with ``safe_serialization=False``, or sharded), by ``torch.save`` in the legacy
(pre-1.6, non-zip) layout that 2019-2020 hub models such as FinBERT-tone still ship, with the architecture's own
tokenizer (WordPiece, byte-level BPE or SentencePiece, trained here on the sentences below). ``expected.json`` holds
the probabilities transformers' PyTorch model computes for ``TEXTS``, tokenized by its tokenizer with truncation at
the model's length, so tfsent's torch-free path is checked against the library that wrote the files.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
import tempfile

import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf"

# Written for these fixtures (no data set is copied): the tokenizers learn their vocabularies from them.
CORPUS = [
    "Operating profit rose to EUR 13.1 mn from EUR 8.7 mn in the corresponding period in 2007.",
    "Net sales decreased by 5 percent and the company cut its outlook for the full year.",
    "The board proposes a dividend of EUR 0.50 per share for the financial year.",
    "The merger was cancelled after regulators raised competition concerns.",
    "Revenue grew strongly in all regions, driven by demand for new products.",
    "The company is a leading supplier of packaging materials in northern Europe.",
    "Margins are expected to improve in the second half as costs fall.",
    "Shares fell sharply after the quarterly loss was larger than analysts had expected.",
    "Our guidance for next quarter remains unchanged, and we continue to invest in growth.",
    "Cash flow from operations was negative, mainly because of higher working capital.",
    "We signed a new contract worth 20 million dollars with a major customer in Asia.",
    "Thank you, operator, and good morning everyone; welcome to our earnings call.",
] * 4
TEXTS = [
    "Operating profit rose sharply.",
    "Net sales decreased and the outlook was cut.",
    "The board proposes a dividend.",
    "ok",
    "The merger was cancelled after regulators raised competition concerns, and shares fell.",
    "Revenue grew in all regions, margins improved, cash flow was positive and the company raised its guidance "
    "for the full year after signing a new contract worth 20 million dollars with a major customer in Asia; "
    "thank you, operator, and good morning everyone, welcome to our earnings call for the quarter.",
    "Ünïcödé façade: naïve café, 北京 and emoji 🙂 in one line.",
    "Cash flow was negative.",
]
LABELS = {0: "Neutral", 1: "Positive", 2: "Negative"}  # FinBERT-tone's order, as written in its config
# initializer_range 0.5, not 0.02: a random model then gives different labels to different texts.
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
            max_position_embeddings=64, num_labels=3, initializer_range=0.5, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})


def wordpiece(folder: pathlib.Path, cls=transformers.BertTokenizerFast, **specials):
    tok = Tokenizer(models.WordPiece(unk_token=specials.get("unk_token", "[UNK]")))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    names = list(dict.fromkeys(specials.values())) or ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=400, special_tokens=names))
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (folder / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    return cls(vocab_file=str(folder / "vocab.txt"), do_lower_case=True, **specials)


def byte_bpe(folder: pathlib.Path, cls=transformers.RobertaTokenizerFast):
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(CORPUS, vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.save_model(str(folder))
    return cls(vocab_file=str(folder / "vocab.json"), merges_file=str(folder / "merges.txt"))


def sentencepiece(folder: pathlib.Path, cls, model_name: str, **train):
    import sentencepiece as spm

    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "sp"), vocab_size=200, hard_vocab_limit=False,
                                   character_coverage=1.0, **train)
    corpus.unlink()
    (folder / "sp.model").rename(folder / model_name)
    (folder / "sp.vocab").unlink()
    return cls(vocab_file=str(folder / model_name))


def legacy_bin(folder: pathlib.Path, model) -> None:
    # How torch < 1.6 wrote pytorch_model.bin (FinBERT-tone's file is of this kind): no zip, storages after the pickle.
    torch.save(model.state_dict(), folder / "pytorch_model.bin", _use_new_zipfile_serialization=False)


# name -> (config class, model class, extra config, tokenizer maker, how the weights are saved, tokenizer files kept)
FIXTURES = {
    "bert_legacy_bin": ("BertConfig", "BertForSequenceClassification", {}, lambda d: wordpiece(d), "legacy", "vocab"),
    "distilbert_zip_bin": ("DistilBertConfig", "DistilBertForSequenceClassification",
                           dict(dim=32, n_layers=2, n_heads=2, hidden_dim=37), lambda d: wordpiece(
                               d, transformers.DistilBertTokenizerFast), "bin", "all"),
    "roberta_safetensors": ("RobertaConfig", "RobertaForSequenceClassification",
                            dict(max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2),
                            lambda d: byte_bpe(d), "safetensors", "all"),
    "xlm_roberta_sharded_safetensors": ("XLMRobertaConfig", "XLMRobertaForSequenceClassification",
                                        dict(max_position_embeddings=66, pad_token_id=1),
                                        lambda d: sentencepiece(d, transformers.XLMRobertaTokenizerFast,
                                                                "sentencepiece.bpe.model", model_type="bpe"),
                                        "sharded_safetensors", "all"),
    "camembert_sharded_bin": ("CamembertConfig", "CamembertForSequenceClassification",
                              dict(max_position_embeddings=66, pad_token_id=1),
                              lambda d: sentencepiece(d, transformers.CamembertTokenizerFast,
                                                      "sentencepiece.bpe.model", model_type="bpe"),
                              "sharded_bin", "all"),
    "albert_safetensors": ("AlbertConfig", "AlbertForSequenceClassification", dict(embedding_size=16),
                           lambda d: sentencepiece(d, transformers.AlbertTokenizerFast, "spiece.model",
                                                   pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                                   user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
                                                   pad_piece="<pad>", unk_piece="<unk>"),
                           "safetensors", "all"),
    "electra_zip_bin": ("ElectraConfig", "ElectraForSequenceClassification", dict(embedding_size=16),
                        lambda d: wordpiece(d, transformers.ElectraTokenizerFast), "bin", "all"),
    # DeBERTa-v3 checkpoints ship only spm.model: the fast tokenizer is converted from it when loaded.
    "deberta_v2_spm_only": ("DebertaV2Config", "DebertaV2ForSequenceClassification",
                            dict(relative_attention=True, position_biased_input=False, pos_att_type=["p2c", "c2p"],
                                 type_vocab_size=0, max_relative_positions=-1, position_buckets=16,
                                 norm_rel_ebd="layer_norm", share_att_key=True, pad_token_id=0),
                            lambda d: sentencepiece(d, transformers.DebertaV2TokenizerFast, "spm.model",
                                                    pad_id=0, unk_id=3, bos_id=1, eos_id=2,
                                                    user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
                                                    pad_piece="[PAD]", unk_piece="[UNK]", bos_piece="<s>",
                                                    eos_piece="</s>"),
                            "safetensors", "slow"),
    "mpnet_legacy_bin": ("MPNetConfig", "MPNetForSequenceClassification",
                         dict(max_position_embeddings=66, pad_token_id=1),
                         lambda d: wordpiece(d, transformers.MPNetTokenizerFast, bos_token="<s>", eos_token="</s>",
                                             sep_token="</s>", cls_token="<s>", unk_token="[UNK]", pad_token="<pad>",
                                             mask_token="<mask>"), "legacy", "all"),
}


def max_length(config) -> int:
    offset = config.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta", "camembert", "mpnet") else 0
    return config.max_position_embeddings - offset


def new_folder(folder: pathlib.Path, make_tokenizer, keep: str):
    """An empty fixture folder holding the tokenizer, with the files a published checkpoint keeps of it."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_tokenizer(pathlib.Path(tmp))
        tokenizer.save_pretrained(str(folder))
    if keep == "vocab":  # FinBERT-tone ships vocab.txt and nothing else of its tokenizer
        for f in folder.iterdir():
            if f.name != "vocab.txt":
                f.unlink()
    if keep == "slow":  # DeBERTa-v3: the SentencePiece model and its config, no tokenizer.json
        (folder / "tokenizer.json").unlink(missing_ok=True)
    return tokenizer


def save_weights(folder: pathlib.Path, model, model_name: str, how: str) -> None:
    """The model's weights (and config) in the format ``how`` names."""
    if how == "legacy":
        model.config.architectures = [model_name]
        model.config.save_pretrained(str(folder))
        legacy_bin(folder, model)
    else:
        model.save_pretrained(str(folder), safe_serialization=how.endswith("safetensors"),
                              **({"max_shard_size": "60KB"} if how.startswith("sharded") else {}))


def write(name: str, spec) -> None:
    config_name, model_name, extra, make_tokenizer, how, keep = spec
    folder = OUT / name
    tokenizer = new_folder(folder, make_tokenizer, keep)
    torch.manual_seed(sum(map(ord, name)))
    config = getattr(transformers, config_name)(vocab_size=len(tokenizer), **{**TINY, **extra})
    model = getattr(transformers, model_name)(config).eval()
    save_weights(folder, model, model_name, how)
    loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
    reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    limit = max_length(config)
    enc = loaded(TEXTS, padding=True, truncation=True, max_length=limit, return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(reloaded(**enc).logits, dim=-1).numpy()
    expected = {"texts": TEXTS, "labels": [LABELS[i] for i in range(3)], "probs": probs.tolist(),
                "max_length": limit, "n_tokens": enc["attention_mask"].sum(1).tolist(), "weights": how,
                "model_type": config.model_type,
                "written_by": f"torch {torch.__version__}, transformers {transformers.__version__}"}
    (folder / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    files = sorted(p.name for p in folder.iterdir())
    print(f"{name}: {files}; labels {probs.argmax(1).tolist()}")


def main(names) -> None:
    for name in names or FIXTURES:
        write(name, FIXTURES[name])


if __name__ == "__main__":
    main(sys.argv[1:])
