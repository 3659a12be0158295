"""Which tokens of one step moved its score: integrated gradients through the PRM, with
``captum`` (no Django).

The step is scored as a worker scores it (the trajectory cut after the step, rendered and
tokenized by the scorer's own code, read at its marker or last token). Integrated
gradients then move the step's token embeddings from a baseline (the pad token's
embedding at every position of the step) to their real values, the rest of the input held
fixed, and credit each token with the path integral of the gradient of the score along
its embedding. Completeness: the credits add up to ``score - baseline_score`` up to the
integral's error, which is reported as ``delta``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from scoring.prm.adapters import (
    SequenceClassifierScorer,
    StepScorer,
    StepTagScorer,
    TokenClassificationScorer,
)
from scoring.prm.base import ScorerError, TrajectoryInput
from scoring.prm.batching import left_truncated
from scoring.prm.prompts import marker_tokens, render


@dataclass(frozen=True)
class Saliency:
    tokens: list[str]  # the step's tokens, as the text each one covers
    attributions: list[float]
    score: float  # the scorer's value for the step
    baseline_score: float  # its value with the step's tokens at the baseline
    delta: float  # sum(attributions) - (score - baseline_score)
    truncated: bool  # tokens of the step were cut to fit the scorer's max length
    n_steps: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": [
                {"text": text, "attribution": round(value, 6)}
                for text, value in zip(self.tokens, self.attributions, strict=True)
            ],
            "score": self.score,
            "baseline_score": self.baseline_score,
            "sum": sum(self.attributions),
            "delta": self.delta,
            "truncated": self.truncated,
            "n_steps": self.n_steps,
        }


@contextmanager
def _frozen(model: Any) -> Iterator[None]:
    """Gradients reach the inputs only, not the (cached, shared) model's weights."""
    flags = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)
    try:
        with torch.enable_grad():
            yield
    finally:
        for parameter, flag in zip(model.parameters(), flags, strict=True):
            parameter.requires_grad_(flag)


