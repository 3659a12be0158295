"""Deleting a project: hidden at once, its rows removed by a worker in batches, so a
project of a million steps goes in bounded steps (each batch its own short transaction)
and the deletion's page can say what was removed as it goes."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import CASCADE, DO_NOTHING, SET_NULL, Model, ProtectedError, Sum
from django.utils import timezone

from stepscope import locks
from stepscope.jobs.lifecycle import job_fail, project_jobs_cancel
from stepscope.queueing import broker_require
from trajectories.models import Project, ProjectDeletion, Step, Trajectory
from trajectories.services.members import MemberError


class DeletionRefused(MemberError):
    """A deletion not started (the slug not typed, already under way), with its field."""


# Steps removed per transaction: about a second of work, so a deletion never holds
# locks for long and a worker that dies loses one batch at most (and reruns it).
DELETE_BATCH_STEPS = 20_000


def project_delete_start(*, project: Project, actor: User, confirm: str) -> ProjectDeletion:
    """Hide ``project`` from everyone now and queue the removal of its rows. ``confirm``
    must be the project's slug, typed by the admin. A project already being deleted is
    an error on ``confirm``."""
    if confirm.strip() != project.slug:
        raise DeletionRefused("confirm", f"Type the project's slug, {project.slug}, to delete it.")
    broker_require()  # a dead broker is said now, not left as a project hidden forever
    from trajectories.tasks import project_delete

    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        if locked.deleting_since is not None:
            raise DeletionRefused("confirm", "This project is being deleted already.")
        locked.deleting_since = timezone.now()
        locked.save(update_fields=["deleting_since"])
        # Its imports, exports, scoring, attribution and rollout jobs stop: none of them
        # should spend a worker on rows about to go, or write new ones while they go.
        cancelled = project_jobs_cancel(locked.pk, keep=(ProjectDeletion,))
        total = Trajectory.objects.filter(project=locked).aggregate(n=Sum("step_count"))["n"]
        deletion = ProjectDeletion.objects.create(
            project=locked,
            slug=locked.slug,
            name=locked.name,
            created_by=actor,
            total_steps=total or 0,
            cancelled=cancelled,
        )
        transaction.on_commit(lambda: project_delete.delay(deletion.pk))
    return deletion


def project_deletion_run(
    *,
    deletion_id: int,
    batch_steps: int = DELETE_BATCH_STEPS,
    on_batch: Callable[[int], None] | None = None,
) -> None:
    """Remove the project's trajectories (with their steps and everything on them) a
    batch at a time, then the project and what else hangs on it. Safe to run again
    after a worker died: each batch is committed, a rerun continues with what is left.
    ``on_batch`` is called with each batch's step count once it is committed."""
    deletion = ProjectDeletion.objects.get(pk=deletion_id)
    if not deletion.is_active:
        return
    if deletion.status == ProjectDeletion.Status.QUEUED:
        deletion.status = ProjectDeletion.Status.RUNNING
        deletion.started_at = timezone.now()
        deletion.save(update_fields=["status", "started_at"])
    removed: Counter[str] = Counter(deletion.removed)
    project_id = deletion.project_id
    try:
        while project_id is not None:
            ids, steps = _next_batch(project_id, batch_steps)
            if not ids:
                break
            counts = _batch_delete(project_id, ids)
            removed.update(_named(counts))
            deletion.removed = dict(removed)
            deletion.removed_steps += steps
            deletion.save(update_fields=["removed", "removed_steps"])
            if on_batch is not None:
                on_batch(steps)
        if project_id is not None:
            with transaction.atomic():
                _, rest = Project.objects.filter(pk=project_id).delete()
            removed.update(_named(rest))
    except Exception as error:
        job_fail(ProjectDeletion, pk=deletion.pk, error=error, removed=dict(removed))
        raise
    deletion.project = None
    deletion.status = ProjectDeletion.Status.DONE
    deletion.removed = dict(removed)
    deletion.removed_steps = removed.get(_label(Step), deletion.removed_steps)
    deletion.finished_at = timezone.now()
    deletion.save()


# Tries of one batch that a row written meanwhile made fail (see _batch_delete).
BATCH_TRIES = 5


