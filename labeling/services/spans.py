"""Writes for span labels: a project's span schemas, and an annotator's value on a run of
consecutive steps (``labeling/spans.py`` says what they are). Labelling a span follows
the rules of labelling a step: reviewers label anything in their project, annotators
what a queue leased them; an annotator removes only their own spans."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction

from labeling.models import StepLabelEvent
from labeling.selectors import LabelingState
from labeling.services.common import (
    LabelingError,
    NotAllowed,
    history_context,
    require_can_label,
)
from labeling.spans import (
    TRIAGE_VALUES,
    FinalSpan,
    SpanLabel,
    SpanLabelEvent,
    SpanSchema,
    span_values_error,
)
from trajectories.models import Project, Trajectory


def span_schema_save(
    *,
    project: Project,
    name: str,
    values: list[dict[str, Any]] | None = None,
    is_active: bool = True,
) -> SpanSchema:
    """Create the project's span schema ``name``, or change its values (the TRIAGE roles
    when none are given). A value that spans already carry cannot be taken away, and no
    two active span schemas of a project share a key."""
    name = name.strip()
    if not name or len(name) > 100:
        raise LabelingError("A span schema needs a name of 1 to 100 characters.", field="name")
    values = [dict(v) for v in TRIAGE_VALUES] if values is None else values
    problem = span_values_error(values)
    if problem is not None:
        raise LabelingError(f"Span schema {name!r}: {problem}.", field="values")
    with transaction.atomic():
        schema = SpanSchema.objects.select_for_update().filter(project=project, name=name).first()
        if schema is not None:
            kept = {e["value"] for e in values}
            used = set(
                schema.labels.exclude(value__in=kept).values_list("value", flat=True).distinct()
            )
            if used:
                raise LabelingError(
                    f"Span schema {name!r}: spans carry {', '.join(sorted(used))!s}; keep"
                    " the value or remove those spans first.",
                    field="values",
                )
        if is_active:
            others = SpanSchema.objects.filter(project=project, is_active=True).exclude(name=name)
            taken = {e["key"].lower(): o.name for o in others for e in o.entries if e["key"]}
            for position, entry in enumerate(values):
                holder = taken.get(str(entry.get("key") or "").lower())
                if holder is not None:
                    raise LabelingError(
                        f"Span schema {name!r}: values.{position} ({entry['value']}): key"
                        f" {entry['key']!r} labels span schema {holder!r} already.",
                        field="values",
                    )
        if schema is None:
            return SpanSchema.objects.create(
                project=project, name=name, values=values, is_active=is_active
            )
        schema.values = values
        schema.is_active = is_active
        schema.save(update_fields=["values", "is_active"])
        return schema


def _span_schema(state: LabelingState, schema: int | str) -> SpanSchema:
    """The trajectory's project's active span schema, by id or by name."""
    found = SpanSchema.objects.filter(project_id=state.project.pk, is_active=True)
    found = found.filter(pk=schema) if isinstance(schema, int) else found.filter(name=schema)
    picked = found.first()
    lease = state.lease
    if (
        picked is not None
        and lease is not None
        and lease.span_schemas
        and picked.name not in lease.span_schemas
    ):
        raise LabelingError(
            f"Queue {lease.queue_name!r} asks for spans of"
            f" {', '.join(lease.span_schemas)}; not of {picked.name!r}.",
            field="schema",
        )
    if picked is None:
        names = ", ".join(
            SpanSchema.objects.filter(project_id=state.project.pk, is_active=True)
            .order_by("id")
            .values_list("name", flat=True)
        )
        raise LabelingError(
            f"Span schema {schema!r} is not an active span schema of this project"
            f" (active: {names or 'none'}).",
            field="schema",
        )
    return picked


def _check_span(
    what: str, trajectory: Trajectory, schema: SpanSchema, start: int, end: int, value: str
) -> None:
    """A span's range lies in the trajectory, starts before it ends, and its value is one
    of the schema's; else LabelingError naming the field (``what``: "Span", "Final span")."""
    count = trajectory.step_count
    for field, index in (("start", start), ("end", end)):
        if not 0 <= index < count:
            raise LabelingError(
                f"{what} {field} {index} is not a step of this trajectory (its steps are 0 to"
                f" {count - 1}).",
                field=field,
            )
    if start > end:
        raise LabelingError(f"{what} start {start} is after its end {end}.", field="end")
    if schema.entry_for(value) is None:
        allowed = ", ".join(repr(e["value"]) for e in schema.entries)
        raise LabelingError(
            f"{what} value {value!r} is not one of {schema.name!r}'s values ({allowed}).",
            field="value",
        )


