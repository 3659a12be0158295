"""verifiers / prime-rl environment evaluations (``outputs/evals/<env>--<model>/<run>/``):
``results.jsonl`` holds one rollout per line, ``{id | example_id, prompt: [messages],
completion: [messages] | str, answer, task, info, reward, <reward function>: score ...,
generation_ms, scoring_ms, total_ms}``, and ``metadata.json`` beside it the run's
``env`` / ``env_id``, ``model``, ``rollouts_per_example`` and averages.

Import ``results.jsonl`` or its run folder (``metadata.json`` is read from beside it, and
is not an import of its own). A rollout is a trajectory: its prompt messages are inputs,
its completion is OpenAI chat messages as in the ``openai-messages`` format (assistant
turns labelable, tool results and the environment's ``user`` turns not). Tool calls
written as JSON text (math-python writes each call as a string) are decoded.

``reward`` is the outcome reward; every other number of the rollout's top level (each
reward function's score, tool-call counts) is kept under ``metadata.metrics``, and the
timings under ``metadata.timing_ms``. The rollouts of one example are a group:
``task_key`` is ``<env>:<example id>``; the external id adds the run folder and the
rollout's number among its example's rollouts in the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonio, jsonstream, register
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
)
from trajectories.formats.openai_messages import message_step
from trajectories.formats.spans import depth_below

RESULTS = "results.jsonl"
METADATA = "metadata.json"
TIMINGS = ("generation_ms", "scoring_ms", "total_ms")
KNOWN_FIELDS = ("id", "example_id", "prompt", "completion", "answer", "task", "info", "reward")


def units(folder: Path) -> list[Path]:
    """Every results file below ``folder``, not the run metadata beside it."""
    return sorted(path for path in folder.rglob("*.jsonl") if path.is_file())


@register("verifiers", label="verifiers eval results (results.jsonl)", units=units)
def parse(path: Path) -> Iterator[ParseResult]:
    if path.is_dir():
        path = path / RESULTS
    if path.name == METADATA:
        raise FileError(
            f"{path}: a verifiers run's metadata; import the {RESULTS} beside it "
            "(or the run folder), which reads it"
        )
    run = _run(path)
    seen: dict[str, int] = {}
    for entry in jsonstream.iter_lines(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            yield _trajectory(record, location, run, seen)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)


def _run(results: Path) -> dict[str, Any]:
    """The run's env, model and id: from ``metadata.json`` when it is there, else from
    the folders (``<env>--<model>/<run>/``)."""
    folder = results.parent
    env, _, model = folder.parent.name.partition("--")
    run: dict[str, Any] = {"env": env, "model": model, "run": folder.name, "metadata": {}}
    beside = folder / METADATA
    if beside.is_file():
        metadata = jsonio.load_file(beside)
        if not isinstance(metadata, dict):
            raise FileError(f"{beside}: expected the run's metadata object")
        for key in ("env", "env_id"):
            if isinstance(metadata.get(key), str) and metadata[key]:
                run["env"] = metadata[key]
        if isinstance(metadata.get("model"), str):
            run["model"] = metadata["model"]
        run["metadata"] = {
            key: metadata[key]
            for key in ("num_examples", "rollouts_per_example", "sampling_args", "date")
            if key in metadata
        }
    run["env"] = run["env"] or "verifiers"
    return run


def _trajectory(
    record: Any, location: str, run: dict[str, Any], seen: dict[str, int]
) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a rollout object, got {type(record).__name__}")
    key = "example_id" if "example_id" in record else "id"
    example = require(record, key, (int, str))
    if isinstance(example, str) and not example.strip():
        raise FieldError(key, "is empty")
    reward = require(record, "reward", (int, float))
    if not math.isfinite(reward):
        raise FieldError("reward", "is not a finite number")
    steps: list[ParsedStep] = []
    names: dict[str, str] = {}
    pending: list[tuple[int, str]] = []
    for part in ("prompt", "completion"):
        messages = require(record, part, (list, str))
        if isinstance(messages, str):
            messages = [{"role": "user" if part == "prompt" else "assistant", "content": messages}]
        for number, message in enumerate(messages):
            path = f"{part}.{number}"
            step = message_step(_decoded_calls(message, path), path, names)
            for call in step.metadata.get("tool_calls", []):
                if call["id"]:
                    names[call["id"]] = call["name"]
            if part == "prompt":
                step.labelable = False
                step.metadata["prompt"] = True
            _add(steps, step, pending)
    if not any(step.labelable for step in steps):
        raise FieldError("completion", "has no assistant message to make a labelable step of")
    task = next((step.content for step in steps if step.role == "user"), "")
    if not task.strip():
        raise FieldError("prompt", "has no user message to take the task from")

    group = f"{run['env']}:{example}"
    rollout = seen.get(group, 0)
    seen[group] = rollout + 1
    metadata: dict[str, Any] = {
        "env": run["env"],
        "run": run["run"],
        "example_id": example,
        "rollout": rollout,
        "metrics": {
            name: float(value)
            for name, value in record.items()
            if name not in KNOWN_FIELDS and name not in TIMINGS and _finite(value)
        },
        "timing_ms": {name: float(record[name]) for name in TIMINGS if _finite(record.get(name))},
        **run["metadata"],
    }
    if isinstance(record.get("task"), str):
        metadata["task"] = record["task"]
    answer = record.get("answer")
    return ParsedTrajectory(
        external_id=f"{run['env']}:{run['run']}:{example}:{rollout}",
        task=task,
        steps=steps,
        task_key=group,
        ground_truth=answer if isinstance(answer, str) else str(answer) if _finite(answer) else "",
        model_name=run["model"],
        outcome_reward=float(reward),
        metadata=metadata,
        raw=record,
        location=location,
    )


def _decoded_calls(message: Any, path: str) -> Any:
    """The message with tool calls written as JSON text decoded to objects."""
    if not isinstance(message, dict) or not isinstance(message.get("tool_calls"), list):
        return message
    calls = []
    for number, call in enumerate(message["tool_calls"]):
        if isinstance(call, str):
            try:
                call = jsonio.loads(call)
            except ValueError as error:
                raise FieldError(
                    f"{path}.tool_calls.{number}",
                    f"is text that is not a JSON tool call: {jsonio.error_message(error)}",
                ) from None
        calls.append(call)
    return {**message, "tool_calls": calls}


def _add(steps: list[ParsedStep], step: ParsedStep, pending: list[tuple[int, str]]) -> None:
    """Append ``step``: a tool result below its call, the model's steps below the user
    message before them. A tool result that names no call (math-python's) answers the
    next call of the assistant message before it not answered yet: ``pending`` holds
    those as (step index, tool name)."""
    call_id = step.metadata.get("tool_call_id")
    if step.role == "tool":
        for number, (index, name) in enumerate(pending):
            calls = steps[index].metadata.get("tool_calls", [])
            if not call_id or any(call["id"] == call_id for call in calls):
                step.metadata["parent"] = index
                step.tool_name = step.tool_name or name
                del pending[number]
                break
    elif step.role == "assistant":
        pending.clear()
        pending.extend((len(steps), call["name"]) for call in step.metadata.get("tool_calls", []))
        for index in range(len(steps) - 1, -1, -1):
            if steps[index].role == "user":
                step.metadata["parent"] = index
                break
    step.metadata["depth"] = depth_below(steps, step)
    steps.append(step)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
