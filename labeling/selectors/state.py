"""The labeling state of one trajectory for one user: what the labeling surface, the
label services and the API need to know about it (role, active schemas, their verdict,
their lease, their progress, the queue's progress), from a single query,
:func:`labeling_state_for_user`; and the part a label write changes, read again for many
trajectories at once, :func:`labeling_states_reread`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection
from django.db.models import Q, Value
from django.db.models.expressions import RawSQL
from django.http import Http404

from labeling.models import LabelSchema, TrajectoryLabel
from labeling.selectors.surface import (
    AnyUser,
    LabelingSettings,
    LabelingState,
    Lease,
    QueueProgress,
    from_json,
)
from trajectories.models import Step, Trajectory
from trajectories.selectors import projects_for_user

_T = '"trajectories_trajectory"'
# The project's first schema (the first made of those with an active version): the one
# the progress counts and first-error mode follow.
_ACTIVE_SCHEMA_ID = f"""(SELECT s.id FROM labeling_labelschema s
    WHERE s.project_id = {_T}."project_id" AND s.is_active
    ORDER BY (SELECT min(o.id) FROM labeling_labelschema o
              WHERE o.project_id = s.project_id AND o.name = s.name), s.version DESC, s.id DESC
    LIMIT 1)"""
_SQL_ROLE = f"""SELECT m.role FROM trajectories_membership m
    WHERE m.project_id = {_T}."project_id" AND m.user_id = %s"""
# Every active schema, the first made first (the newest version of each name is the
# active one).
_SQL_SCHEMAS = f"""SELECT json_agg(row_to_json(s) ORDER BY (
        SELECT min(o.id) FROM labeling_labelschema o
        WHERE o.project_id = s.project_id AND o.name = s.name), s.id)
    FROM labeling_labelschema s WHERE s.project_id = {_T}."project_id" AND s.is_active"""
_SQL_VERDICT = f"""SELECT row_to_json(tl) FROM labeling_trajectorylabel tl
    WHERE tl.trajectory_id = {_T}."id" AND tl.annotator_id = %s"""
_SQL_LEASE = f"""SELECT json_build_object('assignment_id', a.id, 'status', a.status,
        'expires_at', a.expires_at, 'item_id', i.id, 'queue_id', q.id, 'queue_name', q.name,
        'overlap', q.overlap, 'schemas', q.schemas, 'span_schemas', q.span_schemas)
    FROM labeling_queueassignment a
    JOIN labeling_queueitem i ON i.id = a.item_id
    JOIN labeling_queue q ON q.id = i.queue_id
    WHERE i.trajectory_id = {_T}."id" AND a.annotator_id = %s
      AND a.status IN ('leased', 'submitted')
    ORDER BY (q.id = %s::bigint) DESC NULLS LAST, (a.status = 'leased') DESC, a.leased_at DESC
    LIMIT 1"""
# This user's progress on the active schema; the "to first error" counts stop at the first
# step they labelled as an error (first-error mode asks for nothing after it).
_SQL_PROGRESS = f"""SELECT json_build_object(
        'labelable', count(*), 'labelled', count(l.id),
        'labelable_to_first_error', count(*) FILTER (WHERE s.index <= fe.i),
        'labelled_to_first_error', count(l.id) FILTER (WHERE s.index <= fe.i))
    FROM trajectories_step s
    LEFT JOIN labeling_steplabel l
      ON l.step_id = s.id AND l.annotator_id = %s AND l.schema_id = {_ACTIVE_SCHEMA_ID}
    LEFT JOIN (SELECT tl.first_error_index AS i FROM labeling_trajectorylabel tl
               WHERE tl.trajectory_id = {_T}."id" AND tl.annotator_id = %s) fe ON true
    WHERE s.trajectory_id = {_T}."id" AND s.labelable"""
# A queue's progress: its kept counts (``QueueCounts``, and ``QueueAnnotatorCounts`` for
# this user's submitted items), never a count over the queue's items or the user's
# assignments. ``{queue}`` is the queue's id: ``%s`` or an outer query's column.
QUEUE_PROGRESS_TEMPLATE = """SELECT json_build_object(
        'items', k.items, 'complete', k.complete,
        'mine', coalesce((SELECT m.submitted FROM labeling_queueannotatorcounts m
                          WHERE m.queue_id = k.queue_id AND m.annotator_id = %s), 0))
    FROM labeling_queuecounts k WHERE k.queue_id = {queue}"""
QUEUE_PROGRESS_SQL = QUEUE_PROGRESS_TEMPLATE.format(queue="%s")


# Yes/no facts of the trajectory's project that a higher app wants on the labeling page
# (rollouts: whether the project has a policy to roll out with), read in the state's one
# query: name → an SQL condition over the trajectory row's ``project_id``, given the
# quoted column, with its parameters. The SQL lives in the app that registers it.
StateFlag = tuple[str, list[Any]]
_STATE_FLAGS: dict[str, Callable[[str], StateFlag]] = {}


def labeling_state_flag_register(name: str, condition: Callable[[str], StateFlag]) -> None:
    _STATE_FLAGS[name] = condition


def labeling_state_for_user(
    user: AnyUser, trajectory_pk: int, *, queue_id: int | None = None
) -> LabelingState:
    """The labeling state of one trajectory for ``user``, in one query; 404 for a
    trajectory outside the user's projects. ``queue_id`` (queue mode) picks the lease in
    that queue and adds the queue's progress."""
    if not user.is_authenticated:
        raise Http404("No such trajectory.")
    uid = int(user.pk)
    queryset = (
        Trajectory.objects.select_related("project")
        .filter(pk=trajectory_pk, project__in=projects_for_user(user))
        .annotate(
            _role=RawSQL(_SQL_ROLE, [uid]),
            _schemas=RawSQL(_SQL_SCHEMAS, []),
            _verdict=RawSQL(_SQL_VERDICT, [uid]),
            _lease=RawSQL(_SQL_LEASE, [uid, queue_id]),
            _progress=RawSQL(_SQL_PROGRESS, [uid, uid]),
        )
    )
    for name, condition in _STATE_FLAGS.items():
        sql, params = condition(f'{_T}."project_id"')
        queryset = queryset.annotate(**{f"_flag_{name}": RawSQL(sql, params)})
    if queue_id is not None:
        queryset = queryset.annotate(
            _queue_progress=RawSQL(
                f'SELECT CASE WHEN q.project_id = {_T}."project_id" THEN ({QUEUE_PROGRESS_SQL})'
                " END FROM labeling_queue q WHERE q.id = %s",
                [uid, queue_id, queue_id],
            )
        )
    trajectory = queryset.first()
    if trajectory is None:
        raise Http404("No such trajectory.")
    state = _state_from_row(trajectory, uid)
    if state.lease is not None and state.lease.schemas:
        _count_queue_schemas(state)
    return state


