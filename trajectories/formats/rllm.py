"""rLLM episodes (``Episode.to_dict()``): one episode per JSON file, a JSON array of
them, or JSON Lines. An episode is ``{id: "<task id>:<rollout index>", task,
is_correct, termination_reason, trajectories: [...], metrics, info}``; each of its
trajectories ``{uid, name, task, steps: [...], reward, info}``; each step one model call,
``{chat_completions, observation, thought, action, model_response, info, reward, done,
mc_return, advantage, weight_version, prompt_ids, response_ids, logprobs, ...}``
(rllm/agents/agent.py, ``Step.to_dict``). An episode may also carry the trainer's
``step``, as rLLM's episode store does.

Each rLLM trajectory becomes a Stepscope trajectory. A step's context messages that
earlier steps did not show (``chat_completions`` grows call by call) come first, not
labelable; then the step's ``thought`` (a labelable thought, when there is one) and its
response (``model_response``: labelable; the answer on the ``done`` step), which carries
what the trainer knew: ``weight_version`` as the policy version, the episode's ``step``,
the logprob summary of ``logprobs``, ``advantage`` (a per-token list is averaged, its
length kept in the metadata) and ``mc_return`` as the return. The step's own reward and
token counts go to its metadata. The trajectory's ``reward`` is the outcome reward and
the episode's ``is_correct`` its success.

The rollouts of one task share a task key, ``<task id>:<trajectory name>`` (rLLM's own
``TrajectoryGroup`` id), so GRPO groups stay groups. The raw record kept is the
trajectory without its token ids and logprobs, which the summary stands for. The format
``rllm-tokens`` reads the same files and keeps each step's token logprobs too.
"""

from __future__ import annotations

import json
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
    StepTraining,
    logprob_summary,
    require,
)
from trajectories.formats.trainers import integer, number, optional_number, scalar

# Per-token payloads: summarised on the step, left out of the raw record kept.
TOKEN_FIELDS = ("prompt_ids", "response_ids", "logprobs", "routing_matrices", "model_output")
MESSAGE_KINDS = {"tool": "tool_result", "assistant": "message"}


@register("rllm", label="rLLM episodes (JSON or JSON Lines)", suffixes=(".json", ".jsonl"))
def parse(path: Path) -> Iterator[ParseResult]:
    yield from _parse(path, keep_tokens=False)


@register("rllm-tokens", suffixes=(".json", ".jsonl"))
def parse_with_tokens(path: Path) -> Iterator[ParseResult]:
    yield from _parse(path, keep_tokens=True)