def span_label_set(
    *, state: LabelingState, schema: int | str, start: int, end: int, value: str
) -> tuple[SpanLabel, bool]:
    """Give the steps ``start`` to ``end`` (both included) this user's ``value`` under the
    span schema ``schema`` (its id or name). The same range under the same schema again
    replaces the value. Returns the span and whether it is new. Errors name the field
    (``schema``, ``start``, ``end``, ``value``)."""
    require_can_label(state)
    picked = _span_schema(state, schema)
    _check_span("Span", state.trajectory, picked, start, end, value)
    with transaction.atomic(), history_context(action="span"):
        span, created = SpanLabel.objects.update_or_create(
            trajectory_id=state.trajectory.pk,
            schema=picked,
            annotator_id=state.user_id,
            start_index=start,
            end_index=end,
            defaults={"value": value},
        )
    return span, created


def span_label_delete(*, state: LabelingState, span_id: int) -> None:
    """Remove one of this user's spans on the trajectory (kept in the history). Another
    annotator's span, or one of another trajectory, is not found (404)."""
    require_can_label(state)
    with transaction.atomic(), history_context(action="span"):
        deleted, _ = SpanLabel.objects.filter(
            pk=span_id, trajectory_id=state.trajectory.pk, annotator_id=state.user_id
        ).delete()
    if not deleted:
        raise NotAllowed("No such span of yours on this trajectory.", status=404)


def final_span_set(
    *,
    trajectory: Trajectory,
    schema: SpanSchema,
    adjudicator: User | AbstractBaseUser,
    start: int,
    end: int,
    value: str,
) -> tuple[FinalSpan, bool]:
    """Set the adjudicated ``value`` of the steps ``start`` to ``end`` (both included) of
    ``trajectory`` under the span schema ``schema``: the same range again replaces the
    value, and the change is kept in the history. Returns the final span and whether it
    is new. Errors name the field."""
    if schema.project_id != trajectory.project_id:
        raise LabelingError("That span schema does not belong to this project.", field="schema")
    _check_span("Final span", trajectory, schema, start, end, value)
    with transaction.atomic(), history_context(action="adjudicate", user=adjudicator.pk):
        return FinalSpan.objects.update_or_create(
            trajectory=trajectory,
            schema=schema,
            start_index=start,
            end_index=end,
            defaults={"value": value, "adjudicator": adjudicator},
        )


def final_span_pick(
    *, trajectory: Trajectory, span_id: int, adjudicator: User | AbstractBaseUser
) -> tuple[FinalSpan, bool]:
    """Make an annotator's span ``span_id`` of ``trajectory`` final (its schema, range and
    value), as :func:`final_span_set` does; a span not on the trajectory is a 404."""
    span = SpanLabel.objects.filter(pk=span_id, trajectory=trajectory).select_related("schema")
    found = span.first()
    if found is None:
        raise LabelingError(
            f"pick: no span '{span_id}' on this trajectory.", field="pick", status=404
        )
    return final_span_set(
        trajectory=trajectory,
        schema=found.schema,
        adjudicator=adjudicator,
        start=found.start_index,
        end=found.end_index,
        value=found.value,
    )