# What a label write changes in a state, for many trajectories in one query.
_SQL_REREAD = f"""SELECT {_T}."id", ({_SQL_VERDICT}), ({_SQL_LEASE}), ({_SQL_PROGRESS})
    FROM trajectories_trajectory WHERE {_T}."id" = ANY(%s)"""


def labeling_states_reread(
    states: list[LabelingState], *, queue_id: int | None = None
) -> list[LabelingState]:
    """``states`` (of one user) again after their labels were written: the verdict, the
    lease and the progress read again, in one query for them all, the rest (the project,
    the role, the schemas, the flags) kept, since a label write does not change them.
    Equal to :func:`labeling_state_for_user` of each, without its queue progress."""
    if not states:
        return []
    sql, params = labeling_states_reread_statement(states, queue_id=queue_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return labeling_states_reread_rows(states, cursor.fetchall())


def labeling_states_reread_statement(
    states: list[LabelingState], *, queue_id: int | None = None
) -> tuple[str, list[Any]]:
    """The query of :func:`labeling_states_reread`, for a caller that sends it with
    other statements; :func:`labeling_states_reread_rows` reads its rows."""
    uid = states[0].user_id
    return _SQL_REREAD, [uid, uid, queue_id, uid, uid, [state.trajectory.pk for state in states]]


def labeling_states_reread_rows(
    states: list[LabelingState], rows: list[Any]
) -> list[LabelingState]:
    """The states again from the rows of :func:`labeling_states_reread_statement`."""
    by_trajectory = {row[0]: row[1:] for row in rows}
    fresh = []
    for state in states:
        verdict, lease_data, progress = (
            json.loads(value) if isinstance(value, str) else value
            for value in by_trajectory[state.trajectory.pk]
        )
        lease = None
        if lease_data:
            lease_data = dict(lease_data)
            lease_data["expires_at"] = dt.datetime.fromisoformat(lease_data["expires_at"])
            lease = Lease(**lease_data)
        progress = progress or {}
        again = replace(
            state,
            verdict=from_json(TrajectoryLabel, verdict),
            lease=lease,
            labelable=progress.get("labelable", 0),
            labelled=progress.get("labelled", 0),
            labelable_to_first_error=progress.get("labelable_to_first_error", 0),
            labelled_to_first_error=progress.get("labelled_to_first_error", 0),
        )
        if again.lease is not None and again.lease.schemas:
            _count_queue_schemas(again)
        fresh.append(again)
    return fresh


def _count_queue_schemas(state: LabelingState) -> None:
    """Progress under a queue that names its schemas: one to label per labelable step
    and schema of the queue that applies to it, and this user's labels under them (in
    first-error mode, those up to their first error). One query."""
    wanted = {schema.pk: schema for schema in state.schemas}
    rows = (
        Step.objects.filter(trajectory_id=state.trajectory.pk, labelable=True)
        .annotate(
            _mine=ArrayAgg(
                "labels__schema_id",
                filter=Q(labels__annotator_id=state.user_id, labels__schema_id__in=list(wanted)),
                default=Value([]),
            )
        )
        .values_list("index", "kind", "role", "agent", "_mine")
    )
    first_error = state.first_error_index
    counts = {"labelable": 0, "labelled": 0, "to_first": 0, "labelled_to_first": 0}
    for index, kind, role, agent, mine in rows:
        for schema in wanted.values():
            if not schema.applies(kind, role, agent):
                continue
            done = schema.pk in (mine or [])
            counts["labelable"] += 1
            counts["labelled"] += done
            if first_error is not None and index <= first_error:
                counts["to_first"] += 1
                counts["labelled_to_first"] += done
    state.labelable = counts["labelable"]
    state.labelled = counts["labelled"]
    state.labelable_to_first_error = counts["to_first"]
    state.labelled_to_first_error = counts["labelled_to_first"]


def _state_from_row(trajectory: Trajectory, user_id: int) -> LabelingState:
    row: Any = trajectory
    lease = None
    if row._lease:
        data = dict(row._lease)
        data["expires_at"] = dt.datetime.fromisoformat(data["expires_at"])
        lease = Lease(**data)
    progress = row._progress or {}
    queue_progress = getattr(row, "_queue_progress", None)
    schemas = [
        schema
        for schema in (from_json(LabelSchema, data) for data in row._schemas or [])
        if schema is not None
    ]
    if lease is not None and lease.schemas:
        # The queue asks for some schemas only: those, in the queue's order.
        by_name = {schema.name: schema for schema in schemas}
        schemas = [by_name[name] for name in lease.schemas if name in by_name]
    return LabelingState(
        trajectory=trajectory,
        user_id=user_id,
        role=row._role,
        schema=schemas[0] if schemas else None,
        schemas=schemas,
        verdict=from_json(TrajectoryLabel, row._verdict),
        lease=lease,
        labelable=progress.get("labelable", 0),
        labelled=progress.get("labelled", 0),
        labelable_to_first_error=progress.get("labelable_to_first_error", 0),
        labelled_to_first_error=progress.get("labelled_to_first_error", 0),
        queue_progress=QueueProgress(**queue_progress) if queue_progress else None,
        settings=LabelingSettings.of(trajectory.project),
        flags={name: bool(getattr(row, f"_flag_{name}", False)) for name in _STATE_FLAGS},
    )
