"""Step labels (idempotent upsert) and their undo from history, trajectory verdicts and
final (adjudicated) labels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone
from psycopg.types.json import Jsonb

from labeling.models import (
    FinalLabel,
    LabelSchema,
    Queue,
    QueueAssignment,
    StepLabel,
    StepLabelEvent,
    TrajectoryLabel,
)
from labeling.selectors import LabelingState
from labeling.services.common import (
    MAX_CORRECTION_CHARS,
    MAX_RATIONALE_CHARS,
    MAX_TIME_SPENT_MS,
    LabelingError,
    check_schema,
    history_context,
    require_can_label,
)
from stepscope.events import event_emit
from trajectories.models import Step


@dataclass(frozen=True)
class StepLabelResult:
    label_id: int
    created: bool


@dataclass(frozen=True)
class CheckedLabel:
    """One label's fields as :func:`step_label_checked` passed them: the schema it is
    of, the value (the error value for a first error; None keeps the stored one), the
    tags in the schema's order and the time spent within bounds."""

    step: Step
    schema: LabelSchema
    value: int | None
    first_error: bool
    tags: list[str] | None
    rationale: str | None
    correction: str | None
    time_spent_ms: int | None


def step_label_checked(
    *,
    state: LabelingState,
    step: Step,
    schema_id: int | None = None,
    value: int | None = None,
    first_error: bool = False,
    tags: list[str] | None = None,
    rationale: str | None = None,
    correction: str | None = None,
    time_spent_ms: int | None = None,
) -> CheckedLabel:
    """The checks of a label that need no write (the caller has run
    ``require_can_label``): the step is this trajectory's and asked by the schema, the
    value one of the schema's, the tags its tags, the texts within their lengths.
    Raises LabelingError naming the field."""
    schema = check_schema(state, schema_id)
    if step.trajectory_id != state.trajectory.pk:
        raise LabelingError("That step belongs to another trajectory.", field="step")
    if not step.labelable:
        raise LabelingError(f"Step {step.index} is not labelable.", field="step")
    if not schema.applies(step.kind, step.role, step.agent):
        raise LabelingError(
            f"The schema {schema.name!r} does not ask about step {step.index} (a {step.kind}"
            f" step{f' of {step.agent}' if step.agent else ''}); it applies to"
            f" {schema.applies_to}.",
            field="schema",
        )
    if first_error:
        if schema.error_value is None:
            # Say which setting allows it: an ordinal or categorical schema has no error
            # value until one of its values is marked as such.
            raise LabelingError(
                f"The schema {schema} has no error value to mark as the first error. A project"
                " admin allows it on the label schema page: tick \u201cError value\u201d on"
                ' the value that marks a wrong step ("error": true in the schema\'s values).',
                field="first_error",
            )
        value = schema.error_value
    if value is not None and value not in schema.allowed_values:
        names = ", ".join(f"{e['value']} ({e['name']})" for e in schema.entries)
        raise LabelingError(
            f"{value} is not a value of {schema}; use one of {names}.", field="value"
        )
    if tags is not None:
        unknown = sorted(set(tags) - set(schema.error_tags or []))
        if unknown:
            raise LabelingError(f"Unknown tag: {', '.join(unknown)}.", field="tags")
        tags = [t for t in schema.error_tags if t in set(tags)]  # schema order, no repeats
    if rationale is not None and len(rationale) > MAX_RATIONALE_CHARS:
        raise LabelingError(
            f"A rationale is at most {MAX_RATIONALE_CHARS} characters.", field="rationale"
        )
    if correction is not None and len(correction) > MAX_CORRECTION_CHARS:
        raise LabelingError(
            f"A correction is at most {MAX_CORRECTION_CHARS} characters.", field="correction"
        )
    if time_spent_ms is not None:
        time_spent_ms = max(0, min(int(time_spent_ms), MAX_TIME_SPENT_MS))
    return CheckedLabel(
        step=step,
        schema=schema,
        value=value,
        first_error=first_error,
        tags=tags,
        rationale=rationale,
        correction=correction,
        time_spent_ms=time_spent_ms,
    )