def _reader(
    scorer: StepScorer, read_at: int
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The scorer's probability for the step, from input embeddings (batch, length, width)."""
    model: Any = getattr(scorer, "model", None)
    params = scorer.params
    if isinstance(scorer, TokenClassificationScorer):

        def token_classifier(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out = model(inputs_embeds=embeds, attention_mask=mask)
            logits = out.logits if hasattr(out, "logits") else out[0]
            return torch.softmax(logits[:, read_at].float(), dim=-1)[:, params.positive_index]

        return token_classifier
    if isinstance(scorer, StepTagScorer):

        def step_tag(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            hidden = model.base_model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            logits = model.get_output_embeddings()(hidden[:, read_at]).float()
            if scorer.softcap:
                logits = torch.tanh(logits / scorer.softcap) * scorer.softcap
            return torch.softmax(logits[:, scorer.candidates], dim=-1)[:, 0]

        return step_tag
    if isinstance(scorer, SequenceClassifierScorer):

        def sequence_classifier(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            logits = model(inputs_embeds=embeds, attention_mask=mask).logits.float()
            if logits.shape[-1] == 1:
                return torch.sigmoid(logits[:, 0])
            return torch.softmax(logits, dim=-1)[:, params.positive_index]

        return sequence_classifier
    raise ScorerError(f"token saliency needs a transformers PRM, not a {scorer.spec.kind} scorer")


def _step_span(text: str, step_text: str, limit: int) -> tuple[int, int]:
    """Characters of the step in the rendered text: its last occurrence before ``limit``
    (the step's marker), since it is the last step rendered."""
    start = text.rfind(step_text, 0, limit)
    if start < 0 or not step_text:
        raise ScorerError("the step's text is not in the rendered input; nothing to attribute")
    return start, start + len(step_text)


def token_saliency(
    scorer: StepScorer,
    trajectory: TrajectoryInput,
    *,
    n_steps: int = 64,
    internal_batch_size: int = 16,
) -> Saliency:
    """Integrated-gradients credit of each token of ``trajectory``'s last step."""
    from captum.attr import IntegratedGradients

    tokenizer: Any = getattr(scorer, "tokenizer", None)
    model: Any = getattr(scorer, "model", None)
    if tokenizer is None or model is None or not trajectory.steps:
        raise ScorerError("token saliency needs a transformers PRM and a step")
    step = trajectory.steps[-1]
    marked = not isinstance(scorer, SequenceClassifierScorer)
    if marked and not step.labelable:
        raise ScorerError("only labelable steps carry a marker to read the score at")
    if isinstance(scorer, (TokenClassificationScorer, StepTagScorer)):
        rendered = scorer.render_input(trajectory)  # a chat of turns for chat-turn-lm
    else:
        rendered = render(scorer.params, trajectory, tokenizer=tokenizer, mark=marked)
    limit = rendered.marker_ends[-1] if marked else len(rendered.text)
    span_start, span_end = _step_span(rendered.text, step.text, limit)
    encoded = tokenizer(
        rendered.text,
        add_special_tokens=getattr(scorer, "add_special_tokens", True),
        return_offsets_mapping=True,
        verbose=False,
    )
    ids: list[int] = list(encoded["input_ids"])
    offsets: list[tuple[int, int]] = list(encoded["offset_mapping"])
    if marked:
        read_at = marker_tokens(offsets, rendered.marker_ends[-1:])[0] + scorer.params.read_offset
    else:
        read_at = len(ids) - 1
    inside = [
        i
        for i, (start, end) in enumerate(offsets)
        if end > start and start < span_end and end > span_start and i <= read_at
    ]
    # Fit the scorer's max length by cutting from the left, as scoring does.
    cut_ids = ids[: read_at + 1]
    special = set(tokenizer.all_special_ids)
    keep_first = 1 if cut_ids and cut_ids[0] in special else 0
    kept, dropped = left_truncated(cut_ids, scorer.max_length, keep_first=keep_first)

    def shifted(i: int) -> int:
        return i if i < keep_first else i - dropped

    positions = [shifted(i) for i in inside if i < keep_first or i >= keep_first + dropped]
    truncated = len(positions) < len(inside)
    if not positions:
        raise ScorerError("the step's tokens do not fit the scorer's max length")
    pieces = [
        rendered.text[offsets[i][0] : offsets[i][1]]
        for i in inside
        if i < keep_first or i >= keep_first + dropped
    ]
    read = _reader(scorer, shifted(read_at))
    device = scorer.device
    input_ids = torch.tensor([kept], dtype=torch.long, device=device)
    mask = torch.ones_like(input_ids)
    embedding = model.get_input_embeddings()
    index = torch.tensor(positions, dtype=torch.long, device=device)
    with torch.no_grad():
        base = embedding(input_ids)
        actual = base[:, index].clone()
        blank = embedding(torch.tensor([[scorer.pad_id]], device=device)).expand_as(actual).clone()

    def forward(step_embeds: torch.Tensor) -> torch.Tensor:
        rows = step_embeds.shape[0]
        full = base.expand(rows, -1, -1).clone()
        full[:, index] = step_embeds
        return read(full, mask.expand(rows, -1))

    with _frozen(model):
        attributions, delta = IntegratedGradients(forward).attribute(
            actual,
            baselines=blank,
            n_steps=n_steps,
            method="gausslegendre",
            internal_batch_size=internal_batch_size,
            return_convergence_delta=True,
        )
        with torch.no_grad():
            score = float(forward(actual)[0])
            baseline_score = float(forward(blank)[0])
    per_token = attributions.float().sum(dim=-1)[0].tolist()
    return Saliency(
        tokens=pieces,
        attributions=[float(a) for a in per_token],
        score=score,
        baseline_score=baseline_score,
        delta=float(delta.reshape(-1)[0]),
        truncated=truncated,
        n_steps=n_steps,
    )
