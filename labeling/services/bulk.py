"""Many step labels in one all-or-nothing write. Each item is checked by the checks of
:func:`~labeling.services.labels.step_label_set`, the service the labeling surface uses
(roles, leases, blind mode, schema values), each trajectory's access once; then the
labels are written set-based: one upsert per combination of fields given (usually one
statement for the whole batch, so the history and majority triggers fire once), one
update for edits that keep the value, and each annotator's verdict refreshed once per
trajectory and schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from labeling.models import LabelSchema, StepLabel, TrajectoryLabel
from labeling.selectors import (
    AnyUser,
    LabelingState,
    labeling_state_for_user,
    labeling_states_reread_rows,
    labeling_states_reread_statement,
)
from labeling.services.common import LabelingError, require_can_label, statements_run
from labeling.services.labels import (
    CheckedLabel,
    StepLabelResult,
    step_label_checked,
    verdicts_refresh,
    verdicts_refresh_statement,
)
from labeling.services.submit import (
    SubmitChecked,
    trajectories_submit_write,
    trajectory_submit_checked,
)
from trajectories.models import Step
from trajectories.selectors import projects_for_user

# The most labels one request may carry.
LABEL_BATCH_MAX = 10_000
# The fields of one item the label service takes, besides the step.
LABEL_FIELDS = ("value", "first_error", "tags", "rationale", "correction", "time_spent_ms")


class BulkLabelsRejected(Exception):
    """Nothing was written. ``errors`` maps an item's index (or ``submit`` and a
    trajectory id) to ``{field: message}``; ``status`` is the one HTTP status every
    problem shares, else 400."""

    def __init__(self, errors: dict[str, dict[str, Any]], status: int = 400) -> None:
        super().__init__(f"{len(errors)} label(s) refused")
        self.errors = errors
        self.status = status


@dataclass
class BulkLabelsResult:
    labels: list[StepLabelResult]
    submitted: list[TrajectoryLabel] = field(default_factory=list)


def step_labels_set(
    *,
    user: AnyUser,
    items: list[dict[str, Any]],
    queue_id: int | None = None,
    schema_id: int | None = None,
    submit: bool = False,
    verdict: dict[str, Any] | None = None,
) -> BulkLabelsResult:
    """Set ``user``'s labels on many steps, in one transaction: every item is checked
    and written, and if any is refused, nothing is kept and :class:`BulkLabelsRejected`
    names each refused item and field. An item names its step by ``step`` (id) or by
    ``trajectory`` (id) and ``index``; its other keys are :data:`LABEL_FIELDS` and
    ``schema`` (else ``schema_id``). With ``submit`` each trajectory the items touch is
    then submitted (with ``verdict``'s outcome, finish reason, comment, flag), as the
    page's finish button does."""
    steps = _steps_for(user, items)
    errors: dict[str, dict[str, Any]] = {}
    statuses: set[int] = set()
    states: dict[int, LabelingState | LabelingError] = {}
    checked: list[tuple[int, LabelingState, CheckedLabel]] = []
    seen: dict[tuple[int, int], int] = {}
    with transaction.atomic():
        for number, item in enumerate(items):
            step = steps.get(number)
            if step is None:
                where = "step" if item.get("step") is not None else "index"
                errors[str(number)] = {where: "No such step in your projects."}
                statuses.add(404)
                continue
            try:
                state = states.get(step.trajectory_id)
                if state is None:
                    state = _state_for(user, step.trajectory_id, queue_id)
                    states[step.trajectory_id] = state
                if isinstance(state, LabelingError):
                    raise state
                label = step_label_checked(
                    state=state,
                    step=step,
                    schema_id=item.get("schema", schema_id),
                    **{k: item[k] for k in LABEL_FIELDS if k in item},
                )
                first = seen.setdefault((step.pk, label.schema.pk), number)
                if first != number:
                    raise LabelingError(
                        f"Step {step.index} has a label of {label.schema.name!r} in item"
                        f" {first} already: one label per step and schema in a request.",
                        field="step",
                    )
                checked.append((number, state, label))
            except LabelingError as error:
                errors[str(number)] = {error.field or "step": error.message}
                statuses.add(error.status)
        results: list[StepLabelResult] = []
        refreshes: list[tuple[LabelingState, LabelSchema, bool]] = []
        if not errors:
            results, refreshes = _labels_write(checked, errors)
            if errors:
                statuses.add(400)
        submitted: list[TrajectoryLabel] = []
        if not errors and not submit:
            verdicts_refresh(refreshes)
        if submit and not errors:
            submits: list[SubmitChecked] = []
            # The verdicts refreshed, then the states again (the labels just written count
            # towards completeness and the first error), in one round trip.
            written = [state for state in states.values() if isinstance(state, LabelingState)]
            statements = [labeling_states_reread_statement(written, queue_id=queue_id)]
            refresh = verdicts_refresh_statement(refreshes)
            if refresh is not None:
                statements.insert(0, refresh)
            with connection.cursor() as cursor:
                rows = statements_run(cursor, statements)[-1]
            for fresh in labeling_states_reread_rows(written, rows):
                try:
                    submits.append(trajectory_submit_checked(state=fresh, **(verdict or {})))
                except LabelingError as error:
                    errors.setdefault("submit", {})[str(fresh.trajectory.pk)] = error.message
                    statuses.add(error.status)
            if not errors:
                submitted = trajectories_submit_write(submits)
                for submitted_verdict in submitted:
                    if isinstance(user, User) and submitted_verdict.annotator_id == user.pk:
                        submitted_verdict.annotator = user
        if errors:
            # Raised inside the transaction, so nothing of the batch is kept.
            raise BulkLabelsRejected(errors, statuses.pop() if len(statuses) == 1 else 400)
    return BulkLabelsResult(labels=results, submitted=submitted)


def _state_for(
    user: AnyUser, trajectory_id: int, queue_id: int | None
) -> LabelingState | LabelingError:
    """The user's labeling state on the trajectory, once it may be labelled (its lease
    kept once for the whole batch), or the LabelingError that says why not."""
    state = labeling_state_for_user(user, trajectory_id, queue_id=queue_id)
    try:
        require_can_label(state)
    except LabelingError as error:
        return error
    return state


# The optional fields of a label and how an upsert or an update sets each when given.
_OPTIONAL = ("tags", "rationale", "correction", "time_spent_ms")
_UPSERT_SET = {
    "tags": "tags = EXCLUDED.tags",
    "rationale": "rationale = EXCLUDED.rationale",
    "correction": "correction = EXCLUDED.correction",
    "time_spent_ms": "time_spent_ms = COALESCE(l.time_spent_ms, 0) + EXCLUDED.time_spent_ms",
}
_UPDATE_SET = {
    "tags": "tags = u.tags",
    "rationale": "rationale = u.rationale",
    "correction": "correction = u.correction",
    "time_spent_ms": "time_spent_ms = COALESCE(l.time_spent_ms, 0) + u.time_spent_ms",
}
_ROWS = (
    "SELECT (r->>0)::bigint AS step_id, (r->>1)::int AS annotator_id,"
    " (r->>2)::bigint AS schema_id, (r->>3)::int AS value, (r->4)::jsonb AS tags,"
    " r->>5 AS rationale, r->>6 AS correction, r->>7 AS status,"
    " (r->>8)::bool AS saw_model_scores, (r->>9)::int AS time_spent_ms"
    " FROM json_array_elements(%s::json) AS r"
)


def _labels_write(
    checked: list[tuple[int, LabelingState, CheckedLabel]], errors: dict[str, dict[str, Any]]
) -> tuple[list[StepLabelResult], list[tuple[LabelingState, LabelSchema, bool]]]:
    """Write the checked labels, a statement per kind of write and combination of the
    fields given; fill ``errors`` for an edit of a step not labelled yet and for a
    correction on a step not labelled as an error (the caller then rolls back). Returns
    the results and the verdict refreshes the labels call for (the caller runs them)."""
    now = timezone.now()
    groups: dict[tuple[bool, tuple[str, ...]], list[tuple[int, LabelingState, CheckedLabel]]] = {}
    for entry in checked:
        label = entry[2]
        given = tuple(name for name in _OPTIONAL if getattr(label, name) is not None)
        groups.setdefault((label.value is not None, given), []).append(entry)
    written: dict[tuple[int, int], tuple[int, bool, int]] = {}
    with connection.cursor() as cursor:
        for (upsert, given), entries in groups.items():
            rows = orjson.dumps(
                [
                    [
                        label.step.pk,
                        state.user_id,
                        label.schema.pk,
                        label.value,
                        label.tags or [],
                        label.rationale or "",
                        label.correction or "",
                        StepLabel.Status.SUBMITTED if state.submitted else StepLabel.Status.DRAFT,
                        state.show_model_scores,
                        label.time_spent_ms,
                    ]
                    for _, state, label in entries
                ]
            ).decode()
            if upsert:
                sets = ["value = EXCLUDED.value", *(_UPSERT_SET[name] for name in given)]
                # xmax is 0 only on a row this statement inserted.
                cursor.execute(
                    "INSERT INTO labeling_steplabel AS l (step_id, annotator_id, schema_id, value,"
                    " tags, rationale, correction, status, saw_model_scores, time_spent_ms,"
                    " created_at, updated_at)"
                    f" SELECT step_id, annotator_id, schema_id, value, tags, rationale,"
                    f" correction, status, saw_model_scores, time_spent_ms, %s, %s FROM ({_ROWS}) u"
                    " ON CONFLICT (step_id, annotator_id, schema_id) DO UPDATE SET"
                    f" {', '.join(sets)}, updated_at = EXCLUDED.updated_at,"
                    " saw_model_scores = l.saw_model_scores OR EXCLUDED.saw_model_scores"
                    " RETURNING l.step_id, l.schema_id, l.id, (xmax = 0), l.value",
                    [now, now, rows],
                )
            else:
                if not given:
                    for number, _, _ in entries:
                        errors[str(number)] = {
                            "value": "Nothing to change: give a value, tags, a rationale or"
                            " a correction."
                        }
                    continue
                sets = [_UPDATE_SET[name] for name in given]
                cursor.execute(
                    f"UPDATE labeling_steplabel AS l SET {', '.join(sets)}, updated_at = %s"
                    f" FROM ({_ROWS}) u WHERE l.step_id = u.step_id"
                    " AND l.annotator_id = u.annotator_id AND l.schema_id = u.schema_id"
                    " RETURNING l.step_id, l.schema_id, l.id, false, l.value",
                    [now, rows],
                )
            for step_id, schema_id, label_id, created, value in cursor.fetchall():
                written[(step_id, schema_id)] = (label_id, bool(created), value)
    results = []
    refresh: dict[tuple[int, int], tuple[LabelingState, Any, bool]] = {}
    for number, state, label in checked:
        found = written.get((label.step.pk, label.schema.pk))
        if found is None:
            if str(number) not in errors:
                errors[str(number)] = {
                    "value": f"Label step {label.step.index} first, then add to the label."
                }
            continue
        label_id, created, value = found
        if label.correction and value != label.schema.error_value:
            errors[str(number)] = {
                "correction": "A correction goes with a step labelled as an error."
            }
        key = (state.trajectory.pk, label.schema.pk)
        _, _, found_error = refresh.get(key, (state, label.schema, False))
        refresh[key] = (state, label.schema, found_error or label.first_error)
        results.append(StepLabelResult(label_id=label_id, created=created))
    return results, list(refresh.values())


def _steps_for(user: AnyUser, items: list[dict[str, Any]]) -> dict[int, Step]:
    """Item index → its step, for the items whose step lies in ``user``'s projects; two
    queries whatever the batch's size."""
    by_id = {int(item["step"]) for item in items if item.get("step") is not None}
    by_position = {
        (int(item["trajectory"]), int(item["index"]))
        for item in items
        if item.get("step") is None
        and item.get("trajectory") is not None
        and item.get("index") is not None
    }
    visible = Step.objects.filter(trajectory__project__in=projects_for_user(user)).only(
        "id", "trajectory_id", "index", "labelable", "kind", "role", "agent"
    )
    found_by_id = {s.pk: s for s in visible.filter(pk__in=by_id)} if by_id else {}
    found_by_position: dict[tuple[int, int], Step] = {}
    if by_position:
        wanted = Q(pk__in=[])
        trajectories: dict[int, list[int]] = {}
        for trajectory_id, index in by_position:
            trajectories.setdefault(trajectory_id, []).append(index)
        for trajectory_id, indexes in trajectories.items():
            wanted |= Q(trajectory_id=trajectory_id, index__in=indexes)
        found_by_position = {(s.trajectory_id, s.index): s for s in visible.filter(wanted)}
    steps: dict[int, Step] = {}
    for number, item in enumerate(items):
        if item.get("step") is not None:
            step = found_by_id.get(int(item["step"]))
        elif item.get("trajectory") is not None and item.get("index") is not None:
            step = found_by_position.get((int(item["trajectory"]), int(item["index"])))
        else:
            step = None
        if step is not None:
            steps[number] = step
    return steps
