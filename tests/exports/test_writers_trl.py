"""TRL's own trainers accept our ``trl-stepwise`` and ``dpo`` exports.

The files are loaded with ``datasets`` as a user would, then handed to TRL's
``PRMTrainer`` and ``DPOTrainer``, which tokenize them with their own dataset
preparation; one training step runs on a tiny random model. Everything is built offline:
a word-level tokenizer from the ``tokenizers`` library over the exported text, and models
from small configs. ``PRMTrainer`` lives in ``trl.experimental.prm`` and was removed in
TRL 1.14, so the dev dependency pins TRL below that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import datasets
import pytest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForTokenClassification,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from exports.writers import write_export
from tests.exports.test_writers import options
from tests.exports.test_writers_files import corpus

pytestmark = [
    pytest.mark.filterwarnings("ignore:You are importing from 'trl.experimental'"),
    pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
]

# Whitespace runs are tokens of their own, so the step separator "\n" and the prompt's
# blank lines survive tokenization and joined tokens give back the text.
PIECES = pre_tokenizers.Split(Regex(r"\s+|\w+|[^\w\s]"), behavior="isolated")
SPECIAL = ("[PAD]", "[UNK]", "[EOS]")


def tiny_tokenizer(texts: Iterable[str]) -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate(SPECIAL)}
    for text in [*texts, "\n"]:
        for piece, _ in PIECES.pre_tokenize_str(text):
            vocab.setdefault(piece, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = PIECES
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )


def load(path: Path, cache: Path) -> datasets.Dataset:
    dataset = datasets.load_dataset(
        "json", data_files=str(path), split="train", cache_dir=str(cache)
    )
    assert isinstance(dataset, datasets.Dataset)
    return dataset


def test_prm_trainer_accepts_trl_stepwise(tmp_path: Path) -> None:
    try:
        from trl.experimental import prm
    except ImportError:
        pytest.fail("trl.experimental.prm is missing: PRMTrainer left TRL in 1.14")
    write_export(corpus(), format_name="trl-stepwise", options=options(), out_dir=tmp_path)
    dataset = load(tmp_path / "trl-stepwise.jsonl", tmp_path / "hf")
    rows = dataset.to_list()
    tokenizer = tiny_tokenizer(
        [row["prompt"] for row in rows] + [c for row in rows for c in row["completions"]]
    )
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    config.num_labels = 2
    model = BertForTokenClassification(config)
    trainer = prm.PRMTrainer(
        model=model,
        args=prm.PRMConfig(
            output_dir=str(tmp_path / "prm"),
            max_steps=1,
            per_device_train_batch_size=4,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            logging_strategy="no",
            step_separator="\n",
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
    )

    prepared = trainer.train_dataset
    assert isinstance(prepared, datasets.Dataset)
    assert prepared.num_rows == len(rows) == 12
    for row, tokenized in zip(rows, prepared, strict=True):
        # One label per step, on the separator token after it, as PRM training reads them.
        marked = [label for label in tokenized["labels"] if label != -100]
        assert marked == [int(label) for label in row["labels"]]
        tokens = tokenizer.convert_ids_to_tokens(tokenized["input_ids"])
        assert "".join(tokens) == row["prompt"] + "".join(c + "\n" for c in row["completions"])
    assert {tuple(row["labels"]) for row in rows} == {(True, True, True), (True, True, False)}

    loss = trainer.train().training_loss
    assert math.isfinite(loss)


def test_dpo_trainer_accepts_dpo_pairs(tmp_path: Path) -> None:
    from trl import DPOConfig, DPOTrainer

    write_export(corpus(), format_name="dpo", options=options(), out_dir=tmp_path)
    dataset = load(tmp_path / "dpo.jsonl", tmp_path / "hf")
    rows = dataset.to_list()
    assert len(rows) == 12
    tokenizer = tiny_tokenizer(text for row in rows for text in row.values())
    # DPOTrainer loads its reference model from the policy's path, so the tiny model is
    # saved and both are loaded through the real loading code.
    model_dir = tmp_path / "tiny-llama"
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=512,
            pad_token_id=0,
            eos_token_id=2,
            bos_token_id=None,
        )
    ).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    trainer = DPOTrainer(
        model=str(model_dir),
        args=DPOConfig(
            output_dir=str(tmp_path / "dpo"),
            max_steps=1,
            per_device_train_batch_size=4,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            logging_strategy="no",
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
    )

    prepared = trainer.train_dataset
    assert isinstance(prepared, datasets.Dataset)
    assert prepared.num_rows == 12
    for row, tokenized in zip(rows, prepared, strict=True):
        text = tokenizer.convert_ids_to_tokens
        assert "".join(text(tokenized["prompt_ids"])) == row["prompt"]
        assert "".join(text(tokenized["chosen_ids"])) == row["chosen"] + "[EOS]"
        assert "".join(text(tokenized["rejected_ids"])) == row["rejected"] + "[EOS]"

    loss = trainer.train().training_loss
    assert math.isfinite(loss)
