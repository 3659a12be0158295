"""OpenPipe ART trajectories: the Parquet files its trajectory logging writes (one per
training step, ``trajectories/<split>/<step>.parquet``, art/utils/trajectory_logging.py)
and the body of its log request (``{"trajectory_groups": [...]}``, each group
``TrajectoryGroup.model_dump()``: ``{trajectories, metadata, metrics, logs, ...}``).

An ART trajectory is ``{messages_and_choices, tools, reward, initial_policy_version,
final_policy_version, metrics, metadata, logs, ...}``. Its messages are the context
(not labelable: system, user and tool messages, and assistant turns written elsewhere)
and its choices (``{finish_reason, index, message, logprobs}``) the policy's turns,
which ART trains on: each is a labelable step (a ``tool_call`` when it calls tools)
carrying the initial policy version, the training step (the file's name where it is a
number) and the logprob summary of ``logprobs.content``. ``reward`` is the outcome
reward; ``metrics`` and ``metadata`` go to the metadata (the final policy version too).

A Parquet file is read in either of ART's layouts: version 2, whose ``trajectory_json``
column holds the whole trajectory, and version 1, whose ``messages`` column holds
flattened messages (``trainable`` marks the choices; v1 keeps no logprobs or policy
versions). One group's rollouts share a task key (``<file>:<group index>``), so a GRPO
group stays a group. The format ``art-tokens`` keeps each choice's token logprobs too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    StepTraining,
    logprob_summary,
    require,
    tool_call_step,
)
from trajectories.formats.trainers import (
    integer,
    number,
    parquet_columns,
    parquet_rows,
    scalar,
)

SUFFIXES = (".parquet", ".json")
KINDS = {"tool": "tool_result", "system": "message", "user": "message"}


@register("art", label="OpenPipe ART trajectories (Parquet, log body)", suffixes=SUFFIXES)
def parse(path: Path) -> Iterator[ParseResult]:
    yield from _parse(path, keep_tokens=False)


@register("art-tokens", suffixes=SUFFIXES)
def parse_with_tokens(path: Path) -> Iterator[ParseResult]:
    yield from _parse(path, keep_tokens=True)


def _parse(path: Path, *, keep_tokens: bool) -> Iterator[ParseResult]:
    reader = _Reader(path, keep_tokens)
    if path.suffix == ".parquet" or _starts_like_parquet(path):
        yield from reader.parquet()
    else:
        yield from reader.log_body()


def _starts_like_parquet(path: Path) -> bool:
    """Whether the file begins with Parquet's magic bytes (an upload may lose its name)."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"PAR1"
    except OSError:
        return False


class _Reader:
    def __init__(self, path: Path, keep_tokens: bool) -> None:
        self.path = path
        self.keep_tokens = keep_tokens
        # ART names its files by training step: 0003.parquet.
        self.training_step = int(path.stem) if path.stem.isdigit() else None

    def parquet(self) -> Iterator[ParseResult]:
        columns = parquet_columns(self.path)
        if "trajectory_json" not in columns and "messages" not in columns:
            raise FileError(
                f"{self.path}: not an ART trajectory file: it has neither a trajectory_json "
                "nor a messages column"
            )
        seen: dict[int, int] = {}
        for location, row in parquet_rows(self.path):
            try:
                group = integer(require(row, "group_index", (int, float)), "group_index")
                payload = row.get("trajectory_json")
                if "trajectory_json" in row and payload is None:
                    continue  # an empty group's sentinel row
                if payload is not None:
                    trajectory = _json_object(payload, "trajectory_json")
                else:
                    if row.get("reward") is None and row.get("messages") is None:
                        continue  # an empty group's sentinel row (version 1)
                    trajectory = _legacy(row)
                index = row.get("trajectory_index")
                number_ = seen.get(group, 0)
                if index is not None:
                    number_ = integer(index, "trajectory_index")
                seen[group] = number_ + 1
                yield self.trajectory(trajectory, "", group, number_, location)
            except FieldError as error:
                yield RecordError(location, error.field, error.message)

    def log_body(self) -> Iterator[ParseResult]:
        body = jsonstream.load_file(self.path)
        if isinstance(body, dict) and "trajectory_groups" in body:
            groups, path = body["trajectory_groups"], "trajectory_groups"
        elif isinstance(body, dict) and "trajectories" in body:
            groups, path = [body], ""
        else:
            groups, path = body, ""
        if not isinstance(groups, list):
            raise FileError(
                f"{self.path}: not an ART log body: expected trajectory_groups (a list of "
                "groups), one group or a list of groups"
            )
        for group_number, group in enumerate(groups):
            group_path = f"{path}.{group_number}" if path else str(group_number)
            location = f"record {group_number}"
            if not isinstance(group, dict):
                yield RecordError(location, group_path, "expected a trajectory group object")
                continue
            trajectories = group.get("trajectories")
            if not isinstance(trajectories, list):
                yield RecordError(location, f"{group_path}.trajectories", "expected a list")
                continue
            for number_, trajectory in enumerate(trajectories):
                field = f"{group_path}.trajectories.{number_}"
                try:
                    yield self.trajectory(trajectory, field, group_number, number_, location)
                except FieldError as error:
                    yield RecordError(location, error.field, error.message)

    def trajectory(
        self, raw: Any, path: str, group: int, number_: int, location: str
    ) -> ParsedTrajectory:
        if not isinstance(raw, dict):
            raise FieldError(path, f"expected a trajectory object, got {type(raw).__name__}")
        prefix = f"{path}." if path else ""
        reward = number(require(raw, "reward", (int, float), path), f"{prefix}reward")
        initial = _version(raw, "initial_policy_version", prefix)
        final = _version(raw, "final_policy_version", prefix)
        items = require(raw, "messages_and_choices", list, path)
        steps: list[ParsedStep] = []
        for position, item in enumerate(items):
            steps.append(self.step(item, f"{prefix}messages_and_choices.{position}", initial))
        if not any(step.labelable for step in steps):
            raise FieldError(f"{prefix}messages_and_choices", "has no choice the policy made")
        metadata: dict[str, Any] = {"group": group}
        for key in ("metrics", "metadata"):
            value = raw.get(key)
            if isinstance(value, dict) and value:
                metadata[key] = {k: v for k, v in value.items() if scalar(v)}
        if final is not None:
            metadata["final_policy_version"] = final
        task = next((s.content for s in steps if s.role == "user"), steps[0].content)
        return ParsedTrajectory(
            external_id=f"{self.path.stem}:{group}:{number_}",
            task=task,
            task_key=f"art:{self.path.stem}:{group}",
            steps=steps,
            outcome_reward=reward,
            metadata=metadata,
            raw=raw,
            location=location,
            policy_version=initial,
            training_step=self.training_step,
        )

    def step(self, item: Any, path: str, version: str | None) -> ParsedStep:
        if not isinstance(item, dict):
            raise FieldError(path, f"expected a message or choice, got {type(item).__name__}")
        choice = "finish_reason" in item or item.get("trainable") is True
        message = require(item, "message", dict, path) if "finish_reason" in item else item
        where = f"{path}.message" if "finish_reason" in item else path
        role = message.get("role")
        if not isinstance(role, str):
            raise FieldError(f"{where}.role", "is missing")
        text = _text(message.get("content"))
        if not choice:
            kind = KINDS.get(role, "message")
            return ParsedStep(kind=kind, role=role, content=text, labelable=False)
        training = StepTraining(
            policy_version=version,
            training_step=self.training_step,
            **logprob_summary(_logprobs(item, path), keep_tokens=self.keep_tokens),
        )
        calls = _calls(message.get("tool_calls"), f"{where}.tool_calls")
        if calls:
            step = tool_call_step(content=text, calls=calls, metadata={}, errors=[])
            step.training = training
            return step
        return ParsedStep(
            kind="message", role="assistant", content=text, labelable=True, training=training
        )


