"""Submitting a trajectory: the user's verdict, draft step labels and queue lease become
submitted (which also lifts blind mode for them), checked first, then written for many
trajectories in one round trip; and the events a submission announces."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from labeling.models import QueueCounts, TrajectoryLabel
from labeling.selectors import LabelingState
from labeling.services.common import (
    MAX_RATIONALE_CHARS,
    LabelingError,
    history_statement,
    require_can_label,
    statements_run,
)
from stepscope.events import event_emit


@dataclass(frozen=True)
class SubmitChecked:
    """A submit that :func:`trajectory_submit_checked` passed: the state and the verdict's
    fields as they will be written."""

    state: LabelingState
    outcome: str
    finish_reason: str
    comment: str
    flagged: bool


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
    checked = trajectory_submit_checked(
        state=state, outcome=outcome, finish_reason=finish_reason, comment=comment, flagged=flagged
    )
    return trajectories_submit_write([checked])[0]


def trajectory_submit_checked(
    *,
    state: LabelingState,
    outcome: str = "",
    finish_reason: str = "",
    comment: str = "",
    flagged: bool = False,
) -> SubmitChecked:
    """The checks of :func:`trajectory_submit`, which write nothing; raises LabelingError."""
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
    return SubmitChecked(
        state=state,
        outcome=outcome,
        finish_reason=str(finish_reason),
        comment=comment[:MAX_RATIONALE_CHARS],
        flagged=flagged,
    )


# The verdict's columns, in the order the submit's upsert returns them.
_VERDICT_COLUMNS = [f.attname for f in TrajectoryLabel._meta.concrete_fields]


def _verdict_fields(checked: SubmitChecked) -> tuple[str, str, str, bool]:
    return checked.outcome, checked.finish_reason, checked.comment, checked.flagged


def trajectories_submit_write(submits: list[SubmitChecked]) -> list[TrajectoryLabel]:
    """Write checked submits in one round trip whatever their number: the verdicts
    (created if missing), the annotators' draft labels on those trajectories and their
    leases become submitted, in one history context (``action: submit``); then each
    submission's events. Returns the verdicts in the order of ``submits``."""
    now = timezone.now()
    rows = orjson.dumps(
        [(c.state.trajectory.pk, c.state.user_id, *_verdict_fields(c)) for c in submits]
    ).decode()
    keys = orjson.dumps([[c.state.trajectory.pk, c.state.user_id] for c in submits]).decode()
    columns = ", ".join(f"tl.{name}" for name in _VERDICT_COLUMNS)
    # One statement for the three tables: the verdicts, the draft labels (their history
    # and majority triggers fire as for an update of its own) and the leases; marked
    # ``action: submit`` in the history, in one round trip.
    submit_sql = (
        "WITH v AS (INSERT INTO labeling_trajectorylabel AS tl (trajectory_id, annotator_id,"
        " outcome, finish_reason, comment, flagged, status, submitted_at, created_at,"
        " updated_at)"
        " SELECT (r->>0)::bigint, (r->>1)::int, r->>2, r->>3, r->>4, (r->>5)::bool,"
        " 'submitted', %s, %s, %s FROM json_array_elements(%s::json) AS r"
        " ORDER BY 1, 2"
        " ON CONFLICT (trajectory_id, annotator_id) DO UPDATE SET"
        " outcome = EXCLUDED.outcome, finish_reason = EXCLUDED.finish_reason,"
        " comment = EXCLUDED.comment, flagged = EXCLUDED.flagged, status = 'submitted',"
        " submitted_at = EXCLUDED.submitted_at, updated_at = EXCLUDED.updated_at"
        f" RETURNING {columns}),"
        " labels AS (UPDATE labeling_steplabel AS l SET status = 'submitted', updated_at = %s"
        " FROM trajectories_step s, json_array_elements(%s::json) AS k"
        " WHERE s.id = l.step_id AND s.trajectory_id = (k->>0)::bigint"
        " AND l.annotator_id = (k->>1)::int AND l.status = 'draft' RETURNING l.id),"
        " leases AS (UPDATE labeling_queueassignment AS a SET status = 'submitted',"
        " submitted_at = %s FROM labeling_queueitem i, json_array_elements(%s::json) AS k"
        " WHERE i.id = a.item_id AND i.trajectory_id = (k->>0)::bigint"
        " AND a.annotator_id = (k->>1)::int AND a.status = 'leased'"
        " RETURNING i.trajectory_id, a.annotator_id, i.queue_id)"
        f" SELECT {', '.join(f'v.{name}' for name in _VERDICT_COLUMNS)},"
        " (SELECT json_agg(json_build_array(trajectory_id, annotator_id, queue_id))"
        " FROM leases) FROM v"
    )
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        _, rows_back, _ = statements_run(
            cursor,
            history_statement(
                submit_sql, [now, now, now, rows, now, keys, now, keys], action="submit"
            ),
        )
        queue_ids: dict[tuple[int, int], set[int]] = {}
        verdicts = {}
        for row in rows_back:
            verdict = TrajectoryLabel.from_db("default", _VERDICT_COLUMNS, row[:-1])
            verdicts[(verdict.trajectory_id, verdict.annotator_id)] = verdict
            for trajectory_id, annotator_id, queue_id in row[-1] or ():
                queue_ids.setdefault((trajectory_id, annotator_id), set()).add(queue_id)
        submitted = []
        for checked in submits:
            key = (checked.state.trajectory.pk, checked.state.user_id)
            verdict = verdicts[key]
            verdict.trajectory = checked.state.trajectory
            _submitted_announce(checked.state, verdict, sorted(queue_ids.get(key, ())))
            submitted.append(verdict)
    return submitted


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
    # The kept counts already hold this submit (their triggers ran in its statement).
    finished = QueueCounts.objects.filter(
        queue_id__in=queue_ids, complete__gte=F("items")
    ).select_related("queue")
    for counts in finished:
        event_emit(
            project_id=project_id,
            kind="queue.finished",
            data={"queue": counts.queue_id, "name": counts.queue.name, "items": counts.items},
        )
