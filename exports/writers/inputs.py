"""What an export reads: plain snapshots of trajectories and their steps, and the
options that shape the records.

The Django side fills these from PostgreSQL in streamed chunks (tests and notebooks
build them by hand). A step carries its *resolved* label, the one the chosen label
source gives (``human:majority``, ``model:<scorer>`` thresholded, ``mc``, ...), still
unmapped: the builders apply the neutral mapping from :class:`ExportOptions`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from exports.writers.labels import Neutral, parse_neutral
from trajectories.formats.base import ParsedDecisive, StepTraining

PairValue = Literal["label", "score", "credit"]
SftMode = Literal["success", "before_first_error"]
CritiqueRows = Literal["all", "agreeing"]
StepReward = Literal["label", "score"]
PromptsPer = Literal["task", "trajectory"]


# Not frozen: an export builds one per step (a million for a large one), a frozen
# dataclass sets each field through object.__setattr__ (twice as slow to build), and
# nothing changes a step after it is read.
@dataclass(slots=True, kw_only=True)
class ExportStep:
    index: int
    kind: str
    role: str
    content: str
    labelable: bool
    # Hash of steps 0..index (trajectories/hashing.py): rollouts sharing a prefix share it.
    prefix_hash: str
    agent: str = ""
    tool_name: str = ""
    tool_args: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # The resolved label from the chosen label source: -1, 0, +1, or None.
    label: int | None = None
    # The chosen scorer's probability that the step is correct (0..1).
    score: float | None = None
    # The chosen attribution run's credit or advantage for the step.
    credit: float | None = None
    # An annotator's corrected text for the step, when one exists.
    correction: str | None = None
    # The chosen LLM judge's newest parsed reply on the step (``ExportOptions.critiques``):
    # its critique (the reply before the verdict), the whole reply as the judge wrote it,
    # and its verdict (+1, 0, -1). Untrusted model text, written as it is.
    critique: str | None = None
    judgment: str | None = None
    judge_verdict: int | None = None
    # What an RL trainer knew about the step (policy version, logprobs, advantage, ...).
    training: StepTraining | None = None


@dataclass(frozen=True, slots=True)
class ExportSpan:
    """One annotator's span label: ``value`` on steps ``start`` to ``end`` (indices into
    the trajectory's steps, both included) under the span schema ``schema``."""

    schema: str
    start: int
    end: int
    value: str
    annotator: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportTrajectory:
    id: int
    external_id: str
    task: str
    steps: Sequence[ExportStep]
    task_key: str = ""
    ground_truth: str = ""
    model_name: str = ""
    outcome_reward: float | None = None
    success: bool | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    source_format: str = ""
    # Every annotator's label, per step in step order: ``[[(annotator, value), ...], ...]``.
    # Only the lossless ``stepscope`` format writes these; empty means no labels at all.
    labels_by_annotator: Sequence[Sequence[tuple[str, int]]] = ()
    # The trajectory-level verdict as stored; the other formats derive the first error
    # from the resolved step labels instead (labels.first_error_position).
    first_error_index: int | None = None
    # Which agent, at which step (an index into ``steps``), decided that the run failed,
    # from the export's decisive-failure source (a person's, an import's or a model's).
    decisive: ParsedDecisive | None = None
    # One annotator's rubric results (``options.rubric``): per rubric version
    # ``{"rubric", "version", "score", "criteria": [{"criterion", "mark", "evidence"}]}``,
    # evidence as indexes into the trajectory's steps; and their episode verdicts
    # ``{"agent", "outcome", "failure_mode", "critique"}`` (agent "" for the episode).
    rubric: Sequence[dict[str, Any]] = ()
    episode: Sequence[dict[str, Any]] = ()
    # An RL rollout's policy version and training step.
    policy_version: str | None = None
    training_step: int | None = None
    # Every annotator's span labels, by start (only for a format that reads ``spans``).
    spans: Sequence[ExportSpan] = ()

    @property
    def group_key(self) -> str:
        return task_group_key(self.task_key, self.task)


