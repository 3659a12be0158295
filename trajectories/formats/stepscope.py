"""Stepscope JSONL, the project's own format: one trajectory object per line.

docs/formats.md describes every field. The parser is strict on purpose: unknown keys are
errors rather than being dropped, because in a hand-written or generated file they are
nearly always typos (``"lables"``) whose data would otherwise vanish without a word.
:func:`to_record` writes the same shape back, so exports re-import unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from trajectories.agents import trajectory_agents
from trajectories.formats import jsonio, register
from trajectories.formats.base import (
    STEP_KINDS,
    FieldError,
    FileError,
    ParsedDecisive,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    StepTraining,
    imported_annotator_name,
    require,
)

DEFAULT_ANNOTATOR = "import:stepscope"
LABEL_VALUES = (-1, 0, 1)

TRAJECTORY_KEYS = (
    "id",
    "task",
    "task_key",
    "ground_truth",
    "model",
    "outcome",
    "first_error_index",
    "decisive",
    "metadata",
    "training",
    "steps",
)
OUTCOME_KEYS = ("reward", "success")
STEP_KEYS = (
    "kind",
    "role",
    "content",
    "labelable",
    "agent",
    "tool_name",
    "tool_args",
    "metadata",
    "training",
    "labels",
)
# A trajectory's training facts, and a step's (formats/base.py, StepTraining).
TRAJECTORY_TRAINING_KEYS = ("policy_version", "training_step")
STEP_TRAINING_KEYS = (
    "policy_version",
    "training_step",
    "logprob_sum",
    "logprob_mean",
    "logprob_min",
    "advantage",
    "returns",
    "token_logprobs",
)
LABEL_KEYS = ("annotator", "value")
DECISIVE_KEYS = ("agent", "step", "reason")


@register("stepscope", label="Stepscope JSONL")
def parse(path: Path) -> Iterator[ParseResult]:
    """Yield one trajectory or error per non-blank line, reading the file line by line.

    A first record that is not a JSON object means the file is not Stepscope JSONL at
    all (a JSON array, CSV, another format), so that raises FileError; a bad line after
    a good one is a single broken record and becomes a RecordError.
    """
    try:
        handle = path.open("rb")
    except OSError as error:
        raise FileError(f"{path}: cannot be read: {error.strerror}") from error
    with handle:
        seen_record = False
        for number, raw_line in enumerate(handle, start=1):
            location = f"line {number}"
            try:
                # utf-8-sig drops a byte-order mark that some editors put at the start.
                text = raw_line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                message = f"not UTF-8 text ({error.reason} at byte {error.start})"
                if not seen_record:
                    raise FileError(f"{path}: {location} is {message}") from error
                yield RecordError(location, "", f"is {message}")
                continue
            if not text.strip():
                continue
            try:
                record = jsonio.loads(text)
            except ValueError as error:
                message = jsonio.error_message(error)
                if not seen_record:
                    raise FileError(
                        f"{path}: not Stepscope JSONL: {location} is not valid JSON: {message}"
                    ) from error
                yield RecordError(location, "", f"not valid JSON: {message}")
                continue
            if not seen_record and not isinstance(record, dict):
                raise FileError(
                    f"{path}: not Stepscope JSONL: {location} holds a "
                    f"{type(record).__name__}, expected one trajectory object per line"
                )
            seen_record = True
            try:
                yield _trajectory(record, location)
            except FieldError as error:
                yield RecordError(location, error.field, error.message)


def parse_records(records: Iterable[Any]) -> Iterator[ParseResult]:
    """The same checks as :func:`parse`, on records already read (an API push's list):
    each is named by its index in the list, ``record 0`` first."""
    for index, record in enumerate(records):
        location = f"record {index}"
        try:
            yield _trajectory(record, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)


def to_record(trajectory: ParsedTrajectory) -> dict[str, Any]:
    """The Stepscope JSONL object for ``trajectory``; ``parse`` reads it back unchanged
    (apart from ``raw`` and ``location``). Every field is written out, defaults included,
    so the file reads the same without knowing the defaults."""
    labels_by_step: dict[int, list[dict[str, Any]]] = {}
    for label in trajectory.labels:
        if not 0 <= label.step_index < len(trajectory.steps):
            raise ValueError(f"label for step {label.step_index} is outside the trajectory")
        labels_by_step.setdefault(label.step_index, []).append(
            {"annotator": label.annotator, "value": label.value}
        )
    return {
        "id": trajectory.external_id,
        "task": trajectory.task,
        "task_key": trajectory.task_key,
        "ground_truth": trajectory.ground_truth,
        "model": trajectory.model_name,
        "outcome": {"reward": trajectory.outcome_reward, "success": trajectory.success},
        "first_error_index": trajectory.first_error_index,
        "decisive": _decisive_record(trajectory.decisive),
        "metadata": trajectory.metadata,
        "training": _trajectory_training_record(trajectory),
        "steps": [
            {
                "kind": step.kind,
                "role": step.role,
                "content": step.content,
                "labelable": step.labelable,
                "agent": step.agent,
                "tool_name": step.tool_name,
                "tool_args": step.tool_args,
                "metadata": step.metadata,
                "training": None if step.training is None else step.training.as_dict(),
                "labels": labels_by_step.get(index, []),
            }
            for index, step in enumerate(trajectory.steps)
        ],
    }


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a trajectory object, got {type(record).__name__}")
    _reject_unknown_keys(record, TRAJECTORY_KEYS, "")
    external_id = require(record, "id", str)
    if not external_id.strip():
        raise FieldError("id", "is empty")
    task = require(record, "task", str)
    raw_steps = require(record, "steps", list)
    if not raw_steps:
        raise FieldError("steps", "is empty; a trajectory needs at least one step")

    steps: list[ParsedStep] = []
    labels: list[ParsedLabel] = []
    for index, raw_step in enumerate(raw_steps):
        step = _plain_step(raw_step)
        if step is None:
            step, step_labels = _step(raw_step, index)
            labels.extend(step_labels)
        steps.append(step)

    reward, success = _outcome(record)
    first_error_index = _optional(record, "first_error_index", int, None, nullable=True)
    if first_error_index is not None and not -1 <= first_error_index < len(steps):
        raise FieldError(
            "first_error_index",
            f"is {first_error_index}; expected -1 (no error) or a step index "
            f"from 0 to {len(steps) - 1}",
        )
    decisive = _decisive(record, steps)
    policy_version, training_step = _trajectory_training(record)
    return ParsedTrajectory(
        external_id=external_id,
        task=task,
        steps=steps,
        task_key=_optional(record, "task_key", str, ""),
        ground_truth=_optional(record, "ground_truth", str, ""),
        model_name=_optional(record, "model", str, ""),
        outcome_reward=reward,
        success=success,
        first_error_index=first_error_index,
        metadata=_optional(record, "metadata", dict, {}),
        labels=labels,
        decisive=decisive,
        # Our own format is lossless, so the parsed trajectory is the record; keeping a
        # second copy would double what an import writes.
        raw=None,
        location=location,
        policy_version=policy_version,
        training_step=training_step,
    )


def _trajectory_training_record(trajectory: ParsedTrajectory) -> dict[str, Any] | None:
    if trajectory.policy_version is None and trajectory.training_step is None:
        return None
    record: dict[str, Any] = {}
    if trajectory.policy_version is not None:
        record["policy_version"] = trajectory.policy_version
    if trajectory.training_step is not None:
        record["training_step"] = trajectory.training_step
    return record


def _trajectory_training(record: dict[str, Any]) -> tuple[str | None, int | None]:
    """The trajectory's ``training`` object: null or absent for none."""
    raw = _optional(record, "training", dict, None, nullable=True)
    if raw is None:
        return None, None
    _reject_unknown_keys(raw, TRAJECTORY_TRAINING_KEYS, "training")
    return (
        _policy_version(raw, "training"),
        _optional(raw, "training_step", int, None, "training", nullable=True),
    )


def _policy_version(raw: dict[str, Any], path: str) -> str | None:
    version = _optional(raw, "policy_version", str, None, path, nullable=True)
    if version is not None and not version.strip():
        raise FieldError(f"{path}.policy_version", "is empty; write null for none")
    return version


def _step_training(raw: dict[str, Any], path: str) -> StepTraining | None:
    """A step's ``training`` object (null or absent for none): numbers where numbers
    go, finite ones, and ``token_logprobs`` a list of them."""
    training = _optional(raw, "training", dict, None, path, nullable=True)
    if training is None:
        return None
    path = f"{path}.training"
    _reject_unknown_keys(training, STEP_TRAINING_KEYS, path)
    numbers: dict[str, float | None] = {}
    for name in ("logprob_sum", "logprob_mean", "logprob_min", "advantage", "returns"):
        value = _optional(training, name, (int, float), None, path, nullable=True)
        if value is not None and not math.isfinite(value):
            raise FieldError(f"{path}.{name}", f"is {value}; expected a finite number")
        numbers[name] = None if value is None else float(value)
    tokens = _optional(training, "token_logprobs", list, None, path, nullable=True)
    if tokens is not None:
        for position, value in enumerate(tokens):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FieldError(
                    f"{path}.token_logprobs.{position}",
                    f"expected a number, got {type(value).__name__}",
                )
        tokens = [float(value) for value in tokens]
    return StepTraining(
        policy_version=_policy_version(training, path),
        training_step=_optional(training, "training_step", int, None, path, nullable=True),
        logprob_sum=numbers["logprob_sum"],
        logprob_mean=numbers["logprob_mean"],
        logprob_min=numbers["logprob_min"],
        advantage=numbers["advantage"],
        returns=numbers["returns"],
        token_logprobs=tokens,
    )


def _decisive_record(decisive: ParsedDecisive | None) -> dict[str, Any] | None:
    if decisive is None:
        return None
    return {"agent": decisive.agent, "step": decisive.step_index, "reason": decisive.reason}


def _decisive(record: dict[str, Any], steps: list[ParsedStep]) -> ParsedDecisive | None:
    """The decisive failure (which agent, at which step, decided that the run failed):
    null or absent for none; else ``agent`` one of the trajectory's agents
    (``trajectories.agents``), ``step`` one of its step indexes, at least one of the two
    given, and an optional ``reason``."""
    raw = _optional(record, "decisive", dict, None, nullable=True)
    if raw is None:
        return None
    _reject_unknown_keys(raw, DECISIVE_KEYS, "decisive")
    agent = _optional(raw, "agent", str, "", "decisive")
    step = _optional(raw, "step", int, None, "decisive", nullable=True)
    reason = _optional(raw, "reason", str, "", "decisive")
    if step is not None and not 0 <= step < len(steps):
        raise FieldError(
            "decisive.step", f"is {step}; expected a step index from 0 to {len(steps) - 1}"
        )
    if agent:
        agents = trajectory_agents((s.agent, s.role, s.labelable) for s in steps)
        if agent not in agents:
            raise FieldError(
                "decisive.agent",
                f"is {agent!r}, not one of the trajectory's agents ({', '.join(agents) or 'none'})",
            )
    elif step is None:
        raise FieldError("decisive", "names neither an agent nor a step; write null for none")
    return ParsedDecisive(agent=agent, step_index=step, reason=reason)


def _outcome(record: dict[str, Any]) -> tuple[float | None, bool | None]:
    outcome = _optional(record, "outcome", dict, {})
    _reject_unknown_keys(outcome, OUTCOME_KEYS, "outcome")
    reward = _optional(outcome, "reward", (int, float), None, "outcome", nullable=True)
    success = _optional(outcome, "success", bool, None, "outcome", nullable=True)
    return (None if reward is None else float(reward)), success


def _plain_step(raw: Any) -> ParsedStep | None:
    """The step, when it is a well-formed step without labels; otherwise None, and
    :func:`_step` checks it field by field to name what is wrong.

    Most steps of a large file are plain, and checking them with a few type tests
    instead of one helper call per field makes parsing several times faster. It accepts
    exactly what ``_step`` accepts (JSON decoding yields exact types, so ``type(x) is
    str`` is ``isinstance``, and ``bool`` is told apart from ``int``).
    """
    if type(raw) is not dict or not raw.keys() <= _PLAIN_STEP_KEYS:
        return None
    get = raw.get
    kind = get("kind", "message")
    role = get("role", "assistant")
    content = get("content")
    agent = get("agent", "")
    tool_name = get("tool_name", "")
    metadata = get("metadata", {})
    labels = get("labels", [])
    labelable = get("labelable", role == "assistant")
    if not (
        type(kind) is str
        and kind in _STEP_KIND_SET
        and type(role) is str
        and type(content) is str
        and type(agent) is str
        and type(tool_name) is str
        and type(labelable) is bool
        and type(metadata) is dict
        and type(labels) is list
        and not labels
        # A step with training facts is read by _step, which checks them.
        and get("training") is None
    ):
        return None
    return ParsedStep(kind, role, content, labelable, agent, tool_name, get("tool_args"), metadata)


_PLAIN_STEP_KEYS = frozenset(STEP_KEYS)
_STEP_KIND_SET = frozenset(STEP_KINDS)


def _step(raw: Any, index: int) -> tuple[ParsedStep, list[ParsedLabel]]:
    path = f"steps.{index}"
    if not isinstance(raw, dict):
        raise FieldError(path, f"expected a step object, got {type(raw).__name__}")
    _reject_unknown_keys(raw, STEP_KEYS, path)
    kind = _optional(raw, "kind", str, "message", path)
    if kind not in STEP_KINDS:
        raise FieldError(f"{path}.kind", f"is {kind!r}; expected one of {', '.join(STEP_KINDS)}")
    role = _optional(raw, "role", str, "assistant", path)
    labelable = _optional(raw, "labelable", bool, role == "assistant", path)
    step = ParsedStep(
        kind=kind,
        role=role,
        content=require(raw, "content", str, path),
        labelable=labelable,
        agent=_optional(raw, "agent", str, "", path),
        tool_name=_optional(raw, "tool_name", str, "", path),
        tool_args=raw.get("tool_args"),
        metadata=_optional(raw, "metadata", dict, {}, path),
        training=_step_training(raw, path),
    )

    labels = []
    annotators: set[str] = set()
    for number, raw_label in enumerate(_optional(raw, "labels", list, [], path)):
        label_path = f"{path}.labels.{number}"
        label = _label(raw_label, index, label_path)
        # ``alice`` and ``import:alice`` are one annotator.
        user = imported_annotator_name(label.annotator)
        if user in annotators:
            raise FieldError(
                f"{label_path}.annotator",
                f"{label.annotator!r} already labels this step; one label per annotator",
            )
        annotators.add(user)
        labels.append(label)
    if labels and not labelable:
        raise FieldError(f"{path}.labels", "a step with labelable false cannot carry labels")
    return step, labels


def _label(raw: Any, step_index: int, path: str) -> ParsedLabel:
    if not isinstance(raw, dict):
        raise FieldError(path, f"expected a label object, got {type(raw).__name__}")
    _reject_unknown_keys(raw, LABEL_KEYS, path)
    value = require(raw, "value", int, path)
    if value not in LABEL_VALUES:
        raise FieldError(f"{path}.value", f"is {value}; expected -1, 0 or 1")
    annotator = _optional(raw, "annotator", str, DEFAULT_ANNOTATOR, path)
    if not annotator.strip():
        raise FieldError(f"{path}.annotator", "is empty")
    return ParsedLabel(step_index=step_index, value=value, annotator=annotator)


def _optional(
    record: dict[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    default: Any,
    path: str = "",
    *,
    nullable: bool = False,
) -> Any:
    """``record[key]`` checked like :func:`require`, or ``default`` when the key is
    absent (or null, for the few fields documented as nullable)."""
    if key not in record or (nullable and record[key] is None):
        return default
    return require(record, key, kind, path)


def _reject_unknown_keys(record: dict[str, Any], known: tuple[str, ...], path: str) -> None:
    for key in record:
        if key not in known:
            name = f"{path}.{key}" if path else key
            raise FieldError(name, f"unknown field; expected one of {', '.join(known)}")