def step_label_set(
    *,
    state: LabelingState,
    step: Step,
    schema_id: int | None = None,
    value: int | None = None,
    first_error: bool = False,
    tags: list[str] | None = None,
    rationale: str | None = None,
    correction: str | None = None,
    time_spent_ms: int | None = None,
) -> StepLabelResult:
    """Set this user's label on ``step``: an upsert on (step, annotator, schema), so a
    double post leaves one label and two annotators never touch each other's rows.

    ``value`` ``None`` keeps the current value (an edit of tags, rationale or correction
    only; the step must be labelled already). ``first_error`` labels the step with the
    schema's error value and records it as where the annotator found the error. Fields
    left ``None`` keep what is stored.
    """
    require_can_label(state)
    checked = step_label_checked(
        state=state,
        step=step,
        schema_id=schema_id,
        value=value,
        first_error=first_error,
        tags=tags,
        rationale=rationale,
        correction=correction,
        time_spent_ms=time_spent_ms,
    )
    schema, value, tags, time_spent_ms = (
        checked.schema,
        checked.value,
        checked.tags,
        checked.time_spent_ms,
    )
    annotator_id = state.user_id
    status = StepLabel.Status.SUBMITTED if state.submitted else StepLabel.Status.DRAFT
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        if value is None:
            sets, params = _label_assignments(tags, rationale, correction, time_spent_ms)
            if not sets:
                raise LabelingError(
                    "Nothing to change: give a value, tags, a rationale or a correction.",
                    field="value",
                )
            cursor.execute(
                f"UPDATE labeling_steplabel AS l SET {', '.join(sets)}, updated_at = %s"
                " WHERE step_id = %s AND annotator_id = %s AND schema_id = %s"
                " RETURNING id, value",
                [*params, now, step.pk, annotator_id, schema.pk],
            )
            row = cursor.fetchone()
            if row is None:
                raise LabelingError(
                    f"Label step {step.index} first, then add to the label.", field="value"
                )
            label_id, current_value = row
            created = False
        else:
            sets, params = _label_assignments(tags, rationale, correction, time_spent_ms)
            sets.append("value = EXCLUDED.value")
            row_values: list[Any] = [
                step.pk,
                annotator_id,
                schema.pk,
                value,
                Jsonb(tags or []),
                rationale or "",
                correction or "",
                status,
                state.show_model_scores,
                time_spent_ms,
                now,
                now,
            ]
            # ON CONFLICT makes a retried or doubled post an update of the one row; xmax is
            # 0 only on a row this statement inserted.
            cursor.execute(
                "INSERT INTO labeling_steplabel AS l (step_id, annotator_id, schema_id, value,"
                " tags, rationale, correction, status, saw_model_scores, time_spent_ms,"
                " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (step_id, annotator_id, schema_id) DO UPDATE SET"
                f" {', '.join(sets)}, updated_at = EXCLUDED.updated_at,"
                " saw_model_scores = l.saw_model_scores OR EXCLUDED.saw_model_scores"
                " RETURNING id, (xmax = 0)",
                [*row_values, *params],
            )
            inserted = cursor.fetchone()
            assert inserted is not None
            label_id, created = inserted
            current_value = value
        if correction and current_value != schema.error_value:
            raise LabelingError(
                "A correction goes with a step labelled as an error.", field="correction"
            )
        verdict_refresh(state, schema, found_error=first_error)
    return StepLabelResult(label_id=label_id, created=bool(created))


def _label_assignments(
    tags: list[str] | None,
    rationale: str | None,
    correction: str | None,
    time_spent_ms: int | None,
) -> tuple[list[str], list[Any]]:
    """SET clauses for the fields given; the upsert reads them from EXCLUDED, the plain
    update from parameters (hence both forms)."""
    sets: list[str] = []
    params: list[Any] = []
    for column, given in (("tags", tags), ("rationale", rationale), ("correction", correction)):
        if given is not None:
            sets.append(f"{column} = %s")
            params.append(Jsonb(given) if column == "tags" else given)
    if time_spent_ms is not None:
        sets.append("time_spent_ms = COALESCE(l.time_spent_ms, 0) + %s")
        params.append(time_spent_ms)
    return sets, params


