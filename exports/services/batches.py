"""Versioned batches: an export can go into a named batch of its project, and each export
into it that finishes becomes the batch's next version (1, 2, ...), with its files and
manifest (those of its export job).

What a version holds for the diff between two versions is read in the export's own
snapshot, beside its files (:func:`batch_rows_read`): one row per selected trajectory
with a digest of its content and its labels (the label source's value of each labelled,
labelable step). The version and its rows are written in the transaction that marks the
export done (:func:`batch_version_add`), so an export that fails or is cancelled leaves
no version, and numbers have no gaps."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Max

from exports.models import BatchVersion, ExportBatch, ExportJob
from exports.services.plan import ExportPlan
from stepscope.events import event_emit
from trajectories.models import Project

BATCH_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@dataclass(frozen=True)
class BatchRows:
    """A version's rows as one JSON array (built by PostgreSQL, written back by it):
    ``[trajectory id, external id, content digest, label digest, {index: value}]``."""

    rows_json: str
    trajectories: int
    labels: int


# The selected trajectories' rows, read in the export's snapshot. The content digest
# takes the last step's prefix hash (a chain over every step's content) and the step
# count beside the content hash, which a live trace keeps while it grows. The labels are
# aggregated as json text in step order (its digest is then stable): a third faster than
# jsonb_object_agg, whose hash aggregate spills to disk on a large export.
_ROWS_SQL = """
SELECT coalesce(json_agg(json_build_array(
           t.id, t.external_id,
           md5(concat_ws(':', t.content_hash, t.step_count, coalesce(last.prefix_hash, '-'),
                         coalesce(t.outcome_reward::text, '-'), coalesce(t.success::text, '-'))),
           md5(coalesce(l.labels, '{{}}')),
           coalesce(l.labels, '{{}}')::json) ORDER BY t.id), '[]')::text,
       count(*), coalesce(sum(l.n), 0)
FROM trajectories_trajectory t
LEFT JOIN LATERAL (
    SELECT s.prefix_hash FROM trajectories_step s
    WHERE s.trajectory_id = t.id ORDER BY s.index DESC LIMIT 1
) last ON true
LEFT JOIN (
    SELECT s.trajectory_id, count(*) AS n,
           json_object_agg(s.index, src.value ORDER BY s.index)::text AS labels
    FROM ({labels}) src JOIN trajectories_step s ON s.id = src.step_id
    WHERE s.labelable AND src.value IS NOT NULL AND s.trajectory_id IN ({chosen})
    GROUP BY s.trajectory_id
) l ON l.trajectory_id = t.id
WHERE t.id IN ({chosen})
"""


def batch_rows_read(plan: ExportPlan) -> BatchRows:
    """The rows of ``plan``'s selection as they are now: run it inside the export's
    snapshot so the rows describe the files written."""
    labels_sql, labels_params = plan.labels_sql_joined
    chosen_sql, chosen_params = plan.chosen.values("id").query.sql_with_params()
    sql = _ROWS_SQL.format(labels=labels_sql, chosen=chosen_sql)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*labels_params, *chosen_params, *chosen_params])
        rows_json, trajectories, labels = cursor.fetchone()
    return BatchRows(rows_json=rows_json, trajectories=trajectories, labels=int(labels))


def batch_name_check(name: str) -> str:
    """``name`` if it can name a batch (it goes in addresses and in ``name@7``)."""
    if not BATCH_NAME.match(name):
        raise ValueError(f"batch: {name!r} is not a batch name (1 to 100 letters, digits, - and _)")
    return name


def export_batch_get_or_create(*, project: Project, name: str, user: User | None) -> ExportBatch:
    """The project's batch called ``name``, made if it has none; ValueError for a name
    that cannot be one."""
    batch_name_check(name)
    with transaction.atomic():
        batch, _ = ExportBatch.objects.get_or_create(
            project=project, name=name, defaults={"created_by": user}
        )
    return batch


def batch_version_add(*, job: ExportJob, rows: BatchRows) -> BatchVersion:
    """Make ``job`` (a finished export into a batch) the batch's next version. Runs in
    the caller's transaction, the one that marks the job done; the batch's row lock
    orders two exports finishing at once."""
    assert job.batch_id is not None
    with transaction.atomic():
        batch = ExportBatch.objects.select_for_update().get(pk=job.batch_id)
        last = batch.versions.aggregate(last=Max("number"))["last"] or 0
        version = BatchVersion.objects.create(
            batch=batch,
            number=last + 1,
            export=job,
            trajectories=rows.trajectories,
            labels=rows.labels,
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO exports_batchversionrow"
                " (version_id, trajectory_id, external_id, content_digest, label_digest, labels)"
                " SELECT %s, (u->>0)::bigint, u->>1, u->>2, u->>3, u->4"
                " FROM jsonb_array_elements(%s::jsonb) AS u",
                [version.pk, rows.rows_json],
            )
        event_emit(
            project_id=job.project_id,
            kind="batch.version",
            data={
                "batch": batch.name,
                "version": version.number,
                "pin": f"{batch.name}@{version.number}",
                "export": job.pk,
                "trajectories": rows.trajectories,
                "labels": rows.labels,
            },
        )
    return version


__all__ = [
    "BatchRows",
    "batch_name_check",
    "batch_rows_read",
    "batch_version_add",
    "export_batch_get_or_create",
]
