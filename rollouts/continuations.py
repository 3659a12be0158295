"""Continuations as Stepscope records, and the ``rollout`` import format that reads them
back with their branch link (no Django).

A continuation repeats its parent's steps up to the branch verbatim (same kind, role,
agent, content, tool fields and metadata), so the importer computes the same prefix
hashes for them; then come the policy's steps. ``metadata.rollout`` says where it came
from (job, policy, parent, branch) and how generation ended. The ``rollout`` format is
Stepscope JSONL whose ``metadata.rollout`` also fills ``parent_external_id`` and
``branch_index``, so the importer links each continuation to its parent.
"""

# Django-free: continuations as plain records.
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajectories.formats import register
from trajectories.formats import stepscope as stepscope_format
from trajectories.formats.base import ParsedTrajectory, ParseResult

FORMAT = "rollout"


@dataclass(frozen=True)
class StoredStep:
    """A parent step as stored, every field the prefix hash or the content hash reads."""

    kind: str
    role: str
    content: str
    labelable: bool
    agent: str = ""
    tool_name: str = ""
    tool_args: Any = None
    metadata: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "role": self.role,
            "content": self.content,
            "labelable": self.labelable,
            "agent": self.agent,
            "tool_name": self.tool_name,
            "tool_args": self.tool_args,
            "metadata": self.metadata or {},
            "labels": [],
        }


@dataclass(frozen=True)
class Parent:
    pk: int
    external_id: str
    task: str
    task_key: str
    ground_truth: str
    steps: tuple[StoredStep, ...]

    @property
    def name(self) -> str:
        return self.external_id or f"trajectory-{self.pk}"


def branch_index(from_step: int, *, replaced: bool) -> int:
    """The first step a continuation owns (the importer's ``branch_index``): the step
    after ``from_step``, or ``from_step`` itself when that step was replaced."""
    return from_step if replaced else from_step + 1


def continuation_record(
    *,
    parent: Parent,
    from_step: int,
    generated: tuple[str, ...],
    finished: bool,
    success: bool,
    model: str,
    rollout: dict[str, Any],
    replacement: str | None = None,
) -> dict[str, Any]:
    """The Stepscope record of one continuation of ``parent`` after step ``from_step``
    (or, with ``replacement``, after step ``from_step`` replaced by that text)."""
    replaced = replacement is not None
    start = branch_index(from_step, replaced=replaced)
    steps = [step.record() for step in parent.steps[:start]]
    if replacement is not None:
        original = parent.steps[from_step]
        steps.append(
            {
                "kind": original.kind,
                "role": original.role,
                "content": replacement,
                "labelable": original.labelable,
                "agent": original.agent,
                "metadata": {"replaced": True},
                "labels": [],
            }
        )
    for number, text in enumerate(generated, start=1):
        # The last step of a finished continuation holds its answer.
        last = number == len(generated) and finished
        steps.append(
            {
                "kind": "answer" if last else "thought",
                "role": "assistant",
                "content": text,
                "labelable": True,
                "metadata": {"generated": True},
                "labels": [],
            }
        )
    sample = rollout.get("sample", 0)
    job = rollout.get("job", 0)
    tag = f"r{from_step}" if replaced else f"{from_step}"
    return {
        "id": f"{parent.name}~job{job}.{tag}.{sample}",
        "task": parent.task,
        "task_key": parent.task_key,
        "ground_truth": parent.ground_truth,
        "model": model,
        "outcome": {"reward": 1.0 if success else 0.0, "success": success},
        "first_error_index": None,
        "metadata": {
            "rollout": {
                **rollout,
                "parent": parent.external_id,
                "parent_id": parent.pk,
                "from_step": from_step,
                "branch_index": start,
                "replaced_step": from_step if replaced else None,
            }
        },
        "steps": steps,
    }


@register(FORMAT)
def parse(path: Path) -> Iterator[ParseResult]:
    """Stepscope JSONL, with each record's branch link read from ``metadata.rollout``."""
    for result in stepscope_format.parse(path):
        if isinstance(result, ParsedTrajectory):
            info = result.metadata.get("rollout")
            if isinstance(info, dict):
                result.parent_external_id = str(info.get("parent") or "")
                start = info.get("branch_index")
                result.branch_index = start if isinstance(start, int) else None
        yield result