def verdict_refresh(state: LabelingState, schema: LabelSchema, *, found_error: bool) -> None:
    """Create this annotator's draft verdict if needed and keep its first-error index
    equal to the earliest step they labelled with the error value. Locks the verdict row,
    which serializes this annotator's writes on this trajectory (labels and undo)."""
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO labeling_trajectorylabel AS tl (trajectory_id, annotator_id,"
            " first_error_index, finish_reason, status, flagged, outcome, comment, created_at,"
            " updated_at) VALUES (%s, %s, (SELECT min(s.index) FROM labeling_steplabel l"
            " JOIN trajectories_step s ON s.id = l.step_id WHERE s.trajectory_id = %s"
            " AND l.annotator_id = %s AND l.schema_id = %s AND l.value = %s),"
            " CASE WHEN %s THEN 'found_error' ELSE '' END, 'draft', false, '', '', %s, %s)"
            " ON CONFLICT (trajectory_id, annotator_id) DO UPDATE SET"
            " first_error_index = EXCLUDED.first_error_index,"
            " finish_reason = CASE WHEN %s THEN 'found_error' ELSE tl.finish_reason END,"
            " updated_at = EXCLUDED.updated_at",
            [
                state.trajectory.pk,
                state.user_id,
                state.trajectory.pk,
                state.user_id,
                schema.pk,
                schema.error_value,
                found_error,
                now,
                now,
                found_error,
            ],
        )


def step_label_undo(*, state: LabelingState) -> int:
    """Undo this user's latest label change on the trajectory and return the step it was
    on. The value before it is read back from the history table: an undo of a new label
    removes it, an undo of a change restores the value, tags, rationale and correction
    before it. Undo events are marked (``undo_of``) so that repeated undos walk further
    back instead of undoing the undo."""
    require_can_label(state)
    schema = state.schema
    assert schema is not None
    with transaction.atomic():
        # Serialize with this annotator's other writes on the trajectory.
        TrajectoryLabel.objects.select_for_update().filter(
            trajectory_id=state.trajectory.pk, annotator_id=state.user_id
        ).first()
        events = list(
            StepLabelEvent.objects.filter(
                annotator_id=state.user_id,
                schema_id=schema.pk,
                step__trajectory_id=state.trajectory.pk,
            )
            .order_by("pgh_id")
            .values(
                "pgh_id",
                "pgh_label",
                "pgh_context",
                "step_id",
                "value",
                "tags",
                "rationale",
                "correction",
            )
        )
        undone = {(e["pgh_context"] or {}).get("undo_of") for e in events}
        candidates = [
            e
            for e in events
            if not (e["pgh_context"] or {}).get("undo_of")
            and (e["pgh_context"] or {}).get("action") != "submit"
            and e["pgh_id"] not in undone
        ]
        if not candidates:
            raise LabelingError("Nothing to undo on this trajectory.", status=409)
        target = candidates[-1]
        before = [
            e
            for e in events
            if e["step_id"] == target["step_id"] and e["pgh_id"] < target["pgh_id"]
        ]
        previous = before[-1] if before and before[-1]["pgh_label"] != "delete" else None
        with history_context(undo_of=target["pgh_id"]):
            key = {
                "step_id": target["step_id"],
                "annotator_id": state.user_id,
                "schema_id": schema.pk,
            }
            if previous is None:
                StepLabel.objects.filter(**key).delete()
            else:
                StepLabel.objects.update_or_create(
                    **key,
                    defaults={
                        "value": previous["value"],
                        "tags": previous["tags"],
                        "rationale": previous["rationale"],
                        "correction": previous["correction"],
                    },
                    create_defaults={
                        "value": previous["value"],
                        "tags": previous["tags"],
                        "rationale": previous["rationale"],
                        "correction": previous["correction"],
                        "status": StepLabel.Status.SUBMITTED
                        if state.submitted
                        else StepLabel.Status.DRAFT,
                    },
                )
            verdict_refresh(state, schema, found_error=False)
    return int(target["step_id"])


# --- Trajectory verdicts ------------------------------------------------------------------