def span_schema_of(project_id: int, schema: int | str) -> SpanSchema:
    """The project's span schema by id or by name (an adjudicator may set a final span
    of a schema no longer active); LabelingError naming ``schema`` if it has none."""
    found = SpanSchema.objects.filter(project_id=project_id)
    found = found.filter(pk=schema) if isinstance(schema, int) else found.filter(name=schema)
    picked = found.first()
    if picked is None:
        raise LabelingError(f"schema: {schema} is no span schema of this project.", field="schema")
    return picked


def final_span_delete(
    *, trajectory: Trajectory, final_id: int, adjudicator: User | AbstractBaseUser
) -> None:
    """Remove one adjudicated span of ``trajectory`` (kept in the history)."""
    with transaction.atomic(), history_context(action="adjudicate", user=adjudicator.pk):
        deleted, _ = FinalSpan.objects.filter(pk=final_id, trajectory=trajectory).delete()
    if not deleted:
        raise NotAllowed("No such final span on this trajectory.", status=404)


def _span_undo_target(state: LabelingState) -> dict[str, Any] | None:
    """This user's latest span change on the trajectory that no undo has taken back yet
    (undo events are marked ``undo_of`` and never themselves undone), or None."""
    events = list(
        SpanLabelEvent.objects.filter(trajectory_id=state.trajectory.pk, annotator_id=state.user_id)
        .order_by("pgh_id")
        .values(
            "pgh_id",
            "pgh_label",
            "pgh_context",
            "pgh_created_at",
            "schema_id",
            "start_index",
            "end_index",
            "value",
        )
    )
    undone = {(e["pgh_context"] or {}).get("undo_of") for e in events}
    candidates = [
        e
        for e in events
        if not (e["pgh_context"] or {}).get("undo_of") and e["pgh_id"] not in undone
    ]
    if not candidates:
        return None
    target = candidates[-1]
    # The value before an update: the latest earlier event of the same span, known by
    # its schema and range (a span removed and put back is a new row of the same span).
    key = ("schema_id", "start_index", "end_index")
    earlier = [
        e for e in events if all(e[k] == target[k] for k in key) and e["pgh_id"] < target["pgh_id"]
    ]
    target["previous_value"] = earlier[-1]["value"] if earlier else None
    return target


def span_undo_is_next(state: LabelingState) -> bool:
    """Whether ``u`` on the trajectory page should undo a span change: this user's latest
    span change not yet undone is newer than their latest such step label change
    (the step label undo's own rule, ``step_label_undo``, picks that one)."""
    target = _span_undo_target(state)
    if target is None:
        return False
    steps = (
        StepLabelEvent.objects.filter(
            annotator_id=state.user_id,
            step__trajectory_id=state.trajectory.pk,
            pgh_created_at__gt=target["pgh_created_at"],
        )
        .exclude(pgh_context__has_key="undo_of")
        .exists()
    )
    return not steps


def span_label_undo(*, state: LabelingState) -> tuple[int, int]:
    """Undo this user's latest span change on the trajectory: a new span is removed, a
    changed value restored, a removed span put back. Returns the range it was on. The
    undo is marked in the history (``undo_of``), so repeated undos walk further back."""
    require_can_label(state)
    with transaction.atomic():
        # Serialize with this annotator's other span writes on the trajectory.
        list(
            SpanLabel.objects.select_for_update().filter(
                trajectory_id=state.trajectory.pk, annotator_id=state.user_id
            )
        )
        target = _span_undo_target(state)
        if target is None:
            raise LabelingError("No span change to undo on this trajectory.", status=409)
        span = {
            "trajectory_id": state.trajectory.pk,
            "annotator_id": state.user_id,
            "schema_id": target["schema_id"],
            "start_index": target["start_index"],
            "end_index": target["end_index"],
        }
        with history_context(action="span", undo_of=target["pgh_id"]):
            if target["pgh_label"] == "insert":
                SpanLabel.objects.filter(**span).delete()
            elif target["pgh_label"] == "update":
                SpanLabel.objects.filter(**span).update(value=target["previous_value"])
            else:
                SpanLabel.objects.update_or_create(**span, defaults={"value": target["value"]})
    return int(target["start_index"]), int(target["end_index"])
