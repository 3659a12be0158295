"""Reads of labeling queues: access (404 for outsiders), the project's queues with each
one's progress, its annotators and a page of its items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.http import Http404
from django.utils import timezone

from labeling.models import (
    Queue,
    QueueAssignment,
    QueueItem,
    StepLabel,
)
from labeling.selectors.state import QUEUE_PROGRESS_SQL, QUEUE_PROGRESS_TEMPLATE
from labeling.selectors.surface import (
    REVIEWER_ROLES,
    AnyUser,
    QueueProgress,
    is_reviewer,
)
from labeling.spans import SpanLabel
from trajectories.models import Membership, Project
from trajectories.selectors import projects_for_user


def queue_get_for_user(user: AnyUser, pk: int) -> tuple[Queue, str]:
    """A queue and the user's role in its project; 404 outside the user's projects and,
    for annotators, for queues they are not assigned to."""
    if not user.is_authenticated:
        raise Http404("No such queue.")
    queue = (
        Queue.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .annotate(
            _role=Subquery(
                Membership.objects.filter(project=OuterRef("project"), user_id=int(user.pk)).values(
                    "role"
                )[:1]
            ),
            _assignee_count=Count("assignees", distinct=True),
            _assigned=Exists(
                Queue.assignees.through.objects.filter(queue=OuterRef("pk"), user_id=int(user.pk))
            ),
        )
        .first()
    )
    if queue is None:
        raise Http404("No such queue.")
    row: Any = queue
    if not is_reviewer(row._role) and row._assignee_count and not row._assigned:
        raise Http404("No such queue.")
    return queue, row._role


def queues_for_project(project: Project, user: AnyUser, role: str | None) -> list[Queue]:
    """The project's queues this user can work on (reviewers: all of them), each with
    ``progress`` (:class:`QueueProgress`) and ``open_lease_trajectory`` (the trajectory of the
    user's open lease in it, if any)."""
    uid = int(user.pk) if user.is_authenticated else 0
    queues = Queue.objects.filter(project=project).order_by("-is_active", "-created_at", "-id")
    if not is_reviewer(role):
        assigned = Queue.assignees.through.objects.filter(queue=OuterRef("pk"))
        queues = queues.filter(~Exists(assigned) | Exists(assigned.filter(user_id=uid)))
    queues = queues.annotate(
        _progress=RawSQL(
            QUEUE_PROGRESS_TEMPLATE.format(queue='"labeling_queue"."id"'),
            [user.pk],
        ),
        open_lease_trajectory=Subquery(
            QueueAssignment.objects.filter(
                item__queue=OuterRef("pk"),
                annotator_id=user.pk,
                status=QueueAssignment.Status.LEASED,
                expires_at__gt=timezone.now(),
            ).values("item__trajectory_id")[:1]
        ),
    )
    result: list[Queue] = []
    for queue in queues:
        row: Any = queue
        row.progress = QueueProgress(**(row._progress or {}))
        result.append(queue)
    return result


def queue_progress(queue: Queue, user: AnyUser) -> QueueProgress:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(QUEUE_PROGRESS_SQL, [user.pk, queue.pk])
        (data,) = cursor.fetchone() or (None,)
    return QueueProgress(**(data or {}))


@dataclass(frozen=True)
class SpanProgress:
    """A queue's progress on one span schema it asks for: its items, those done (some
    annotator has a span of the schema on the trajectory, or has submitted it) and those
    done by this user (a span of theirs, or their submit)."""

    schema: str
    items: int
    done: int
    mine: int


def queue_span_progress(queue: Queue, user: AnyUser) -> list[SpanProgress]:
    """Per span schema the queue asks for, in its order: :class:`SpanProgress`. A schema
    no longer active still counts its spans (the queue keeps asking for it by name)."""
    uid = int(user.pk) if user.is_authenticated else 0
    result = []
    for name in queue.span_schemas or []:
        spans = SpanLabel.objects.filter(
            trajectory_id=OuterRef("trajectory_id"),
            schema__project_id=queue.project_id,
            schema__name=name,
        )
        submitted = QueueAssignment.objects.filter(
            item_id=OuterRef("pk"), status=QueueAssignment.Status.SUBMITTED
        )
        counts = (
            QueueItem.objects.filter(queue=queue)
            .annotate(
                _any=Exists(spans) | Exists(submitted),
                _mine=Exists(spans.filter(annotator_id=uid))
                | Exists(submitted.filter(annotator_id=uid)),
            )
            .aggregate(
                items=Count("id"),
                done=Count("id", filter=Q(_any=True)),
                mine=Count("id", filter=Q(_mine=True)),
            )
        )
        result.append(SpanProgress(schema=name, **counts))
    return result


@dataclass(frozen=True)
class AnnotatorProgress:
    username: str
    submitted: int
    leased: int
    steps_labelled: int


def queue_annotators(queue: Queue) -> list[AnnotatorProgress]:
    """Per annotator: items submitted, open leases, and step labels on the queue's items."""
    rows = (
        QueueAssignment.objects.filter(item__queue=queue)
        .values("annotator_id", "annotator__username")
        .annotate(
            submitted=Count("id", filter=Q(status=QueueAssignment.Status.SUBMITTED)),
            leased=Count(
                "id",
                filter=Q(status=QueueAssignment.Status.LEASED, expires_at__gt=timezone.now()),
            ),
        )
        .order_by("annotator__username")
    )
    labelled = dict(
        StepLabel.objects.filter(
            step__trajectory__queue_items__queue=queue,
            annotator_id__in=[r["annotator_id"] for r in rows],
        )
        .values("annotator_id")
        .annotate(n=Count("id"))
        .values_list("annotator_id", "n")
    )
    return [
        AnnotatorProgress(
            username=r["annotator__username"],
            submitted=r["submitted"],
            leased=r["leased"],
            steps_labelled=labelled.get(r["annotator_id"], 0),
        )
        for r in rows
    ]


QUEUE_ITEMS_PAGE_SIZE = 100


def queue_items_page(
    queue: Queue, *, after: int | None = None
) -> tuple[list[QueueItem], int | None]:
    """Items in the order leases hand them out (position; or, in a "most uncertain first"
    queue, the least certain first, then position) with ``submitted`` and ``leased``
    counts and the trajectory's external id, keyset-paged after the item ``after``."""
    uncertain = queue.order == Queue.Order.UNCERTAIN
    queryset = (
        QueueItem.objects.filter(queue=queue)
        .select_related("trajectory")
        .only(
            "id",
            "position",
            "uncertainty",
            "trajectory__id",
            "trajectory__external_id",
            "trajectory__step_count",
        )
        .annotate(
            submitted=Count(
                "assignments", filter=Q(assignments__status=QueueAssignment.Status.SUBMITTED)
            ),
            leased=Count(
                "assignments",
                filter=Q(
                    assignments__status=QueueAssignment.Status.LEASED,
                    assignments__expires_at__gt=timezone.now(),
                ),
            ),
        )
        .order_by(*([F("uncertainty").asc(nulls_last=True)] if uncertain else []), "position", "id")
    )
    if after is not None:
        queryset = queryset.filter(_after_item(queue, after, uncertain=uncertain))
    items: list[QueueItem] = list(queryset[: QUEUE_ITEMS_PAGE_SIZE + 1])
    if len(items) > QUEUE_ITEMS_PAGE_SIZE:
        return items[:QUEUE_ITEMS_PAGE_SIZE], items[QUEUE_ITEMS_PAGE_SIZE - 1].pk
    return items, None


def _after_item(queue: Queue, pk: int, *, uncertain: bool) -> Q:
    """The items that come after item ``pk`` in the page's order."""
    cursor = QueueItem.objects.filter(queue=queue, pk=pk).values("position", "uncertainty").first()
    if cursor is None:
        return Q(pk__in=[])
    later = Q(position__gt=cursor["position"]) | Q(position=cursor["position"], id__gt=pk)
    if not uncertain:
        return later
    if cursor["uncertainty"] is None:
        return Q(uncertainty__isnull=True) & later
    return (
        Q(uncertainty__isnull=True)
        | Q(uncertainty__gt=cursor["uncertainty"])
        | (Q(uncertainty=cursor["uncertainty"]) & later)
    )


def queues_for_user(user: AnyUser) -> QuerySet[Queue]:
    """The queues of every project of ``user`` that they can work on, the rule of
    :func:`queues_for_project`: reviewers see all of their project's queues, annotators
    those with no assignees or with them among the assignees."""
    if not user.is_authenticated:
        return Queue.objects.none()
    uid = int(user.pk)
    assigned = Queue.assignees.through.objects.filter(queue=OuterRef("pk"))
    reviewing = Membership.objects.filter(
        project=OuterRef("project"), user_id=uid, role__in=REVIEWER_ROLES
    )
    return (
        Queue.objects.filter(project__in=projects_for_user(user))
        .filter(Exists(reviewing) | ~Exists(assigned) | Exists(assigned.filter(user_id=uid)))
        .select_related("project")
    )