def task_group_key(task_key: str, task: str) -> str:
    """What groups rollouts of one task, for splits and sibling pairs: the task key, or
    for a trajectory imported without one, a hash of its task text (so unkeyed
    trajectories of different tasks never fall into one group)."""
    if task_key:
        return task_key
    return "task-" + hashlib.sha256(task.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """The trajectories of one task, as they arrive, with the split the task falls in.

    ``index`` counts the groups of ``split`` before this one, and ``trajectory_offset``
    the trajectories of ``split`` before this group; verl-style prompt records number
    themselves with them.
    """

    key: str
    split: str
    index: int
    trajectory_offset: int
    trajectories: Sequence[ExportTrajectory]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportOptions:
    """Choices that shape the records. ``neutral`` has no default on purpose."""

    neutral: Neutral
    # trl-stepwise and prm800k: end a trajectory's steps at its first error (inclusive).
    stop_at_first_error: bool = True
    # dpo: the value two sibling steps are compared on, and the least difference that
    # makes a pair. Labels are -1/0/+1 (a +1 against a -1 differs by 2); scores lie in
    # 0..1, so a score comparison wants a margin well under 1.
    pair_value: PairValue = "label"
    min_margin: float = 1.0
    corrections: bool = True
    # sft: whole successful trajectories, or each trajectory's steps before its first error.
    sft: SftMode = "success"
    # rl: the per-step reward column (the mapped label as a float, or the scorer's score).
    step_reward: StepReward = "label"
    # rl prompts (verl): data_source ("" means the trajectory's source format), ability,
    # and one prompt per task or per trajectory.
    data_source: str = ""
    ability: str = "general"
    prompts_per: PromptsPer = "task"
    # prm800k: the record's labeler field.
    labeler: str = "stepscope"
    # An LLM judge (its scorer name) whose critiques go beside each step's label:
    # trl-stepwise's ``critiques`` column, and the rows of the ``critique`` format.
    critiques: str = ""
    # critique: every parsed reply, or only those whose verdict agrees with the step's
    # mapped label (critiques that reach the right answer, as ThinkPRM trains on).
    critique_rows: CritiqueRows = "all"
    # A decisive-failure source (``human:<user>``, ``import:<source>``, ``model:<scorer>``)
    # whose "which agent, at which step" goes in each trajectory-level record's
    # ``decisive`` (trl-stepwise, prm800k, processbench). The lossless format always
    # writes one, from this source or else the label source's own.
    decisive: str = ""
    # A rubric source (``human:<user>``, ``human:majority``, ``judge:<scorer>``): whose
    # rubric results go in each trajectory-level record's ``rubric`` and ``rubric_reward``
    # (the first rubric's score), and an annotator's episode verdicts in ``episode``
    # (trl-stepwise and prm800k as JSON lines).
    rubric: str = ""

    def __post_init__(self) -> None:
        # The Django side passes the --neutral text as it came; a frozen dataclass needs
        # object.__setattr__ to store the parsed value.
        object.__setattr__(self, "neutral", parse_neutral(self.neutral))
        _check_choice("pair_value", self.pair_value, ("label", "score", "credit"))
        _check_choice("sft", self.sft, ("success", "before_first_error"))
        _check_choice("step_reward", self.step_reward, ("label", "score"))
        _check_choice("prompts_per", self.prompts_per, ("task", "trajectory"))
        if (
            isinstance(self.min_margin, bool)
            or not isinstance(self.min_margin, int | float)
            or not math.isfinite(self.min_margin)
            or self.min_margin < 0
        ):
            raise ValueError(f"min_margin is {self.min_margin!r}; expected a number >= 0")
        if not self.labeler.strip():
            raise ValueError("labeler is empty")
        _check_choice("critique_rows", self.critique_rows, ("all", "agreeing"))
        for name in ("critiques", "decisive", "rubric"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} is {getattr(self, name)!r}; expected a name (text)")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} is {value!r}; expected one of {', '.join(choices)}")