def _text(content: Any) -> str:
    """A message's content: text as it is, parts (or anything else) as JSON."""
    if isinstance(content, str):
        return content
    return "" if content is None else json.dumps(content)


def _legacy(row: dict[str, Any]) -> dict[str, Any]:
    """A version 1 row as the trajectory it flattened."""
    messages = []
    for position, flat in enumerate(row.get("messages") or []):
        if not isinstance(flat, dict):
            raise FieldError(f"messages.{position}", "expected a message struct")
        message = {"role": flat.get("role"), "content": flat.get("content")}
        if flat.get("tool_calls"):
            message["tool_calls"] = _json_value(flat["tool_calls"], f"messages.{position}")
        if flat.get("tool_call_id"):
            message["tool_call_id"] = flat["tool_call_id"]
        messages.append({**message, "trainable": bool(flat.get("trainable"))})
    return {
        "messages_and_choices": messages,
        "reward": row.get("reward"),
        "metrics": _json_object(row["metrics"], "metrics") if row.get("metrics") else {},
        "metadata": _json_object(row["metadata"], "metadata") if row.get("metadata") else {},
    }


def _version(raw: dict[str, Any], key: str, prefix: str) -> str | None:
    value = raw.get(key)
    return None if value is None else str(integer(value, f"{prefix}{key}"))


def _logprobs(choice: dict[str, Any], path: str) -> list[float]:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return []
    tokens = logprobs.get("content") or []
    if not isinstance(tokens, list):
        raise FieldError(f"{path}.logprobs.content", "expected a list of tokens")
    values = []
    for position, token in enumerate(tokens):
        where = f"{path}.logprobs.content.{position}"
        if not isinstance(token, dict):
            raise FieldError(where, "expected a token object")
        values.append(number(require(token, "logprob", (int, float), where), f"{where}.logprob"))
    return values


def _calls(value: Any, path: str) -> list[dict[str, Any]]:
    if not value:
        return []
    if not isinstance(value, list):
        raise FieldError(path, "expected a list of tool calls")
    calls = []
    for position, call in enumerate(value):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise FieldError(f"{path}.{position}.function.name", "is missing")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        calls.append({"id": call.get("id"), "name": function["name"], "arguments": arguments})
    return calls


def _json_value(payload: Any, field: str) -> Any:
    if not isinstance(payload, str | bytes):
        return payload
    try:
        return jsonstream.loads(payload)
    except ValueError as error:
        raise FieldError(field, f"is not valid JSON: {error}") from None


def _json_object(payload: Any, field: str) -> dict[str, Any]:
    value = _json_value(payload, field)
    if not isinstance(value, dict):
        raise FieldError(field, f"expected a JSON object, got {type(value).__name__}")
    return value
