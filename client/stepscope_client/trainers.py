"""Rollouts of an RL training loop as Stepscope records, and a hook that pushes a batch
of them: for loops that hold their rollouts as a dict of columns (verl's decoded batch,
prime-rl's, your own). No dependency beyond the client's.

    from stepscope_client import Client
    from stepscope_client.trainers import rollout_batch_push

    stepscope = Client("http://127.0.0.1:8000", token)
    # in the loop, once the batch has rewards and advantages:
    rollout_batch_push(stepscope, "my-run", {
        "prompt": prompts, "completion": responses,        # text, one per rollout
        "reward": scores, "advantage": advantages,          # numbers
        "logprobs": token_logprobs,                         # optional, a list per rollout
        "uid": group_ids,                                   # optional: the GRPO group
    }, step=global_step, policy_version=str(weights_version))

Each rollout becomes a trajectory of two steps (the prompt, not labelable, and the
completion, carrying the training step, policy version, logprob summary, advantage and
return), its reward the outcome. Rollouts of one prompt (or one ``uid``) share a task
key, so Stepscope sees GRPO groups as task groups. Columns named ``reward/<name>`` are
kept per reward function (their sum is the outcome when there is no ``reward``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepscope_client.client import Client, PushResult

# The columns a batch may have beyond the reward functions' ``reward/<name>``.
COLUMNS = frozenset(
    {
        "prompt",
        "completion",
        "reward",
        "advantage",
        "return",
        "logprobs",
        "uid",
        "ground_truth",
        "success",
    }
)


def rollout_records(
    batch: Mapping[str, Sequence[Any]],
    *,
    step: int,
    policy_version: str | None = None,
    run: str = "",
    key_prefix: str = "rollout",
    keep_token_logprobs: bool = False,
) -> list[dict[str, Any]]:
    """The batch's rollouts as Stepscope records. ``batch`` maps column names to
    sequences of one length; ``prompt`` and ``completion`` are required. ``run`` prefixes
    the ids, so two runs pushing into one project never share one. ValueError names a
    column that is unknown, missing or of another length."""
    unknown = sorted(
        name for name in batch if name not in COLUMNS and not name.startswith("reward/")
    )
    if unknown:
        expected = ", ".join(sorted(COLUMNS))
        raise ValueError(
            f"unknown batch columns: {', '.join(unknown)}; expected {expected} or reward/<name>"
        )
    for name in ("prompt", "completion"):
        if name not in batch:
            raise ValueError(f"the batch has no {name!r} column")
    size = len(batch["prompt"])
    for name, column in batch.items():
        if len(column) != size:
            raise ValueError(f"batch column {name!r} has {len(column)} values, 'prompt' {size}")
    functions = sorted(name for name in batch if name.startswith("reward/"))
    records = []
    for index in range(size):
        prompt, prompt_replaced = storable_text(str(batch["prompt"][index]))
        completion, replaced = storable_text(str(batch["completion"][index]))
        rewards = {
            name.removeprefix("reward/"): value
            for name in functions
            if (value := _number(batch[name][index])) is not None
        }
        reward = _number(batch["reward"][index]) if "reward" in batch else None
        if reward is None and rewards:
            reward = sum(rewards.values())
        training: dict[str, Any] = {"training_step": step}
        if policy_version is not None:
            training["policy_version"] = policy_version
        if "advantage" in batch and (advantage := _number(batch["advantage"][index])) is not None:
            training["advantage"] = advantage
        if "return" in batch and (returns := _number(batch["return"][index])) is not None:
            training["returns"] = returns
        if "logprobs" in batch:
            training.update(_summary(batch["logprobs"][index], keep_token_logprobs))
        group = batch["uid"][index] if "uid" in batch else None
        success = batch["success"][index] if "success" in batch else None
        records.append(
            {
                "id": f"{run + ':' if run else ''}step-{step}:{index}",
                "task": prompt,
                "task_key": f"{key_prefix}:{group}"
                if group is not None
                else prompt_key(key_prefix, prompt),
                "ground_truth": str(batch["ground_truth"][index])
                if "ground_truth" in batch
                else "",
                "outcome": {
                    "reward": reward,
                    "success": success if isinstance(success, bool) else None,
                },
                "metadata": {"rewards": rewards} if rewards else {},
                "training": {
                    key: training[key]
                    for key in ("policy_version", "training_step")
                    if key in training
                },
                "steps": [
                    {
                        "kind": "message",
                        "role": "user",
                        "content": prompt,
                        "labelable": False,
                        "metadata": _replaced(prompt_replaced),
                    },
                    {
                        "kind": "answer",
                        "role": "assistant",
                        "content": completion,
                        "metadata": _replaced(replaced),
                        "training": training,
                    },
                ],
            }
        )
    return records


def rollout_batch_push(
    client: Client,
    project: str,
    batch: Mapping[str, Sequence[Any]],
    *,
    step: int,
    policy_version: str | None = None,
    run: str = "",
    key_prefix: str = "rollout",
    keep_token_logprobs: bool = False,
) -> PushResult:
    """Push the batch's rollouts (:func:`rollout_records`) into ``project``. Pushing a
    batch again changes nothing."""
    records = rollout_records(
        batch,
        step=step,
        policy_version=policy_version,
        run=run,
        key_prefix=key_prefix,
        keep_token_logprobs=keep_token_logprobs,
    )
    return client.push_trajectories(project, records)


def prompt_key(prefix: str, prompt: str) -> str:
    """The task key of a prompt's rollouts: ``<prefix>:<16 hex digits of its sha256>``,
    as Stepscope's importers of prompt tables make it."""
    return f"{prefix}:{hashlib.sha256(prompt.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def storable_text(text: str) -> tuple[str, int]:
    """``text`` with what PostgreSQL cannot store (NUL, lone surrogates: a young policy
    writes any bytes) replaced by U+FFFD, and how many characters were; the records mark
    the count in the step's ``metadata.replaced_characters``, so nothing changes unsaid."""
    replaced = 0
    if "\x00" in text:
        replaced += text.count("\x00")
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            kept = []
            for character in text:
                if "\ud800" <= character <= "\udfff":
                    kept.append("\ufffd")
                    replaced += 1
                else:
                    kept.append(character)
            text = "".join(kept)
    return text, replaced


def _replaced(count: int) -> dict[str, Any]:
    return {"replaced_characters": count} if count else {}


def _number(value: Any) -> float | None:
    """A finite float, or None for None and NaN (a reward function that did not score)."""
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    if math.isnan(number):
        return None
    if math.isinf(number):
        raise ValueError(f"{value!r} is not a finite number")
    return number


def _summary(logprobs: Any, keep: bool) -> dict[str, Any]:
    values = [float(value) for value in (logprobs or [])]
    if not values:
        return {}
    summary: dict[str, Any] = {
        "logprob_sum": sum(values),
        "logprob_mean": sum(values) / len(values),
        "logprob_min": min(values),
    }
    if keep:
        summary["token_logprobs"] = values
    return summary