def _batch_delete(project_id: int, ids: list[int]) -> Counter[str]:
    """Delete trajectories ``ids`` and everything on them in one transaction. It first
    waits for an import of the project still in its transaction (cancelled, it rolls
    back within about a second). A job cancelled by the deletion may still finish the
    chunk in hand and add a row on one of these steps while the batch runs: the deferred
    foreign key check then fails the commit, and the batch is tried again (the job has
    stopped by then)."""
    for attempt in range(1, BATCH_TRIES + 1):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                locks.xact_lock(locks.LockClass.IMPORT, project_id)
                return _cascade(cursor, Trajectory, "SELECT unnest(%s::bigint[])", [ids])
        except IntegrityError:
            if attempt == BATCH_TRIES:
                raise
    raise AssertionError("unreachable")


def _next_batch(project_id: int, batch_steps: int) -> tuple[list[int], int]:
    """The ids of the next trajectories to delete, about ``batch_steps`` steps in all
    (at least one trajectory), and their step count."""
    ids: list[int] = []
    steps = 0
    rows = (
        Trajectory.objects.filter(project_id=project_id)
        .order_by("pk")
        .values_list("pk", "step_count")[: max(1, batch_steps // 2)]
    )
    for pk, count in rows:
        if ids and steps + count > batch_steps:
            break
        ids.append(pk)
        steps += count
    return ids, steps


def _cascade(
    cursor: Any, model: type[Model], ids_sql: str, params: list[Any], path: tuple[Any, ...] = ()
) -> Counter[str]:
    """Delete the rows of ``model`` whose ids ``ids_sql`` selects, and first, the same way,
    every row that refers to them with a cascading foreign key (nulling the SET_NULL
    ones): what ``QuerySet.delete()`` does, but in SQL with subqueries, without loading
    ids into Python (which made a batch of 20,000 steps take seconds). The models come
    from the app registry, so rows of apps above this one go too, without importing them.
    The counts are by model label, as ``delete()`` gives them."""
    counts: Counter[str] = Counter()
    for field in _referring(model):
        child = field.model
        on_delete = field.remote_field.on_delete
        child_table = connection.ops.quote_name(child._meta.db_table)
        column = connection.ops.quote_name(field.column)
        if on_delete is CASCADE and child not in path:
            child_ids = f"SELECT {_pk(child)} FROM {child_table} WHERE {column} IN ({ids_sql})"
            counts += _cascade(cursor, child, child_ids, params, (*path, model))
        elif on_delete is SET_NULL:
            cursor.execute(
                f"UPDATE {child_table} SET {column} = NULL WHERE {column} IN ({ids_sql})", params
            )
        elif on_delete is not DO_NOTHING and on_delete is not CASCADE:
            # PROTECT or RESTRICT: refuse as delete() would, if a row refers to one here.
            cursor.execute(
                f"SELECT 1 FROM {child_table} WHERE {column} IN ({ids_sql}) LIMIT 1", params
            )
            if cursor.fetchone():
                raise ProtectedError(
                    f"{child._meta.label} rows refer to {model._meta.label}", set()
                )
    table = connection.ops.quote_name(model._meta.db_table)
    cursor.execute(f"DELETE FROM {table} WHERE {_pk(model)} IN ({ids_sql})", params)
    counts[model._meta.label] += cursor.rowcount
    return counts


@functools.cache
def _referring(model: type[Model]) -> list[Any]:
    """The foreign keys (of any app, many-to-many tables included) that point at ``model``."""
    found = []
    for other in apps.get_models(include_auto_created=True):
        for field in other._meta.concrete_fields:
            remote = field.remote_field
            many_to_one = field.many_to_one or field.one_to_one
            if remote is not None and many_to_one and remote.model is model:
                found.append(field)
    return found


def _pk(model: type[Model]) -> str:
    return str(connection.ops.quote_name(model._meta.pk.column))


def _label(model: Any) -> str:
    """The model's plural name: its own if it states one, else English rules on its
    name (Django's default only adds an "s": "trajectorys", "import batchs")."""
    meta = model._meta
    if "verbose_name_plural" in meta.original_attrs:
        return str(meta.verbose_name_plural)
    name = str(meta.verbose_name)
    if name.endswith("y") and name[-2:-1] not in "aeiou":
        return name[:-1] + "ies"
    if name.endswith(("s", "x", "ch", "sh")):
        return name + "es"
    return name + "s"


def _named(counts: dict[str, int]) -> dict[str, int]:
    """Django's ``{"app.Model": rows}`` as ``{"verbose plural": rows}``, without zeros."""
    named: dict[str, int] = {}
    for label, rows in counts.items():
        if not rows:
            continue
        name = _label(apps.get_model(label))
        named[name] = named.get(name, 0) + rows
    return named
