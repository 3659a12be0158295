"""Step labels (idempotent upsert) and their undo from history, the verdict's first error
they keep, and final (adjudicated) labels. Submitting a trajectory is ``submit.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from django.contrib.auth.models import AbstractBaseUser, User
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from labeling.models import (
    FinalLabel,
    LabelSchema,
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
    verdicts_refresh([(state, schema, found_error)])


def verdicts_refresh(refreshes: list[tuple[LabelingState, LabelSchema, bool]]) -> None:
    """:func:`verdict_refresh` of many (state, schema, found error) in one statement,
    :func:`verdicts_refresh_statement`."""
    statement = verdicts_refresh_statement(refreshes)
    if statement is not None:
        with connection.cursor() as cursor:
            cursor.execute(*statement)


def verdicts_refresh_statement(
    refreshes: list[tuple[LabelingState, LabelSchema, bool]],
) -> tuple[str, list[Any]] | None:
    """The statement of :func:`verdicts_refresh` (None for no refreshes), for a caller
    that sends it with others. It ends as the calls one after the other would: a
    verdict takes its first-error index from its trajectory's last schema in
    ``refreshes`` that has an error value (a schema without one, e.g. a severity, leaves
    the index as it was) and the finish reason ``found_error`` if any of its refreshes
    found one. The verdict rows are locked in
    trajectory order."""
    if not refreshes:
        return None
    last: dict[tuple[int, int], list[Any]] = {}
    for state, schema, found_error in refreshes:
        key = (state.trajectory.pk, state.user_id)
        before = last.pop(key, None)
        found = found_error or bool(before and before[4])
        schema_id, error_value = schema.pk, schema.error_value
        if error_value is None and before is not None:
            schema_id, error_value = before[2], before[3]
        last[key] = [state.trajectory.pk, state.user_id, schema_id, error_value, found]
    now = timezone.now()
    return (
        "INSERT INTO labeling_trajectorylabel AS tl (trajectory_id, annotator_id,"
        " first_error_index, finish_reason, status, flagged, outcome, comment, created_at,"
        " updated_at) SELECT k.trajectory_id, k.annotator_id, CASE WHEN k.error_value"
        " IS NULL THEN (SELECT v.first_error_index FROM labeling_trajectorylabel v"
        " WHERE v.trajectory_id = k.trajectory_id AND v.annotator_id = k.annotator_id)"
        " ELSE (SELECT min(s.index)"
        " FROM labeling_steplabel l JOIN trajectories_step s ON s.id = l.step_id"
        " WHERE s.trajectory_id = k.trajectory_id AND l.annotator_id = k.annotator_id"
        " AND l.schema_id = k.schema_id AND l.value = k.error_value) END,"
        " CASE WHEN k.found_error THEN 'found_error' ELSE '' END, 'draft', false, '', '',"
        " %s, %s FROM (SELECT (r->>0)::bigint AS trajectory_id, (r->>1)::int AS annotator_id,"
        " (r->>2)::bigint AS schema_id, (r->>3)::int AS error_value,"
        " (r->>4)::bool AS found_error FROM json_array_elements(%s::json) AS r) k"
        " ORDER BY k.trajectory_id, k.annotator_id"
        " ON CONFLICT (trajectory_id, annotator_id) DO UPDATE SET"
        " first_error_index = EXCLUDED.first_error_index,"
        " finish_reason = CASE WHEN EXCLUDED.finish_reason = 'found_error'"
        " THEN 'found_error' ELSE tl.finish_reason END,"
        " updated_at = EXCLUDED.updated_at",
        [now, now, orjson.dumps(list(last.values())).decode()],
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
