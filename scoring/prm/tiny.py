"""Tiny randomly initialised models with offline-built tokenizers, for tests and
benchmarks: the same architectures, special tokens and heads as real PRMs, saved to a
directory and loaded back through the real loading code.

    path = save_token_classifier(tmp / "prm")          # Qwen2-style, <extra_0> separator
    path = save_step_tag_lm(tmp / "shepherd")          # Llama-style causal LM, ки + -
    path = save_chat_turn_lm(tmp / "rlhflow")          # Llama-3-style chat template, + -
    path = save_sequence_classifier(tmp / "orm")       # Qwen2-style, one logit
    path = save_encoder(tmp / "encoder")               # BERT-style, for the trained head
    path = save_judge_lm(tmp / "judge")                # Llama-style causal LM, ChatML template
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForSequenceClassification,
    Qwen2ForTokenClassification,
)

SEPARATOR = "<extra_0>"
STEP_TAG = "ки"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The Llama 3 chat format (each message trimmed, the BOS first), as RLHFlow's PRMs use it.
LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CORPUS = (
    "Step 1: Janet has 16 eggs and eats 3 for breakfast, so 16 - 3 = 13 eggs remain.",
    "Step 2: She bakes muffins with 4, leaving 13 - 4 = 9 eggs to sell at $2 each.",
    "The answer is 9 * 2 = 18 dollars. Therefore the total is \\boxed{18}.",
    "Let x be the number of apples; then 3x + 5 = 20, so x = 5.",
    "First, compute the area: 12 * 7 = 84 square meters. Then divide by 4 to get 21.",
    "Tool call: calculator(expression='(17 + 25) / 6') returned 7.",
    "Observation: the file was not found. Action: open the config and fix the path.",
)


def build_tokenizer(
    *,
    corpus: Iterable[str] = CORPUS,
    vocab_size: int = 400,
    bert_style: bool = False,
    llama3_chat: bool = False,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in code on ``corpus`` (any text tokenizes, no
    unknown tokens), with the PRM marker tokens: ``<extra_0>`` as a special token, and
    ``ки``, ``+``, ``-`` as ordinary tokens. ``llama3_chat``: Llama 3's chat tokens and
    template instead of ChatML's."""
    if bert_style:
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    elif llama3_chat:
        specials = ["<|endoftext|>", "<pad>", *LLAMA3_SPECIALS]
    else:
        specials = ["<|endoftext|>", "<pad>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(corpus), trainer)
    tokenizer.add_special_tokens([AddedToken(SEPARATOR, special=True, normalized=False)])
    tokenizer.add_tokens([AddedToken(STEP_TAG, normalized=False)])
    wrapped: dict[str, Any]
    if bert_style:
        wrapped = {
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
        }
    elif llama3_chat:
        wrapped = {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<pad>",
        }
    else:
        wrapped = {"eos_token": "<|endoftext|>", "pad_token": "<pad>"}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, additional_special_tokens=[SEPARATOR], **wrapped
    )
    if llama3_chat:
        fast.chat_template = LLAMA3_CHAT_TEMPLATE
    elif not bert_style:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def _decoder_config(
    config_class: Any, tokenizer: Any, layers: int, hidden: int, **extra: Any
) -> Any:
    heads = max(1, hidden // 32)
    return config_class(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        # Wider than the default so random models give scores that differ step to step.
        initializer_range=0.2,
        tie_word_embeddings=False,
        **extra,
    )


def _save(model: Any, tokenizer: Any, path: Path) -> Path:
    transformers.utils.logging.disable_progress_bar()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def save_token_classifier(
    path: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0, tokenizer: Any = None
) -> Path:
    """A Qwen2-style token classifier with 2 labels, as Qwen2.5-Math-PRM."""
    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    config = _decoder_config(Qwen2Config, tokenizer, layers, hidden, num_labels=2)
    return _save(Qwen2ForTokenClassification(config), tokenizer, path)


def save_step_tag_lm(
    path: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0, tokenizer: Any = None
) -> Path:
    """A Llama-style causal LM whose vocabulary has ``ки``, ``+`` and ``-``."""
    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    config = _decoder_config(LlamaConfig, tokenizer, layers, hidden)
    return _save(LlamaForCausalLM(config), tokenizer, path)


def save_chat_turn_lm(path: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """A Llama-style causal LM with Llama 3's chat template, as RLHFlow's
    Llama3.1-8B-PRM-Mistral-Data: steps as user turns, "+" / "-" as the answers."""
    return save_step_tag_lm(
        path, layers=layers, hidden=hidden, seed=seed, tokenizer=build_tokenizer(llama3_chat=True)
    )


def save_sequence_classifier(
    path: Path,
    *,
    num_labels: int = 1,
    layers: int = 2,
    hidden: int = 64,
    seed: int = 0,
    tokenizer: Any = None,
) -> Path:
    """A Qwen2-style sequence classifier (an outcome reward model on prefixes)."""
    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    config = _decoder_config(Qwen2Config, tokenizer, layers, hidden, num_labels=num_labels)
    return _save(Qwen2ForSequenceClassification(config), tokenizer, path)


def save_encoder(path: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """A BERT-style encoder, standing in for MiniLM under the trained head."""
    tokenizer = build_tokenizer(bert_style=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 32),
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
    )
    return _save(BertModel(config), tokenizer, path)


JUDGE_CORPUS = (
    *CORPUS,
    "The step is correct. \\boxed{+1}",
    "This step is wrong: 13 - 4 is 9, not 8. \\boxed{-1}",
    "It cannot be judged from here. \\boxed{0}",
    "The earliest error is in step 2. \\boxed{2}",
    "Every step is correct. \\boxed{-1}",
)


def save_judge_lm(path: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """A Llama-style causal LM with a ChatML chat template, standing in for an instruct
    model as a generative judge; its vocabulary knows ``\\boxed{+1}`` and step numbers."""
    return save_step_tag_lm(
        path,
        layers=layers,
        hidden=hidden,
        seed=seed,
        tokenizer=build_tokenizer(corpus=JUDGE_CORPUS, vocab_size=500),
    )
