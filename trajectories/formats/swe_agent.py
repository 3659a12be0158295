"""SWE-agent ``.traj`` files: one run of the agent on one issue per file.

A file is one JSON object, ``{environment, trajectory, history, info, replay_config?}``.
``trajectory`` lists the agent's turns as ``{thought, action, observation, response,
state, execution_time?}``; ``history`` is the chat the model saw, whose first real user
message is the issue statement; ``info`` holds ``exit_status``, the ``submission``
(patch) and cost statistics. The file says nothing about whether the patch resolved the
issue, so the outcome stays unknown unless ``info`` carries a ``resolved`` flag.

Each turn becomes up to three steps: its thought (left out when blank: there is nothing
to label), its action and the observation it produced. The thought and the action are
the agent's decisions and labelable; the observation is the environment's answer.
"""

from __future__ import annotations

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
    require,
)

LOCATION = "record 0"


@register("swe-agent", label="SWE-agent .traj")
def parse(path: Path) -> Iterator[ParseResult]:
    # A .traj file is one run, so it is read whole.
    record = jsonstream.load_file(path)
    if not isinstance(record, dict):
        raise FileError(
            f"{path}: expected a SWE-agent trajectory object, got {type(record).__name__}"
        )
    if "trajectory" not in record:
        raise FileError(f"{path}: not a SWE-agent .traj file: it has no 'trajectory'")
    try:
        yield _trajectory(record, path)
    except FieldError as error:
        yield RecordError(LOCATION, error.field, error.message)


def _trajectory(record: dict[str, Any], path: Path) -> ParsedTrajectory:
    entries = require(record, "trajectory", list)
    if not entries:
        raise FieldError("trajectory", "is empty; the agent took no turn")
    steps: list[ParsedStep] = []
    for number, entry in enumerate(entries):
        steps.extend(_steps(entry, number))

    info = _optional(record, "info", dict) or {}
    environment = _optional(record, "environment", str)
    resolved = info.get("resolved")
    if resolved is not None and not isinstance(resolved, bool):
        raise FieldError("info.resolved", f"expected bool, got {type(resolved).__name__}")
    replay = _replay_config(record)
    return ParsedTrajectory(
        external_id=path.stem,
        task=_task(record, environment),
        steps=steps,
        task_key=_instance_id(replay) or path.name.split(".")[0],
        model_name=_model_name(replay),
        outcome_reward=None if resolved is None else float(resolved),
        success=resolved,
        metadata={"environment": environment, **info},
        raw=record,
        location=LOCATION,
    )


def _steps(entry: Any, number: int) -> list[ParsedStep]:
    path = f"trajectory.{number}"
    if not isinstance(entry, dict):
        raise FieldError(path, f"expected an object, got {type(entry).__name__}")
    thought = _optional(entry, "thought", str, path) or ""
    action = require(entry, "action", str, path)
    observation = _optional(entry, "observation", str, path) or ""
    tool_name = action.split(maxsplit=1)[0] if action.strip() else ""

    action_metadata: dict[str, Any] = {"entry": number}
    for key in ("response", "execution_time"):
        if key in entry:
            action_metadata[key] = entry[key]
    observation_metadata: dict[str, Any] = {"entry": number}
    if "state" in entry:
        observation_metadata["state"] = entry["state"]

    steps = []
    if thought.strip():
        steps.append(
            ParsedStep(
                kind="thought",
                role="assistant",
                content=thought,
                labelable=True,
                metadata={"entry": number},
            )
        )
    steps.append(
        ParsedStep(
            kind="action",
            role="assistant",
            content=action,
            labelable=True,
            tool_name=tool_name,
            metadata=action_metadata,
        )
    )
    steps.append(
        ParsedStep(
            kind="observation",
            role="tool",
            content=observation,
            labelable=False,
            tool_name=tool_name,
            metadata=observation_metadata,
        )
    )
    return steps


def _task(record: dict[str, Any], environment: str | None) -> str:
    """The first user message that is not part of a demonstration: the issue statement
    (or, for CTF runs, the challenge). Without one, the environment's name."""
    history = _optional(record, "history", list) or []
    for number, message in enumerate(history):
        path = f"history.{number}"
        if not isinstance(message, dict):
            raise FieldError(path, f"expected an object, got {type(message).__name__}")
        if message.get("role") != "user" or message.get("is_demo"):
            continue
        content = _text(message.get("content"), f"{path}.content")
        if content.strip():
            return content
    if environment:
        return environment
    raise FieldError("history", "has no user message to take the task from, and no environment")


def _text(content: Any, path: str) -> str:
    """Message content: a string, or (in newer SWE-agent) a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for number, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(require(part, "text", str, f"{path}.{number}"))
        return "\n".join(texts)
    if content is None:
        return ""
    raise FieldError(path, f"expected str or a list of parts, got {type(content).__name__}")


def _replay_config(record: dict[str, Any]) -> dict[str, Any]:
    """The run's configuration, which SWE-agent writes as an object or a JSON string.
    It only supplies the model and instance names, so one that cannot be read is
    passed over (it stays in the raw record)."""
    replay = record.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = jsonstream.loads(replay)
        except ValueError:
            return {}
    return replay if isinstance(replay, dict) else {}


def _instance_id(replay: dict[str, Any]) -> str:
    statement = replay.get("problem_statement")
    instance = statement.get("id") if isinstance(statement, dict) else None
    return instance if isinstance(instance, str) else ""


def _model_name(replay: dict[str, Any]) -> str:
    agent = replay.get("agent")
    model = agent.get("model") if isinstance(agent, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else ""


def _optional(
    record: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str = ""
) -> Any:
    """``record[key]`` checked like :func:`require`, or None when absent or null."""
    if record.get(key) is None:
        return None
    return require(record, key, kind, path)
