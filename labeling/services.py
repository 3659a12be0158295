"""Writes for labeling: step labels (idempotent upsert), undo from history, trajectory
verdicts, final (adjudicated) labels, schemas, project labeling settings and queue leases.

Every function here is a ``<thing>_<verb>`` service with keyword-only arguments that runs
in one transaction. A request that breaks a rule raises :class:`LabelingError` with an
HTTP status and a sentence for the annotator, before anything is written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pghistory
from django.contrib.auth.models import AbstractBaseUser, User
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Exists, Min, OuterRef, Q
from django.utils import timezone
from psycopg.types.json import Jsonb

from labeling.models import (
    FinalLabel,
    LabelSchema,
    Queue,
    QueueAssignment,
    QueueItem,
    StepLabel,
    StepLabelEvent,
    TrajectoryLabel,
)
from labeling.selectors import LabelingState, Lease
from scoring.models import Scorer
from scoring.selectors import latest_trained_head, steps_most_uncertain
from trajectories.models import Project, Step
from trajectories.selectors import TrajectoryFilters, trajectories_filtered

MAX_RATIONALE_CHARS = 20_000
MAX_CORRECTION_CHARS = 100_000
MAX_TIME_SPENT_MS = 24 * 3600 * 1000


class LabelingError(Exception):
    """A request the rules refuse; ``status`` is the HTTP status to answer with."""

    status = 400

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class StaleSchema(LabelingError):
    status = 409


class LeaseLost(LabelingError):
    status = 409


class NotAllowed(LabelingError):
    status = 403


@contextmanager
def _history_context(**metadata: Any) -> Iterator[None]:
    """Mark the history events written inside with ``metadata`` (``undo_of``, ``action``).

    pghistory hands the metadata to the triggers through transaction-local settings, which
    would otherwise stay set until the transaction ends and mark later, unrelated writes
    in the same transaction too; they are cleared on the way out."""
    try:
        with pghistory.context(**metadata):
            yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('pghistory.context_id', '', true),"
                    " set_config('pghistory.context_metadata', '', true)"
                )
        except DatabaseError:
            pass  # the transaction failed and is rolled back, settings included


# --- Permission ---------------------------------------------------------------------------


def _require_can_label(state: LabelingState) -> None:
    """Reviewers may label anything in their project; annotators only what a queue leased
    them. An expired lease is renewed while the item still has room for them."""
    if state.role is None:
        raise NotAllowed("You are not a member of this project.")
    if state.schema is None:
        raise LabelingError("This project has no active label schema; an admin must add one.")
    if state.reviewer:
        return
    if state.lease is None:
        raise NotAllowed("Take this trajectory from a queue to label it.")
    _lease_keep(state.lease)


def _lease_keep(lease: Lease) -> None:
    """Extend an active lease that is past half its time (activity keeps it), or resume an
    expired one if the item still has room; otherwise the slot went to someone else."""
    if lease.submitted:
        return
    now = timezone.now()
    assignment = (
        QueueAssignment.objects.select_related("item__queue")
        .only("id", "status", "expires_at", "item__queue__lease_seconds", "item__queue__overlap")
        .get(pk=lease.assignment_id)
    )
    lease_for = dt.timedelta(seconds=assignment.item.queue.lease_seconds)
    if not lease.expired:
        if lease.expires_at - now < lease_for / 2:
            QueueAssignment.objects.filter(pk=assignment.pk).update(expires_at=now + lease_for)
        return
    with transaction.atomic():
        # The item row is the lock every change to its assignments takes first.
        QueueItem.objects.select_for_update().get(pk=lease.item_id)
        lost = _active_count(lease.item_id, exclude=assignment.pk) >= assignment.item.queue.overlap
        if lost:
            QueueAssignment.objects.filter(pk=assignment.pk).update(
                status=QueueAssignment.Status.EXPIRED
            )
        else:
            QueueAssignment.objects.filter(pk=assignment.pk).update(
                status=QueueAssignment.Status.LEASED, leased_at=now, expires_at=now + lease_for
            )
    if lost:
        # Raised after the commit: the lease is gone whatever this request does next.
        raise LeaseLost(
            "Your lease on this trajectory expired and another annotator took it."
            " Your labels so far are kept; take the next item from the queue."
        )


def _active_count(item_id: int, *, exclude: int | None = None) -> int:
    """Assignments that count towards an item's overlap: submitted, or leased and not yet
    expired. Run it after locking the item so it sees every committed assignment."""
    queryset = QueueAssignment.objects.filter(item_id=item_id).filter(
        Q(status=QueueAssignment.Status.SUBMITTED)
        | Q(status=QueueAssignment.Status.LEASED, expires_at__gt=timezone.now())
    )
    if exclude is not None:
        queryset = queryset.exclude(pk=exclude)
    return queryset.count()


def _check_schema(state: LabelingState, schema_id: int | None) -> LabelSchema:
    schema = state.schema
    assert schema is not None  # _require_can_label checked it
    if schema_id is None or schema_id == schema.pk:
        return schema
    other = LabelSchema.objects.filter(pk=schema_id).only("project_id", "version").first()
    if other is None or other.project_id != state.project.pk:
        raise LabelingError("That label schema does not belong to this project.")
    raise StaleSchema(
        f"The label schema changed (this page uses v{other.version}, the project now uses"
        f" v{schema.version}). Reload the page to label with the new version."
    )


# --- Step labels --------------------------------------------------------------------------


@dataclass(frozen=True)
class StepLabelResult:
    label_id: int
    created: bool


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
    _require_can_label(state)
    schema = _check_schema(state, schema_id)
    if step.trajectory_id != state.trajectory.pk:
        raise LabelingError("That step belongs to another trajectory.")
    if not step.labelable:
        raise LabelingError(f"Step {step.index} is not labelable.")
    if first_error:
        if schema.error_value is None:
            raise LabelingError(f"The schema {schema} has no error value to mark.")
        value = schema.error_value
    if value is not None and value not in schema.allowed_values:
        names = ", ".join(f"{e['value']} ({e['name']})" for e in schema.entries)
        raise LabelingError(f"{value} is not a value of {schema}; use one of {names}.")
    if tags is not None:
        unknown = sorted(set(tags) - set(schema.error_tags or []))
        if unknown:
            raise LabelingError(f"Unknown tag: {', '.join(unknown)}.")
        tags = [t for t in schema.error_tags if t in set(tags)]  # schema order, no repeats
    if rationale is not None and len(rationale) > MAX_RATIONALE_CHARS:
        raise LabelingError(f"A rationale is at most {MAX_RATIONALE_CHARS} characters.")
    if correction is not None and len(correction) > MAX_CORRECTION_CHARS:
        raise LabelingError(f"A correction is at most {MAX_CORRECTION_CHARS} characters.")
    if time_spent_ms is not None:
        time_spent_ms = max(0, min(int(time_spent_ms), MAX_TIME_SPENT_MS))

    annotator_id = state.user_id
    status = StepLabel.Status.SUBMITTED if state.submitted else StepLabel.Status.DRAFT
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        if value is None:
            sets, params = _label_assignments(tags, rationale, correction, time_spent_ms)
            if not sets:
                raise LabelingError(
                    "Nothing to change: give a value, tags, a rationale or a correction."
                )
            cursor.execute(
                f"UPDATE labeling_steplabel AS l SET {', '.join(sets)}, updated_at = %s"
                " WHERE step_id = %s AND annotator_id = %s AND schema_id = %s"
                " RETURNING id, value",
                [*params, now, step.pk, annotator_id, schema.pk],
            )
            row = cursor.fetchone()
            if row is None:
                raise LabelingError(f"Label step {step.index} first, then add to the label.")
            label_id, current_value = row
            created = False
        else:
            sets, params = _label_assignments(tags, rationale, correction, time_spent_ms)
            sets.append("value = EXCLUDED.value")
            row_values: list[Any] = [
                step.pk, annotator_id, schema.pk, value, Jsonb(tags or []), rationale or "",
                correction or "", status, state.show_model_scores, time_spent_ms, now, now,
            ]  # fmt: skip
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
            raise LabelingError("A correction goes with a step labelled as an error.")
        _verdict_refresh(state, schema, found_error=first_error)
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


def _verdict_refresh(state: LabelingState, schema: LabelSchema, *, found_error: bool) -> None:
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
                state.trajectory.pk, state.user_id, state.trajectory.pk, state.user_id,
                schema.pk, schema.error_value, found_error, now, now, found_error,
            ],
        )  # fmt: skip


def step_label_undo(*, state: LabelingState) -> int:
    """Undo this user's latest label change on the trajectory and return the step it was
    on. The value before it is read back from the history table: an undo of a new label
    removes it, an undo of a change restores the value, tags, rationale and correction
    before it. Undo events are marked (``undo_of``) so that repeated undos walk further
    back instead of undoing the undo."""
    _require_can_label(state)
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
                "pgh_id", "pgh_label", "pgh_context", "step_id", "value", "tags", "rationale",
                "correction",
            )
        )  # fmt: skip
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
        with _history_context(undo_of=target["pgh_id"]):
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
            _verdict_refresh(state, schema, found_error=False)
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
    _require_can_label(state)
    if outcome and outcome not in TrajectoryLabel.Outcome.values:
        raise LabelingError(f"Unknown outcome {outcome!r}.")
    if finish_reason and finish_reason not in TrajectoryLabel.FinishReason.values:
        raise LabelingError(f"Unknown finish reason {finish_reason!r}.")
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
    with transaction.atomic(), _history_context(action="submit"):
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
        QueueAssignment.objects.filter(
            annotator_id=state.user_id,
            item__trajectory_id=state.trajectory.pk,
            status=QueueAssignment.Status.LEASED,
        ).update(status=QueueAssignment.Status.SUBMITTED, submitted_at=now)
    return verdict


# --- Final (adjudicated) labels -----------------------------------------------------------


def final_label_set(
    *,
    step: Step,
    schema: LabelSchema,
    adjudicator: User | AbstractBaseUser,
    value: int | None,
    rationale: str = "",
) -> FinalLabel | None:
    """Set (or with ``value`` ``None`` clear) the adjudicated label of ``step``."""
    if not step.labelable:
        raise LabelingError(f"Step {step.index} is not labelable.")
    if schema.project_id != step.trajectory.project_id:
        raise LabelingError("That label schema does not belong to this project.")
    if value is not None and value not in schema.allowed_values:
        raise LabelingError(f"{value} is not a value of {schema}.")
    with transaction.atomic(), _history_context(action="adjudicate", user=adjudicator.pk):
        if value is None:
            FinalLabel.objects.filter(step=step, schema=schema).delete()
            return None
        final, _ = FinalLabel.objects.update_or_create(
            step=step,
            schema=schema,
            defaults={"value": value, "adjudicator": adjudicator, "rationale": rationale},
        )
    return final


# --- Schemas and settings -----------------------------------------------------------------


def _meaning(values: list[dict[str, Any]], tags: list[str]) -> tuple[Any, ...]:
    """What a label means: the values with their names, and the tags. Colours and keys
    are presentation and may change without a new version."""
    return (
        sorted((int(v["value"]), str(v["name"]), bool(v.get("error"))) for v in values),
        sorted(tags),
    )


def label_schema_save(
    *,
    schema: LabelSchema,
    kind: str,
    values: list[dict[str, Any]],
    error_tags: list[str],
    ask_rationale: bool,
    first_error_mode: bool,
) -> LabelSchema:
    """Save an edit of ``schema``. A change of values or tags makes a new version (the old
    one is deactivated and keeps its labels); other changes apply in place."""
    with transaction.atomic():
        current = LabelSchema.objects.select_for_update().get(pk=schema.pk)
        if not current.is_active:
            raise StaleSchema("This schema version is no longer active; edit the newest one.")
        if kind == current.kind and _meaning(values, error_tags) == _meaning(
            current.values, current.error_tags
        ):
            current.values = values
            current.ask_rationale = ask_rationale
            current.first_error_mode = first_error_mode
            current.save(update_fields=["values", "ask_rationale", "first_error_mode"])
            return current
        latest = (
            LabelSchema.objects.filter(project_id=current.project_id, name=current.name)
            .order_by("-version")
            .values_list("version", flat=True)
            .first()
        ) or current.version
        LabelSchema.objects.filter(project_id=current.project_id, is_active=True).update(
            is_active=False
        )
        return LabelSchema.objects.create(
            project_id=current.project_id,
            name=current.name,
            kind=kind,
            values=values,
            error_tags=error_tags,
            ask_rationale=ask_rationale,
            first_error_mode=first_error_mode,
            version=latest + 1,
            is_active=True,
        )


def labeling_settings_set(
    *, project: Project, blind_labeling: bool, hide_model_scores: bool, labels_per_step: int
) -> Project:
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        settings = dict(locked.settings or {})
        settings.update(
            blind_labeling=blind_labeling,
            hide_model_scores=hide_model_scores,
            labels_per_step=labels_per_step,
        )
        locked.settings = settings
        locked.save(update_fields=["settings"])
    return locked


def project_guidelines_set(*, project: Project, guidelines: str) -> Project:
    project.guidelines = guidelines
    project.save(update_fields=["guidelines"])
    return project


# --- Queues -------------------------------------------------------------------------------


def queue_create(
    *,
    project: Project,
    name: str,
    created_by: User | None,
    filters: TrajectoryFilters,
    overlap: int = 1,
    lease_seconds: int = 30 * 60,
    assignees: list[User] | None = None,
    description: str = "",
    limit: int | None = None,
    order: str = Queue.Order.POSITION,
) -> Queue:
    """A queue over the project's trajectories that match ``filters`` (oldest first, at
    most ``limit``), inserted in one statement whatever the selection's size; leased in
    ``order`` (for "most uncertain first", ranked by the latest trained head now)."""
    if Queue.objects.filter(project=project, name=name).exists():
        raise LabelingError(f"A queue named {name!r} exists already.")
    if order not in Queue.Order.values:
        raise LabelingError(f"Unknown queue order {order!r}.")
    with transaction.atomic():
        queue = Queue.objects.create(
            project=project,
            name=name,
            description=description,
            overlap=overlap,
            lease_seconds=lease_seconds,
            order=order,
            created_by=created_by,
            selection={
                key: value for key, value in vars(filters).items() if value not in ("", None)
            }
            | ({"limit": limit} if limit else {}),
        )
        if assignees:
            queue.assignees.set(assignees)
        selection = trajectories_filtered(project, filters).order_by("id").values("id")
        if limit:
            selection = selection[:limit]
        sql, params = selection.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO labeling_queueitem (queue_id, trajectory_id, position, created_at)"
                f" SELECT %s, sel.id, row_number() OVER (ORDER BY sel.id), %s FROM ({sql}) sel",
                [queue.pk, timezone.now(), *params],
            )
        if order == Queue.Order.UNCERTAIN:
            queue_uncertainty_refresh(queue=queue)
    return queue


def queue_order_set(*, queue: Queue, order: str) -> Queue:
    if order not in Queue.Order.values:
        raise LabelingError(f"Unknown queue order {order!r}.")
    with transaction.atomic():
        queue.order = order
        queue.save(update_fields=["order"])
        if order == Queue.Order.UNCERTAIN:
            queue_uncertainty_refresh(queue=queue)
    return queue


def queue_uncertainty_refresh(*, queue: Queue, scorer: Scorer | None = None) -> int:
    """Rank the queue's items for "most uncertain first": each trajectory by its most
    uncertain unlabelled step (``scoring.selectors.steps_most_uncertain``: score nearest
    0.5 under ``scorer``, by default the project's latest trained head); trajectories
    with no such step go last. Returns how many items got a rank.

    Leasing then reads the stored rank through an index, whatever the queue's size; a
    trained head's scoring run ranks the project's uncertain queues again when it ends."""
    scorer = scorer or latest_trained_head(queue.project)
    if scorer is None:
        QueueItem.objects.filter(queue=queue).update(uncertainty=None)
        return 0
    uncertain = (
        steps_most_uncertain(queue.project, scorer)
        .filter(
            Exists(QueueItem.objects.filter(queue=queue, trajectory_id=OuterRef("trajectory_id")))
        )
        .order_by()
        .values("trajectory_id")
        .annotate(least=Min("uncertainty"))
    )
    sql, params = uncertain.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE labeling_queueitem SET uncertainty = NULL"
            " WHERE queue_id = %s AND uncertainty IS NOT NULL",
            [queue.pk],
        )
        cursor.execute(
            "UPDATE labeling_queueitem i SET uncertainty = u.least"
            f" FROM ({sql}) u WHERE i.queue_id = %s AND i.trajectory_id = u.trajectory_id",
            [*params, queue.pk],
        )
        return cursor.rowcount


def queues_uncertainty_refresh(*, project: Project) -> int:
    """Rank every active "most uncertain first" queue of ``project`` again (after a new
    trained head scored its steps). Returns how many queues were ranked."""
    queues = list(
        Queue.objects.filter(project=project, order=Queue.Order.UNCERTAIN, is_active=True)
    )
    for queue in queues:
        queue_uncertainty_refresh(queue=queue)
    return len(queues)


def queue_item_take(*, queue: Queue, annotator: User | AbstractBaseUser) -> QueueAssignment | None:
    """Lease the next item of ``queue`` to ``annotator`` (``None`` when nothing is left for
    them). Their open lease comes back first; an expired one is resumed while the item has
    room. Otherwise the first item they have never held, with fewer than ``overlap``
    submitted or live leases, is locked with ``FOR UPDATE SKIP LOCKED`` (two annotators
    asking at once get different items instead of waiting on each other), recounted under
    the lock and leased.

    Each attempt runs in a savepoint: an item found full is let go at once, so a taker
    never holds one item's lock while waiting for another's (no deadlock between takers).
    """
    if not queue.is_active:
        raise LabelingError("This queue is closed.")
    now = timezone.now()
    lease_for = dt.timedelta(seconds=queue.lease_seconds)
    with transaction.atomic():
        with connection.cursor() as cursor:
            # One taker per annotator and queue at a time (two tabs pressing n at once).
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [queue.pk, annotator.pk])
        mine = (
            QueueAssignment.objects.filter(
                item__queue=queue, annotator_id=annotator.pk, status=QueueAssignment.Status.LEASED
            )
            .order_by("-leased_at")
            .first()
        )
        if mine is not None:
            if mine.expires_at > now:
                return mine
            try:
                with transaction.atomic():
                    QueueItem.objects.select_for_update().get(pk=mine.item_id)
                    if _active_count(mine.item_id, exclude=mine.pk) >= queue.overlap:
                        raise _ItemFull(mine.item_id)
                    mine.leased_at, mine.expires_at = now, now + lease_for
                    mine.save(update_fields=["leased_at", "expires_at"])
                    return mine
            except _ItemFull:
                mine.status = QueueAssignment.Status.EXPIRED
                mine.save(update_fields=["status"])
        tried: list[int] = []
        while True:
            try:
                with transaction.atomic():
                    item_id = _next_free_item(queue, annotator.pk, exclude=tried, now=now)
                    if item_id is None:
                        # The candidates may only be locked by other takers for a moment:
                        # wait for one rather than say "nothing left" while there is room.
                        item_id = _next_free_item(
                            queue, annotator.pk, exclude=tried, now=now, skip_locked=False
                        )
                    if item_id is None:
                        return None
                    # The item is locked now; count again with a fresh snapshot.
                    if _active_count(item_id) >= queue.overlap:
                        raise _ItemFull(item_id)
                    try:
                        with transaction.atomic():
                            return QueueAssignment.objects.create(
                                item_id=item_id,
                                annotator_id=annotator.pk,
                                leased_at=now,
                                expires_at=now + lease_for,
                            )
                    except IntegrityError:  # held before (released or expired): never twice
                        raise _ItemFull(item_id) from None
            except _ItemFull as full:
                tried.append(full.item_id)


class _ItemFull(Exception):
    def __init__(self, item_id: int) -> None:
        super().__init__(item_id)
        self.item_id = item_id


# Each order follows one of the queue item indexes.
_ITEM_ORDER: dict[str, str] = {
    Queue.Order.POSITION: "i.position, i.id",
    Queue.Order.UNCERTAIN: "i.uncertainty NULLS LAST, i.position, i.id",
}


def _next_free_item(
    queue: Queue,
    annotator_id: int,
    *,
    exclude: list[int],
    now: dt.datetime,
    skip_locked: bool = True,
) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT i.id FROM labeling_queueitem i
            WHERE i.queue_id = %s AND NOT (i.id = ANY(%s))
              AND NOT EXISTS (SELECT 1 FROM labeling_queueassignment a
                              WHERE a.item_id = i.id AND a.annotator_id = %s)
              AND (SELECT count(*) FROM labeling_queueassignment a
                   WHERE a.item_id = i.id
                     AND (a.status = 'submitted' OR (a.status = 'leased' AND a.expires_at > %s))
                  ) < %s
            ORDER BY {_ITEM_ORDER[queue.order]}
            LIMIT 1
            FOR UPDATE OF i {"SKIP LOCKED" if skip_locked else ""}
            """,
            [queue.pk, exclude, annotator_id, now, queue.overlap],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else None


def queue_assignment_release(*, queue: Queue, annotator: User | AbstractBaseUser) -> int | None:
    """Skip: give back the annotator's open lease in ``queue`` (it will not come back to
    them). Their labels so far are kept. Returns the trajectory id released, if any."""
    with transaction.atomic():
        mine = (
            QueueAssignment.objects.select_for_update()
            .select_related("item")
            .filter(
                item__queue=queue, annotator_id=annotator.pk, status=QueueAssignment.Status.LEASED
            )
            .first()
        )
        if mine is None:
            return None
        mine.status = QueueAssignment.Status.RELEASED
        mine.save(update_fields=["status"])
        return mine.item.trajectory_id


def queue_set_active(*, queue: Queue, active: bool) -> Queue:
    queue.is_active = active
    queue.save(update_fields=["is_active"])
    return queue
