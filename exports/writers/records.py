"""Record builders for the per-trajectory formats (no Django): ``stepscope``,
``trl-stepwise``, ``prm800k``, ``processbench``, ``kto``, ``sft``, ``critique`` and
``spans``.

Each builder takes one task's trajectories (a :class:`TaskGroup`), the export options and
a tally that counts what it left out and why, and yields plain dicts in a fixed key
order. docs/formats.md ("Exports") shows a record of each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from exports.writers.inputs import ExportOptions, ExportStep, ExportTrajectory, TaskGroup
from exports.writers.labels import (
    first_error_position,
    label_to_bool,
    map_label,
    mapped_bool,
)
from exports.writers.text import chat_messages, prompt_text, step_text
from metrics.spans import Span, per_step_values
from trajectories.formats import stepscope
from trajectories.formats.base import ParsedLabel, ParsedStep, ParsedTrajectory

Record = dict[str, Any]


def to_parsed(trajectory: ExportTrajectory) -> ParsedTrajectory:
    """The trajectory in the importers' canonical shape, with every annotator's labels.

    Raises ValueError for data the Stepscope format cannot carry (steps out of order,
    labels on a step that is not labelable), since writing it would break the round trip.
    """
    name = f"trajectory {trajectory.external_id!r}"
    if not trajectory.steps:
        raise ValueError(f"{name} has no steps")
    for position, step in enumerate(trajectory.steps):
        if step.index != position:
            raise ValueError(f"{name}: step {position} has index {step.index}")
    per_step = trajectory.labels_by_annotator
    if per_step and len(per_step) != len(trajectory.steps):
        raise ValueError(
            f"{name} has labels for {len(per_step)} steps but {len(trajectory.steps)} steps"
        )
    labels: list[ParsedLabel] = []
    for position, step_labels in enumerate(per_step):
        if step_labels and not trajectory.steps[position].labelable:
            raise ValueError(f"{name}: step {position} is not labelable but has labels")
        labels.extend(
            ParsedLabel(step_index=position, value=value, annotator=annotator)
            for annotator, value in step_labels
        )
    return ParsedTrajectory(
        external_id=trajectory.external_id,
        task=trajectory.task,
        steps=[
            ParsedStep(
                kind=step.kind,
                role=step.role,
                content=step.content,
                labelable=step.labelable,
                agent=step.agent,
                tool_name=step.tool_name,
                tool_args=step.tool_args,
                metadata=step.metadata,
                training=step.training,
            )
            for step in trajectory.steps
        ],
        task_key=trajectory.task_key,
        ground_truth=trajectory.ground_truth,
        model_name=trajectory.model_name,
        outcome_reward=trajectory.outcome_reward,
        success=trajectory.success,
        first_error_index=trajectory.first_error_index,
        metadata=trajectory.metadata,
        labels=labels,
        decisive=trajectory.decisive,
        policy_version=trajectory.policy_version,
        training_step=trajectory.training_step,
    )


def decisive_record(
    trajectory: ExportTrajectory, positions: dict[int, int] | None = None
) -> Record | None:
    """The trajectory's decisive failure as written in a record: ``agent`` (``""`` when
    none is named), ``step`` (an index into the trajectory's steps, or null), with
    ``positions`` also ``position``, where that step falls among the record's own steps
    (null when it is not one of them), and ``reason``. None when there is none."""
    decisive = trajectory.decisive
    if decisive is None:
        return None
    record: Record = {"agent": decisive.agent, "step": decisive.step_index}
    if positions is not None:
        step = decisive.step_index
        record["position"] = None if step is None else positions.get(step)
    record["reason"] = decisive.reason
    return record


def rubric_fields(trajectory: ExportTrajectory, record: Record) -> None:
    """Add the trajectory's rubric results (``rubric``, per criterion), the first
    rubric's score as ``rubric_reward`` (null when it has none) and its episode verdicts
    (``episode``) to ``record``."""
    record["rubric"] = [dict(result) for result in trajectory.rubric]
    record["rubric_reward"] = trajectory.rubric[0]["score"] if trajectory.rubric else None
    record["episode"] = [dict(verdict) for verdict in trajectory.episode]


def stepscope_records(
    group: TaskGroup, options: ExportOptions, tally: Counter[str]
) -> Iterator[Record]:
    """Lossless: every step field and every annotator's label, written by the importer's
    own ``to_record``, so re-importing the file gives the same trajectories. The label
    source and the neutral mapping do not apply."""
    for trajectory in group.trajectories:
        yield stepscope.to_record(to_parsed(trajectory))


def trl_stepwise_records(
    group: TaskGroup, options: ExportOptions, tally: Counter[str]
) -> Iterator[Record]:
    """``{"prompt", "completions", "labels"}`` for TRL's PRM training.

    The completions are the trajectory's labelable steps in order, up to and including
    the first error when ``stop_at_first_error`` (all of them when there is none). They
    end before the first labelable step without a label (after the neutral mapping, so
    with ``drop`` a neutral step counts as unlabeled): leaving a middle step out would
    make later steps follow text that was never written, so the record is the longest
    fully labelled prefix. A trajectory whose first labelable step has no label gives no
    record.
    """
    for trajectory in group.trajectories:
        completions: list[str] = []
        labels: list[bool] = []
        written: list[ExportStep] = []
        for step in trajectory.steps:
            if not step.labelable:
                continue
            value = mapped_bool(step.label, options.neutral)
            if value is None:
                tally["cut_at_unlabelled_step"] += 1
                break
            completions.append(step_text(step))
            written.append(step)
            labels.append(value)
            if options.stop_at_first_error and not value:
                break
        if not completions:
            tally["skipped_no_labelled_step"] += 1
            continue
        record: Record = {"prompt": trajectory.task, "completions": completions, "labels": labels}
        if options.critiques:
            record["critiques"] = [step.critique for step in written]
        if options.decisive:
            positions = {step.index: position for position, step in enumerate(written)}
            record["decisive"] = decisive_record(trajectory, positions)
        if options.rubric:
            rubric_fields(trajectory, record)
        yield record


def prm800k_records(
    group: TaskGroup, options: ExportOptions, tally: Counter[str]
) -> Iterator[Record]:
    """One PRM800K line per trajectory: each labelable step is a step with a single
    completion (``chosen_completion`` 0) rated with its mapped label (null when it has
    none, as PRM800K leaves a completion unrated). ``finish_reason`` is ``found_error``
    when a step is rated -1, else ``solution``; with ``stop_at_first_error`` the steps
    end at that step.

    PRM800K has no record id: its importer names a trajectory ``labeler:timestamp``, so
    ``timestamp`` holds the trajectory's external id (an export has no labeling time,
    and a clock time would make the file differ on every run).
    """
    for trajectory in group.trajectories:
        steps: list[Record] = []
        positions: dict[int, int] = {}
        found_error = False
        for step in trajectory.steps:
            if not step.labelable:
                continue
            rating = map_label(step.label, options.neutral)
            positions[step.index] = len(steps)
            steps.append(
                {
                    "completions": [{"text": step_text(step), "rating": rating, "flagged": None}],
                    "human_completion": None,
                    "chosen_completion": 0,
                }
            )
            if rating == -1:
                found_error = True
                if options.stop_at_first_error:
                    break
        if not steps:
            tally["skipped_no_labelable_step"] += 1
            continue
        record: Record = {
            "labeler": options.labeler,
            "timestamp": trajectory.external_id,
            "generation": None,
            "is_quality_control_question": False,
            "is_initial_screening_question": False,
            "question": {
                "problem": trajectory.task,
                "ground_truth_answer": trajectory.ground_truth or None,
            },
            "label": {
                "steps": steps,
                "total_time": None,
                "finish_reason": "found_error" if found_error else "solution",
            },
        }
        if options.decisive:
            record["decisive"] = decisive_record(trajectory, positions)
        if options.rubric:
            rubric_fields(trajectory, record)
        yield record


def processbench_records(
    group: TaskGroup, options: ExportOptions, tally: Counter[str]
) -> Iterator[Record]:
    """ProcessBench items, keys in ProcessBench's order: ``id``, ``generator`` (the
    model; the importer needs it), ``problem``, ``steps`` (the labelable steps' texts),
    ``final_answer_correct`` and ``label``, the position among ``steps`` of the first
    step whose mapped label is -1, or -1 when there is none.

    ProcessBench says every step before the first error is correct, so a trajectory is
    written only when all those steps are labelled (all steps, without an error), and
    only when its outcome is known. ``keep`` counts a neutral step as not an error.
    """
    for trajectory in group.trajectories:
        labelable = [step for step in trajectory.steps if step.labelable]
        if not labelable:
            tally["skipped_no_labelable_step"] += 1
            continue
        values = [map_label(step.label, options.neutral) for step in labelable]
        first_error = values.index(-1) if -1 in values else -1
        judged = values if first_error == -1 else values[:first_error]
        if None in judged:
            tally["skipped_not_fully_labelled"] += 1
            continue
        if trajectory.success is None:
            tally["skipped_unknown_outcome"] += 1
            continue
        record: Record = {
            "id": trajectory.external_id,
            "generator": trajectory.model_name,
            "problem": trajectory.task,
            "steps": [step_text(step) for step in labelable],
            "final_answer_correct": trajectory.success,
            "label": first_error,
        }
        if options.decisive:
            positions = {step.index: position for position, step in enumerate(labelable)}
            record["decisive"] = decisive_record(trajectory, positions)
        yield record


def kto_records(group: TaskGroup, options: ExportOptions, tally: Counter[str]) -> Iterator[Record]:
    """One ``{"prompt", "completion", "label"}`` row per labelable step with a label: the
    prompt is the task and every earlier step (text.prompt_text), the completion the
    step's text, the label its mapped label as a boolean."""
    for trajectory in group.trajectories:
        for position, step in enumerate(trajectory.steps):
            if not step.labelable:
                continue
            value = map_label(step.label, options.neutral)
            if value is None:
                tally["unlabelled_steps"] += 1
                continue
            yield {
                "prompt": prompt_text(trajectory.task, trajectory.steps[:position]),
                "completion": step_text(step),
                "label": label_to_bool(value),
            }


def sft_records(group: TaskGroup, options: ExportOptions, tally: Counter[str]) -> Iterator[Record]:
    """``{"messages": [...]}`` (text.chat_messages).

    ``sft="success"``: every trajectory whose ``success`` is true, all its steps.
    ``sft="before_first_error"``: the steps before the first error, ending at the last
    labelable (the agent's own) step before it, since a prefix that ends on a tool
    result or a user turn teaches nothing; a trajectory with no step labelled wrong is
    written whole unless it failed.
    Either way a record needs at least one assistant message.
    """
    for trajectory in group.trajectories:
        steps = list(trajectory.steps)
        if options.sft == "success":
            if trajectory.success is not True:
                tally["skipped_not_successful"] += 1
                continue
        else:
            first_error = first_error_position(steps, options.neutral)
            if first_error is None:
                if trajectory.success is False:
                    tally["skipped_failed_without_labelled_error"] += 1
                    continue
            else:
                steps = steps[:first_error]
                while steps and not steps[-1].labelable:
                    steps.pop()
        messages = chat_messages(trajectory.task, steps)
        if not any(message["role"] == "assistant" for message in messages):
            tally["skipped_no_assistant_message"] += 1
            continue
        yield {"messages": messages}


def critique_records(
    group: TaskGroup, options: ExportOptions, tally: Counter[str]
) -> Iterator[Record]:
    """SFT rows for a generative verifier, one per labelable step the chosen judge
    (``options.critiques``) answered with a verdict it could read:

    - ``prompt``: the task and the steps up to and including the judged one
      (text.prompt_text, so a completion appended reads as the next paragraph);
    - ``completion``: the judge's reply as it wrote it, its critique then its verdict
      in the judge's own verdict syntax (``\\boxed{-1}`` by default);
    - ``verdict``: the judge's -1 / 0 / +1, ``label`` the step's mapped label from the
      label source (null when it has none) and ``agrees`` whether the two match.

    With ``critique_rows="agreeing"`` only rows whose verdict matches a label are
    written: critiques that reach the answer the labels give. Steps the judge did not
    answer, and replies it could not parse, give no row (counted in the manifest).
    """
    agreeing = options.critique_rows == "agreeing"
    for trajectory in group.trajectories:
        steps = trajectory.steps
        for position, step in enumerate(steps):
            if not step.labelable:
                continue
            if step.judgment is None or step.judge_verdict is None:
                tally["critique_steps_without_reply"] += 1
                continue
            label = map_label(step.label, options.neutral)
            agrees = None if label is None else step.judge_verdict == label
            if agreeing and not agrees:
                tally["critique_unlabelled" if label is None else "critique_disagreeing"] += 1
                continue
            yield {
                "id": trajectory.external_id,
                "step_index": step.index,
                "prompt": prompt_text(trajectory.task, steps[: position + 1]),
                "completion": step.judgment.strip(),
                "verdict": step.judge_verdict,
                "label": label,
                "agrees": agrees,
            }


def span_records(group: TaskGroup, options: ExportOptions, tally: Counter[str]) -> Iterator[Record]:
    """A trajectory's span labels, once as segment records (schema, start and end step
    index, both included, value, annotator) and once as per-step values: per schema and
    annotator, a list per step of the values whose spans cover it (empty where none
    does; several where spans overlap). A trajectory without spans is left out."""
    for trajectory in group.trajectories:
        if not trajectory.spans:
            tally["trajectories without spans"] += 1
            continue
        count = len(trajectory.steps)
        segments = [
            {
                "schema": span.schema,
                "start": span.start,
                "end": span.end,
                "value": span.value,
                "annotator": span.annotator,
            }
            for span in trajectory.spans
        ]
        grouped: dict[str, dict[str, list[Span]]] = {}
        for span in trajectory.spans:
            grouped.setdefault(span.schema, {}).setdefault(span.annotator, []).append(
                Span(trajectory.id, span.start, span.end, span.value)
            )
        yield {
            "id": trajectory.external_id,
            "task_key": trajectory.task_key,
            "step_count": count,
            "segments": segments,
            "step_values": {
                schema: {name: per_step_values(spans, count) for name, spans in sorted(by.items())}
                for schema, by in sorted(grouped.items())
            },
        }