def _parse(path: Path, *, keep_tokens: bool) -> Iterator[ParseResult]:
    for entry in jsonstream.iter_records(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            trajectories = _episode(record, location, keep_tokens)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
            continue
        yield from trajectories


def _episode(record: Any, location: str, keep_tokens: bool) -> list[ParsedTrajectory]:
    if not isinstance(record, dict):
        raise FieldError("", f"expected an episode object, got {type(record).__name__}")
    episode_id = require(record, "id", str)
    task_id = episode_id.split(":")[0]
    raw_trajectories = require(record, "trajectories", list)
    if not raw_trajectories:
        raise FieldError("trajectories", "is empty; an episode needs at least one trajectory")
    is_correct = record.get("is_correct")
    step = record.get("step")
    training_step = None if step is None else integer(step, "step")
    metadata: dict[str, Any] = {"episode_id": episode_id}
    if isinstance(record.get("termination_reason"), str):
        metadata["termination_reason"] = record["termination_reason"]
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        metadata["metrics"] = {k: v for k, v in metrics.items() if scalar(v)}
    return [
        _trajectory(
            raw,
            f"trajectories.{number_}",
            episode=record,
            task_id=task_id,
            success=is_correct if isinstance(is_correct, bool) else None,
            training_step=training_step,
            metadata=metadata,
            location=location,
            keep_tokens=keep_tokens,
        )
        for number_, raw in enumerate(raw_trajectories)
    ]


def _trajectory(
    raw: Any,
    path: str,
    *,
    episode: dict[str, Any],
    task_id: str,
    success: bool | None,
    training_step: int | None,
    metadata: dict[str, Any],
    location: str,
    keep_tokens: bool,
) -> ParsedTrajectory:
    if not isinstance(raw, dict):
        raise FieldError(path, f"expected a trajectory object, got {type(raw).__name__}")
    name = raw.get("name") if isinstance(raw.get("name"), str) and raw["name"] else "agent"
    uid = raw.get("uid")
    raw_steps = require(raw, "steps", list, path)
    task_text, ground_truth = _task(raw.get("task", episode.get("task")))
    steps: list[ParsedStep] = []
    previous: list[Any] = []  # the last step's messages, already made steps
    versions: list[str] = []
    for number_, raw_step in enumerate(raw_steps):
        step_path = f"{path}.steps.{number_}"
        previous = _step(raw_step, step_path, steps, previous, training_step, keep_tokens, versions)
    if not any(step.labelable for step in steps):
        raise FieldError(f"{path}.steps", "has no model response to make a step of")
    reward = raw.get("reward")
    return ParsedTrajectory(
        external_id=f"{episode['id']}/{uid if isinstance(uid, str) and uid else name}",
        task=task_text,
        task_key=f"{task_id}:{name}",
        ground_truth=ground_truth,
        steps=steps,
        outcome_reward=None if reward is None else number(reward, f"{path}.reward"),
        success=success,
        metadata={**metadata, "trajectory_name": name},
        raw={key: value for key, value in raw.items() if key != "steps"}
        | {"steps": [_without_tokens(s) for s in raw_steps]},
        location=location,
        policy_version=versions[0] if versions else None,
        training_step=training_step,
    )


def _step(
    raw: Any,
    path: str,
    steps: list[ParsedStep],
    previous: list[Any],
    training_step: int | None,
    keep_tokens: bool,
    versions: list[str],
) -> list[Any]:
    """Append the steps one rLLM step makes; returns its messages. Where its messages
    continue ``previous`` (rLLM's cumulative chat), only the new ones are context;
    otherwise all of them are."""
    if not isinstance(raw, dict):
        raise FieldError(path, f"expected a step object, got {type(raw).__name__}")
    messages = raw.get("chat_completions") or []
    if not isinstance(messages, list):
        raise FieldError(f"{path}.chat_completions", "expected a list of messages")
    context = messages[:-1] if messages and _role(messages[-1]) == "assistant" else messages
    shown = len(previous) if messages[: len(previous)] == previous else 0
    for position in range(shown, len(context)):
        steps.append(_context(context[position], f"{path}.chat_completions.{position}"))
    if not context and raw.get("observation") not in (None, ""):
        observation = raw["observation"]
        text = observation if isinstance(observation, str) else json.dumps(observation)
        steps.append(ParsedStep(kind="observation", role="user", content=text, labelable=False))
    response = raw.get("model_response")
    if response is None and messages and _role(messages[-1]) == "assistant":
        response = messages[-1].get("content")
    if response is None:
        response = ""
    if not isinstance(response, str):
        raise FieldError(f"{path}.model_response", f"expected str, got {type(response).__name__}")
    thought = raw.get("thought")
    if isinstance(thought, str) and thought.strip() and thought not in response:
        steps.append(ParsedStep(kind="thought", role="assistant", content=thought, labelable=True))
    version = raw.get("weight_version")
    if version is not None:
        version = str(integer(version, f"{path}.weight_version"))
        if version not in versions:
            versions.append(version)
    logprobs = raw.get("logprobs") or []
    if not isinstance(logprobs, list):
        raise FieldError(f"{path}.logprobs", "expected a list of numbers")
    for position, value in enumerate(logprobs):
        number(value, f"{path}.logprobs.{position}")
    advantage = raw.get("advantage")
    step_metadata: dict[str, Any] = {}
    if isinstance(advantage, list):
        values = [number(v, f"{path}.advantage.{i}") for i, v in enumerate(advantage)]
        step_metadata["advantage_tokens"] = len(values)
        advantage = sum(values) / len(values) if values else None
    elif advantage is not None:
        advantage = number(advantage, f"{path}.advantage")
    if raw.get("reward") is not None:
        step_metadata["reward"] = number(raw["reward"], f"{path}.reward")
    if isinstance(raw.get("response_ids"), list):
        step_metadata["response_tokens"] = len(raw["response_ids"])
    action = raw.get("action")
    if action is not None and action != response:
        step_metadata["action"] = action
    done = raw.get("done") is True
    steps.append(
        ParsedStep(
            kind="answer" if done else "action" if action is not None else "message",
            role="assistant",
            content=response,
            labelable=True,
            metadata=step_metadata,
            training=StepTraining(
                policy_version=version,
                training_step=training_step,
                advantage=advantage,
                returns=optional_number(raw, "mc_return", path),
                **logprob_summary(logprobs, keep_tokens=keep_tokens),
            ),
        )
    )
    return messages


def _context(message: Any, path: str) -> ParsedStep:
    if not isinstance(message, dict):
        raise FieldError(path, f"expected a message object, got {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str):
        raise FieldError(f"{path}.role", "is missing")
    content = message.get("content")
    text = content if isinstance(content, str) else "" if content is None else json.dumps(content)
    # An earlier call's response was its step already; its message here is history.
    return ParsedStep(
        kind=MESSAGE_KINDS.get(role, "message"), role=role, content=text, labelable=False
    )


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _task(task: Any) -> tuple[str, str]:
    """The task text and ground truth of rLLM's task (a string, or a dict such as
    ``{"question", "ground_truth"}``)."""
    if isinstance(task, str):
        return task, ""
    if not isinstance(task, dict):
        return ("" if task is None else json.dumps(task)), ""
    text = next(
        (
            task[key]
            for key in ("question", "prompt", "problem", "instruction", "task")
            if isinstance(task.get(key), str)
        ),
        None,
    )
    truth = next(
        (task[key] for key in ("ground_truth", "answer") if key in task and task[key] is not None),
        "",
    )
    return (
        text if text is not None else json.dumps(task, sort_keys=True),
        truth if isinstance(truth, str) else json.dumps(truth),
    )


def _without_tokens(step: Any) -> Any:
    if not isinstance(step, dict):
        return step
    return {key: value for key, value in step.items() if key not in TOKEN_FIELDS}
