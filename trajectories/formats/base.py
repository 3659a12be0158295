"""The canonical shape every importer produces, and the importer interface.

Parsers turn an external file into :class:`ParsedTrajectory` records. They are plain
Python (no Django), stream their input where the format allows, and report a malformed
record as a :class:`RecordError` naming its location (line number or array index) and
field, instead of raising, so the import service can list every problem in a file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP_KINDS = (
    "message",
    "thought",
    "action",
    "tool_call",
    "tool_result",
    "observation",
    "answer",
)


@dataclass(frozen=True, slots=True)
class StepTraining:
    """What an RL trainer knew about a step when it trained on it: the policy (weight)
    version that wrote it, the training step, a summary of its token logprobs, its
    advantage and its return. Every field may be unknown (None); ``token_logprobs`` is
    kept only when an import asks for it (it is as long as the step's tokens)."""

    policy_version: str | None = None
    training_step: int | None = None
    logprob_sum: float | None = None
    logprob_mean: float | None = None
    logprob_min: float | None = None
    advantage: float | None = None
    returns: float | None = None
    token_logprobs: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The known fields, by name (the Stepscope format's ``training`` object)."""
        values = {
            "policy_version": self.policy_version,
            "training_step": self.training_step,
            "logprob_sum": self.logprob_sum,
            "logprob_mean": self.logprob_mean,
            "logprob_min": self.logprob_min,
            "advantage": self.advantage,
            "returns": self.returns,
            "token_logprobs": self.token_logprobs,
        }
        return {name: value for name, value in values.items() if value is not None}


TRAINING_FIELDS = (
    "policy_version",
    "training_step",
    "logprob_sum",
    "logprob_mean",
    "logprob_min",
    "advantage",
    "returns",
    "token_logprobs",
)


def logprob_summary(logprobs: list[float] | None, *, keep_tokens: bool = False) -> dict[str, Any]:
    """``logprob_sum``, ``logprob_mean`` and ``logprob_min`` of a step's token
    logprobs (and the logprobs themselves with ``keep_tokens``), as keyword arguments
    for :class:`StepTraining`; nothing for no logprobs."""
    if not logprobs:
        return {}
    values = [float(value) for value in logprobs]
    total = sum(values)
    summary: dict[str, Any] = {
        "logprob_sum": total,
        "logprob_mean": total / len(values),
        "logprob_min": min(values),
    }
    if keep_tokens:
        summary["token_logprobs"] = values
    return summary


# Not frozen: steps are the most numerous objects an import makes, and a frozen
# dataclass sets each field through object.__setattr__, which made building one three
# times slower. Parsers build steps once and nothing changes them afterwards.
@dataclass(slots=True)
class ParsedStep:
    kind: str
    role: str
    content: str
    labelable: bool
    agent: str = ""
    tool_name: str = ""
    tool_args: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # The trainer's facts about the step, for RL rollouts; None for everything else.
    training: StepTraining | None = None

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {self.kind!r}; expected one of {STEP_KINDS}")


# Imported labels belong to non-login users named ``import:<name>``: a file's
# ``alice`` and ``import:alice`` are the same annotator.
IMPORTED_ANNOTATOR_PREFIX = "import:"


def imported_annotator_name(name: str) -> str:
    """The user an imported label's ``annotator`` stands for, prefix added where missing,
    so that the two spellings of one annotator import, hash and deduplicate alike (an
    export writes the name without the prefix)."""
    return name if name.startswith(IMPORTED_ANNOTATOR_PREFIX) else IMPORTED_ANNOTATOR_PREFIX + name


@dataclass(frozen=True)
class ParsedLabel:
    """A step label that came with the source, e.g. a ProcessBench first-error index.

    ``annotator`` names the source (``import:processbench``); it becomes a non-login
    user so imported labels flow through comparisons and exports like human ones.
    """

    step_index: int
    value: int
    annotator: str


@dataclass(frozen=True)
class ParsedDecisive:
    """The decisive failure that came with the source (Who&When's ``mistake_agent``,
    ``mistake_step``, ``mistake_reason``): the import's own annotator's label of which
    agent, at which step, decided that the run failed."""

    agent: str
    step_index: int | None
    reason: str = ""


@dataclass
class ParsedTrajectory:
    external_id: str
    task: str
    steps: list[ParsedStep]
    task_key: str = ""
    ground_truth: str = ""
    model_name: str = ""
    outcome_reward: float | None = None
    success: bool | None = None
    first_error_index: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    labels: list[ParsedLabel] = field(default_factory=list)
    decisive: ParsedDecisive | None = None
    # The source record as read, kept in its own table so list queries never load it.
    raw: Any = None
    # Where the record starts in the file: "line 12" or "record 3".
    location: str = ""
    # A trajectory that continues another one from the same file: it repeats the
    # parent's first ``branch_index`` steps and then takes its own step there (PRM800K's
    # alternative completions). The import service links the two.
    parent_external_id: str = ""
    branch_index: int | None = None
    # The policy (weight) version that wrote the rollout and the trainer's step that
    # used it, for RL rollouts.
    policy_version: str | None = None
    training_step: int | None = None


@dataclass(frozen=True)
class RecordError:
    location: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.location}, field {self.field!r}" if self.field else self.location
        return f"{where}: {self.message}"


class FieldError(ValueError):
    """Raised inside a parser for one record; the parser turns it into a RecordError."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


ParseResult = ParsedTrajectory | RecordError
Parser = Callable[[Path], Iterator[ParseResult]]


class FileError(ValueError):
    """The file as a whole cannot be read (not JSON, wrong top-level shape)."""


def require(record: Any, key: str, kind: type | tuple[type, ...], path: str = "") -> Any:
    """Return ``record[key]`` if it exists and has the expected type, else a FieldError
    naming the dotted field path. ``bool`` does not pass for ``int`` or ``float``."""
    name = f"{path}.{key}" if path else key
    if not isinstance(record, dict):
        raise FieldError(path or key, f"expected an object, got {type(record).__name__}")
    if key not in record:
        raise FieldError(name, "is missing")
    value = record[key]
    problem = type_mismatch(value, kind)
    if problem is not None:
        raise FieldError(name, problem)
    return value


def type_mismatch(value: Any, kind: type | tuple[type, ...]) -> str | None:
    """Why ``value`` is not of ``kind`` (``expected int, got str``), or None: the one type
    rule of imported files, which the label API applies to its values too. Nothing is
    converted: ``"1"`` and ``1.0`` are not ints, and ``bool`` does not pass for ``int``
    or ``float``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        return f"expected {expected}, got {type(value).__name__}"
    return None


def tool_call_step(
    *,
    content: str,
    calls: list[dict[str, Any]],
    metadata: dict[str, Any],
    errors: list[str],
    agent: str = "",
) -> ParsedStep:
    """A labelable assistant turn that calls tools: one call's name and arguments, or the
    names of several calls joined and the list of calls. Argument parse errors are kept
    in ``metadata["tool_args_error"]``, not fatal."""
    if errors:
        metadata["tool_args_error"] = "; ".join(errors)
    if len(calls) == 1:
        tool_name, tool_args = calls[0]["name"], calls[0]["arguments"]
    else:
        tool_name = ", ".join(call["name"] for call in calls)
        tool_args = [dict(call) for call in calls]
    return ParsedStep(
        kind="tool_call",
        role="assistant",
        content=content,
        labelable=True,
        agent=agent,
        tool_name=tool_name,
        tool_args=tool_args,
        metadata=metadata,
    )
