"""NVIDIA NeMo Gym rollouts (``ng_collect_rollouts`` output): JSON Lines, one rollout per
line, ``{responses_create_params: {input, instructions?, metadata?, ...}, response:
{id, model, output: [...], usage}, reward, _ng_task_index, _ng_rollout_index, agent_ref,
<the environment's own fields>}``.

A rollout is a trajectory. Its prompt (``instructions``, then ``input``: a string or
Responses input items) gives steps that are inputs, not labelable: the policy did not
write them in this rollout. The ``response.output`` items are the rollout: ``reasoning``
(a ``thought``, when it has summary text), ``message`` (the policy's text),
``function_call`` and the built-in tools' ``*_call`` items (a ``tool_call``), all
labelable, and their ``*_call_output`` (a ``tool_result`` below its call, not
labelable). A message's token ids and log
probabilities stay in the raw record; the step keeps their counts and the log
probabilities' sum (``tokens``, ``logprob_sum``).

``reward`` is the trajectory's outcome reward. The rollouts of one task are a group
(GRPO's), and ``task_key`` names it: ``<agent>:<task index>``, so group-relative credit
and sibling comparisons find them; the external id adds the rollout index. ``success`` is
set only where the environment says so (``resolved``). The environment's other scalar
fields (scores, flags, answers) go to the metadata; nested ones stay in the raw record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
)
from trajectories.formats.chat_content import decode
from trajectories.formats.spans import depth_below

INPUT_ROLES = ("system", "developer", "user")
TEXT_TYPES = ("input_text", "output_text", "text", "summary_text")
KNOWN_FIELDS = (
    "responses_create_params",
    "response",
    "reward",
    "_ng_task_index",
    "_ng_rollout_index",
    "agent_ref",
)


@register("nemo-gym", label="NeMo Gym rollouts (JSON Lines)", suffixes=(".jsonl",))
def parse(path: Path) -> Iterator[ParseResult]:
    for entry in jsonstream.iter_lines(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            yield _trajectory(record, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a rollout object, got {type(record).__name__}")
    params = require(record, "responses_create_params", dict)
    response = require(record, "response", dict)
    reward = _number(require(record, "reward", (int, float)), "reward")
    task_index = _index(record, "_ng_task_index")
    rollout_index = _index(record, "_ng_rollout_index")
    agent_ref = record.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, dict) else None
    agent = agent if isinstance(agent, str) and agent.strip() else "agent"

    steps: list[ParsedStep] = []
    names: dict[str, int] = {}  # call id -> the step of its call
    instructions = params.get("instructions")
    if isinstance(instructions, str) and instructions.strip():
        _add(
            steps, ParsedStep(kind="message", role="system", content=instructions, labelable=False)
        )
    prompt = params.get("input")
    if isinstance(prompt, str):
        _add(steps, ParsedStep(kind="message", role="user", content=prompt, labelable=False))
    elif isinstance(prompt, list):
        for number, item in enumerate(prompt):
            _item(steps, names, item, f"responses_create_params.input.{number}", prompt=True)
    elif prompt is not None:
        raise FieldError("responses_create_params.input", "expected a string or a list of items")
    output = require(response, "output", list, "response")
    for number, item in enumerate(output):
        _item(steps, names, item, f"response.output.{number}", prompt=False)
    if not any(step.labelable for step in steps):
        raise FieldError("response.output", "has nothing the policy wrote to make a step of")

    metadata: dict[str, Any] = {
        "agent": agent,
        "task_index": task_index,
        "rollout_index": rollout_index,
    }
    if isinstance(response.get("id"), str):
        metadata["response_id"] = response["id"]
    usage = response.get("usage")
    if isinstance(usage, dict):
        metadata["usage"] = {
            key: value for key, value in usage.items() if isinstance(value, int) and value >= 0
        }
    for key, value in record.items():
        if key not in KNOWN_FIELDS and _scalar(value):
            metadata[key] = value
    resolved = record.get("resolved")
    model = response.get("model") or params.get("model")
    return ParsedTrajectory(
        external_id=f"{agent}:{task_index}:{rollout_index}",
        task=_task(params, steps),
        steps=steps,
        task_key=f"{agent}:{task_index}",
        ground_truth=_answer(record),
        model_name=model if isinstance(model, str) else "",
        outcome_reward=reward,
        success=resolved if isinstance(resolved, bool) else None,
        metadata=metadata,
        raw=record,
        location=location,
    )


def _item(
    steps: list[ParsedStep], calls: dict[str, int], item: Any, path: str, *, prompt: bool
) -> None:
    """One Responses input or output item as a step (or none: reasoning kept only
    encrypted, empty text)."""
    if not isinstance(item, dict):
        raise FieldError(path, f"expected an item object, got {type(item).__name__}")
    kind = item.get("type", "message" if "role" in item else None)
    if not isinstance(kind, str):
        raise FieldError(f"{path}.type", "is missing" if kind is None else "expected str")
    labelable = not prompt
    metadata: dict[str, Any] = {"prompt": True} if prompt else {}
    if kind == "message":
        role = require(item, "role", str, path)
        text = _text(item.get("content"), f"{path}.content")
        if not text.strip():
            return
        _logprobs(item, metadata)
        step = ParsedStep(
            kind="message",
            role=role,
            content=text,
            labelable=labelable and role not in INPUT_ROLES,
            metadata=metadata,
        )
    elif kind == "reasoning":
        text = _text(item.get("summary"), f"{path}.summary") or _text(
            item.get("content"), f"{path}.content"
        )
        if not text.strip():
            return
        step = ParsedStep(
            kind="thought", role="assistant", content=text, labelable=labelable, metadata=metadata
        )
    elif kind.endswith("_call"):
        # A built-in tool's call (web_search_call) may name no tool: its type names it.
        if kind == "function_call" or "name" in item:
            name = require(item, "name", str, path)
        else:
            name = kind.removesuffix("_call")
        call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else ""
        if call_id:
            metadata["tool_call_id"] = call_id
            calls[call_id] = len(steps)
        step = ParsedStep(
            kind="tool_call",
            role="assistant",
            content="",
            labelable=labelable,
            tool_name=name,
            tool_args=decode(item.get("arguments", item.get("input", item.get("action")))),
            metadata=metadata,
        )
    elif kind.endswith("_call_output"):
        call_id = require(item, "call_id", str, path)
        metadata["tool_call_id"] = call_id
        output = decode(item.get("output"))
        if isinstance(output, dict) and isinstance(output.get("output"), str):
            metadata["result"] = {key: value for key, value in output.items() if key != "output"}
            output = output["output"]
        call = calls.get(call_id)
        if call is not None:
            metadata["parent"] = call
        step = ParsedStep(
            kind="tool_result",
            role="tool",
            content=output if isinstance(output, str) else json.dumps(output, sort_keys=True),
            labelable=False,
            tool_name=steps[call].tool_name if call is not None else "",
            metadata=metadata,
        )
    else:
        raise FieldError(
            f"{path}.type",
            f"is {kind!r}; expected message, reasoning, a call (function_call, ...) or "
            "its output (function_call_output, ...)",
        )
    _add(steps, step)


def _add(steps: list[ParsedStep], step: ParsedStep) -> None:
    """Append ``step``; the policy's steps hang below the last user message before them
    (a tool result already names its call)."""
    if step.role in INPUT_ROLES:
        step.metadata.pop("parent", None)
    elif "parent" not in step.metadata:
        for index in range(len(steps) - 1, -1, -1):
            if steps[index].role == "user":
                step.metadata["parent"] = index
                break
    step.metadata["depth"] = depth_below(steps, step)
    steps.append(step)


def _text(content: Any, path: str) -> str:
    content = decode(content)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise FieldError(path, f"expected text or a list of parts, got {type(content).__name__}")
    texts = []
    for number, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") in TEXT_TYPES:
            texts.append(require(part, "text", str, f"{path}.{number}"))
    return "\n".join(texts)


def _logprobs(item: dict[str, Any], metadata: dict[str, Any]) -> None:
    prompt_ids = decode(item.get("prompt_token_ids"))
    generated = decode(item.get("generation_token_ids"))
    logprobs = decode(item.get("generation_log_probs"))
    tokens = {}
    if isinstance(prompt_ids, list) and prompt_ids:
        tokens["prompt"] = len(prompt_ids)
    if isinstance(generated, list) and generated:
        tokens["generated"] = len(generated)
    if tokens:
        metadata["tokens"] = tokens
    if isinstance(logprobs, list) and logprobs:
        numbers = [value for value in logprobs if _finite(value)]
        if len(numbers) == len(logprobs):
            metadata["logprob_sum"] = math.fsum(numbers)


def _task(params: dict[str, Any], steps: list[ParsedStep]) -> str:
    for step in steps:
        if step.role == "user" and step.content.strip():
            return step.content
    extra = params.get("metadata")
    if isinstance(extra, dict):
        for key in ("problem_statement", "question", "prompt", "task"):
            if isinstance(extra.get(key), str) and extra[key].strip():
                return str(extra[key])
    for step in steps:
        if step.role == "system" and step.content.strip():
            return step.content
    raise FieldError("responses_create_params.input", "has no user message to take the task from")


def _answer(record: dict[str, Any]) -> str:
    for key in ("expected_answer", "answer", "ground_truth"):
        value = record.get(key)
        if isinstance(value, str):
            return value
        if _finite(value):
            return str(value)
    return ""


def _index(record: dict[str, Any], key: str) -> int:
    value = require(record, key, int)
    if value < 0:
        raise FieldError(key, f"is {value}; expected an index from 0")
    return int(value)


def _number(value: float, key: str) -> float:
    if not math.isfinite(value):
        raise FieldError(key, "is not a finite number")
    return float(value)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool) or _finite(value)