def trajectory_submit(
    *,
    state: LabelingState,
    outcome: str = "",
    finish_reason: str = "",
    comment: str = "",
    flagged: bool = False,
) -> TrajectoryLabel:
    """Finish this user's work on the trajectory: the verdict, their step labels and their
    queue lease become submitted (which also lifts blind mode for them). Every step they
    were asked to label must carry a label unless they give up or flag a bad problem."""
    require_can_label(state)
    if outcome and outcome not in TrajectoryLabel.Outcome.values:
        raise LabelingError(f"Unknown outcome {outcome!r}.", field="outcome")
    if finish_reason and finish_reason not in TrajectoryLabel.FinishReason.values:
        raise LabelingError(f"Unknown finish reason {finish_reason!r}.", field="finish_reason")
    if flagged and not finish_reason:
        finish_reason = TrajectoryLabel.FinishReason.BAD_PROBLEM
    if not finish_reason:
        finish_reason = (
            TrajectoryLabel.FinishReason.FOUND_ERROR
            if state.first_error_index is not None
            else TrajectoryLabel.FinishReason.SOLUTION
        )
    gives_up = finish_reason in (
        TrajectoryLabel.FinishReason.GIVE_UP,
        TrajectoryLabel.FinishReason.BAD_PROBLEM,
    )
    if not gives_up and not state.complete:
        missing = state.to_label - state.done
        raise LabelingError(
            f"{missing} step{'s' if missing != 1 else ''} still need{'s' if missing == 1 else ''}"
            " a label. Label them, or finish with \u201cgive up\u201d or \u201cbad problem\u201d."
        )
    if (
        finish_reason == TrajectoryLabel.FinishReason.FOUND_ERROR
        and state.first_error_index is None
    ):
        raise LabelingError(
            "Mark the first error (f) before finishing with \u201cfound error\u201d."
        )
    now = timezone.now()
    with transaction.atomic(), history_context(action="submit"):
        verdict, _ = TrajectoryLabel.objects.update_or_create(
            trajectory_id=state.trajectory.pk,
            annotator_id=state.user_id,
            defaults={
                "outcome": outcome,
                "finish_reason": finish_reason,
                "comment": comment[:MAX_RATIONALE_CHARS],
                "flagged": flagged,
                "status": TrajectoryLabel.Status.SUBMITTED,
                "submitted_at": now,
            },
        )
        StepLabel.objects.filter(
            annotator_id=state.user_id,
            step__trajectory_id=state.trajectory.pk,
            status=StepLabel.Status.DRAFT,
        ).update(status=StepLabel.Status.SUBMITTED, updated_at=now)
        leased = QueueAssignment.objects.filter(
            annotator_id=state.user_id,
            item__trajectory_id=state.trajectory.pk,
            status=QueueAssignment.Status.LEASED,
        )
        queue_ids = sorted(set(leased.values_list("item__queue_id", flat=True)))
        leased.update(status=QueueAssignment.Status.SUBMITTED, submitted_at=now)
        _submitted_announce(state, verdict, queue_ids)
    return verdict


def _submitted_announce(
    state: LabelingState, verdict: TrajectoryLabel, queue_ids: list[int]
) -> None:
    """The submission's event, and the event of each queue it finished (every item has
    as many submitted labellings as the queue's overlap), in the submission's commit."""
    project_id = state.trajectory.project_id
    event_emit(
        project_id=project_id,
        kind="trajectory.submitted",
        data={
            "trajectory": state.trajectory.pk,
            "annotator": state.user_id,
            "finish_reason": verdict.finish_reason,
            "outcome": verdict.outcome,
        },
    )
    for queue in Queue.objects.filter(pk__in=queue_ids):
        submitted = Count(
            "assignments", filter=Q(assignments__status=QueueAssignment.Status.SUBMITTED)
        )
        short = queue.items.annotate(n=submitted).filter(n__lt=queue.overlap)
        if not short.exists():
            event_emit(
                project_id=project_id,
                kind="queue.finished",
                data={"queue": queue.pk, "name": queue.name, "items": queue.items.count()},
            )


# --- Final (adjudicated) labels -----------------------------------------------------------


def final_label_set(
    *,
    step: Step,
    schema: LabelSchema,
    adjudicator: User | AbstractBaseUser,
    value: int | None,
    rationale: str = "",
) -> FinalLabel | None:
    """Set (or with ``value`` ``None`` clear) the adjudicated label of ``step``: one per
    step and schema name, so one set under a newer version of the schema replaces the
    one set under an older (its history stays)."""
    if not step.labelable:
        raise LabelingError(f"Step {step.index} is not labelable.")
    if schema.project_id != step.trajectory.project_id:
        raise LabelingError("That label schema does not belong to this project.")
    if value is not None and value not in schema.allowed_values:
        raise LabelingError(f"{value} is not a value of {schema}.")
    with transaction.atomic(), history_context(action="adjudicate", user=adjudicator.pk):
        FinalLabel.objects.filter(
            step=step, schema__project_id=schema.project_id, schema__name=schema.name
        ).exclude(schema=schema).delete()
        if value is None:
            FinalLabel.objects.filter(step=step, schema=schema).delete()
            return None
        final, _ = FinalLabel.objects.update_or_create(
            step=step,
            schema=schema,
            defaults={"value": value, "adjudicator": adjudicator, "rationale": rationale},
        )
    return final
