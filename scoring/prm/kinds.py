"""Scorer kinds, each declared once as a :class:`ScorerKind`: its name and label, its
typed parameters, what runs it and what it needs. The scorer model's ``kind`` choices,
the scorer form, the admin, the API's validation and the scoring services all read the
registry; none of them names the kinds one by one.

A kind whose runs score with a :class:`~scoring.prm.adapters.StepScorer` names the class
in ``build``; one that runs otherwise (the LLM judge) names its Django-side hooks in
``runner`` (see ``scoring/services/runners.py``). Both are ``"module:name"`` strings,
imported when a run needs them, so this module loads neither torch nor Django.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scoring.prm.base import ScorerError, ScorerParams, scorer_params


def _no_check(scorer: Any) -> str:
    return ""


@dataclass(frozen=True)
class ScorerKind:
    name: str
    # The name people read: the model field's choice label (the API schema shows it).
    label: str
    # The raw parameters (a JSON object) to the kind's typed parameters with their
    # defaults; a wrong name, type or value raises ScorerError naming it. The result
    # has ``chunk_steps``: steps per Celery task.
    parameters: Callable[[Mapping[str, Any] | None], Any]
    # "module:Class" of the StepScorer that scores its runs (imported on a worker).
    build: str = ""
    # "module:name" of the Django-side hooks of a kind that does not score with a
    # StepScorer (``scoring.services.runners.KindRunner``); "" for the StepScorer's.
    runner: str = ""
    # What a scorer without a model_ref is told; "" where it needs none.
    needs_model: str = ""
    # Whether the model is loaded on this server's workers, from the typed parameters
    # (a local model_ref is checked against the model directories); None: where it
    # has a ``build``.
    loads_locally: Callable[[Any], bool] | None = None
    # False: its scores are computed elsewhere and imported; a run is refused.
    runs: bool = True
    # Its scorers ask with prompt versions (``JudgePrompt``), given at creation and run.
    prompts: bool = False
    # Offered by the scorer form of a project's scoring section.
    offered: bool = True
    # The scorer's revision is the model's hub revision (a trained head's is its number).
    hub_revision: bool = True
    # Why a scorer of the kind cannot start a run now ("" where it can).
    run_check: Callable[[Any], str] = _no_check

    def loads(self, params: Any) -> bool:
        if self.loads_locally is not None:
            return self.loads_locally(params)
        return bool(self.build)


_KINDS: dict[str, ScorerKind] = {}


def kind_register(kind: ScorerKind) -> str:
    """Add ``kind`` (its name must be new) and return its name."""
    if kind.name in _KINDS:
        raise ValueError(f"scorer kind {kind.name!r} is registered already")
    if len(kind.name) > 30:
        raise ValueError(f"scorer kind {kind.name!r} is longer than the model's 30 characters")
    _KINDS[kind.name] = kind
    return kind.name


def kind_get(name: str) -> ScorerKind:
    kind = _KINDS.get(name)
    if kind is None:
        raise ScorerError(f"unknown scorer kind {name!r}; expected one of {', '.join(_KINDS)}")
    return kind


def kind_list() -> list[ScorerKind]:
    """Every kind, in the order registered."""
    return list(_KINDS.values())


def kind_choices() -> list[tuple[str, str]]:
    """(name, label) of every kind: the scorer model's ``kind`` choices."""
    return [(kind.name, kind.label) for kind in _KINDS.values()]


def params_for_kind(name: str, raw: Mapping[str, Any] | None = None) -> Any:
    """The kind's validated parameters (``ScorerParams`` for a StepScorer kind)."""
    return kind_get(name).parameters(raw)


# --- The kinds --------------------------------------------------------------------------


def _prm(defaults: dict[str, Any]) -> Callable[[Mapping[str, Any] | None], ScorerParams]:
    def parameters(raw: Mapping[str, Any] | None) -> ScorerParams:
        return scorer_params(raw, defaults)

    return parameters


_ADAPTERS = "scoring.prm.adapters"


def _model_kind(
    name: str, label: str, cls: str, defaults: dict[str, Any], **more: Any
) -> ScorerKind:
    return ScorerKind(
        name=name,
        label=label,
        parameters=_prm(defaults),
        build=cls,
        needs_model=f"a {name} scorer needs a model reference (directory or hub id)",
        **more,
    )


TOKEN_CLASSIFICATION = kind_register(
    _model_kind(
        "token-classification",
        "Token Classification",
        f"{_ADAPTERS}:TokenClassificationScorer",
        {"separator": "<extra_0>", "positive_index": 1},
    )
)
STEP_TAG_LM = kind_register(
    _model_kind(
        "step-tag-lm",
        "Step Tag Lm",
        f"{_ADAPTERS}:StepTagScorer",
        {"separator": " ки", "step_join": "\n"},
    )
)
# RLHFlow style: each step a user chat turn, answered "+" or "-" by the model
# (RLHFlow/Llama3.1-8B-PRM-*: the first user turn is "task step", every assistant turn is
# "+", and the score is read at the token before it, the one that predicts it).
CHAT_TURN_LM = kind_register(
    _model_kind(
        "chat-turn-lm",
        "Chat Turn Lm",
        f"{_ADAPTERS}:ChatTurnScorer",
        {"prompt_format": "chat", "task_format": "{task} ", "separator": "+", "read_offset": -1},
    )
)
SEQUENCE_CLASSIFIER = kind_register(
    _model_kind(
        "sequence-classifier",
        "Sequence Classifier",
        f"{_ADAPTERS}:SequenceClassifierScorer",
        {"positive_index": 1, "context": "prefix"},
    )
)


def _head_check(scorer: Any) -> str:
    return "" if (scorer.artifact or {}).get("head") else f"{scorer.name} has no trained head yet"


# The step alone: on ProcessBench GSM8K a frozen encoder's mean-pooled embedding of the
# step scored higher (held-out AUROC 0.62) than with the previous step (0.59) or the task
# and two previous steps (0.56) folded into the same input. Trained by a task on the
# project's labels (never made in the scorer form); its model_ref is the encoder.
TRAINED_HEAD = kind_register(
    _model_kind(
        "trained-head",
        "Trained Head",
        "scoring.prm.head:TrainedHeadScorer",
        {
            "max_length": 128,
            "batch_size": 64,
            "context": "prefix",
            "context_steps": 0,
            "include_task": False,
        },
        offered=False,
        hub_revision=False,
        run_check=_head_check,
    )
)
# Scores computed elsewhere and imported; there is no model to run.
EXTERNAL = kind_register(
    ScorerKind(name="external", label="External", parameters=_prm({}), runs=False, offered=False)
)


def _judge_parameters(raw: Mapping[str, Any] | None) -> Any:
    from scoring.judges.config import JudgeError, judge_params

    try:
        return judge_params(dict(raw or {}))
    except JudgeError as error:
        raise ScorerError(str(error)) from None


# A generative judge (scoring/judges/): its parameters are ``JudgeParams``; a remote one's
# model_ref is the endpoint's model name, never loaded here.
LLM_JUDGE = kind_register(
    ScorerKind(
        name="llm-judge",
        label="Llm Judge",
        parameters=_judge_parameters,
        runner="scoring.services.judges:JUDGE_RUNNER",
        prompts=True,
        needs_model="an llm-judge needs a model: a directory or hub id (local), or the"
        " endpoint's model name (remote)",
        loads_locally=lambda params: params.backend == "local",
    )
)
