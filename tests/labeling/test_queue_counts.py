"""A queue's kept counts (``QueueCounts``: its items and those complete) equal a recount
over its items and assignments after every kind of write: a queue made from a selection,
items added, submits (one annotator, an overlap of two, in bulk, two at once), a submit
taken back, a skip, an expired lease, items and assignments removed, the overlap changed;
migration 0015 fills them for the queues that exist. The queue list, the queue's page and
the labeling page show them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count, Q
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from labeling.models import (
    LabelSchema,
    Queue,
    QueueAnnotatorCounts,
    QueueAssignment,
    QueueCounts,
    QueueItem,
)
from labeling.selectors import queue_progress
from labeling.services import (
    queue_assignment_release,
    queue_create,
    queue_item_take,
    queue_items_insert,
    trajectory_submit,
)
from labeling.services.submit import trajectories_submit_write, trajectory_submit_checked
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.labeling.conftest import leased_state
from tests.labeling.test_concurrency import at_once
from tests.migrating import migrate_back, migrate_to_latest
from trajectories.models import Membership, Project, Trajectory
from trajectories.selection import TrajectoryFilters

pytestmark = pytest.mark.services

HTMX = {"HX-Request": "true"}
GIVE_UP = "give_up"


def recount(queue: Queue) -> tuple[int, int]:
    """Items and complete items, counted over the rows."""
    submitted = Count("assignments", filter=Q(assignments__status="submitted"))
    items = QueueItem.objects.filter(queue=queue).annotate(n=submitted)
    return items.count(), items.filter(n__gte=Queue.objects.get(pk=queue.pk).overlap).count()


def kept(queue: Queue) -> tuple[int, int]:
    counts = QueueCounts.objects.get(queue_id=queue.pk)
    return counts.items, counts.complete


def submitted_by(queue: Queue) -> dict[int, int]:
    """Per annotator, the queue's items they submitted: kept, and counted over the rows."""
    kept_mine = dict(
        QueueAnnotatorCounts.objects.filter(queue_id=queue.pk, submitted__gt=0).values_list(
            "annotator_id", "submitted"
        )
    )
    counted = dict(
        QueueAssignment.objects.filter(item__queue=queue, status="submitted")
        .values("annotator_id")
        .annotate(n=Count("id"))
        .values_list("annotator_id", "n")
    )
    assert kept_mine == counted
    return counted


def assert_counts(queue: Queue, items: int, complete: int) -> None:
    assert kept(queue) == recount(queue) == (items, complete)
    submitted_by(queue)


def annotators(project: Project, count: int) -> list[User]:
    users = []
    for n in range(count):
        user = UserFactory.create(username=f"counted{n}")
        MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
        users.append(user)
    return users


def submit_next(user: User, queue: Queue) -> Trajectory:
    """Take ``user``'s next item of ``queue`` and submit it (giving up: no labels needed)."""
    current = leased_state(user, queue)
    trajectory_submit(state=current, finish_reason=GIVE_UP)
    return current.trajectory


def made(project: Project, count: int, overlap: int = 1) -> Queue:
    for _ in range(count):
        trajectory_with_steps(project, ["a", "b"])
    return queue_create(
        project=project,
        name="counted",
        created_by=None,
        filters=TrajectoryFilters(),
        overlap=overlap,
    )


@pytest.mark.django_db
def test_a_queue_made_from_a_selection_counts_its_items(project: Project) -> None:
    for _ in range(3):
        trajectory_with_steps(project, ["a", "b"])
    trajectory_with_steps(project, ["a"])
    queue = queue_create(
        project=project,
        name="long ones",
        created_by=None,
        filters=TrajectoryFilters(min_steps=2),
    )
    assert_counts(queue, 3, 0)
    empty = queue_create(
        project=project, name="none", created_by=None, filters=TrajectoryFilters(min_steps=9)
    )
    assert_counts(empty, 0, 0)


@pytest.mark.django_db
def test_items_added_later_are_counted(project: Project) -> None:
    queue = made(project, 2)
    later = [trajectory_with_steps(project, ["a"]).pk for _ in range(3)]
    added = queue_items_insert(
        queue=queue,
        ranked_sql="SELECT t AS trajectory_id, t AS rank FROM unnest(%s::bigint[]) AS t",
        params=[later],
    )
    assert added == 3
    assert_counts(queue, 5, 0)


@pytest.mark.django_db
def test_an_item_is_complete_when_the_overlap_has_submitted(project: Project) -> None:
    queue = made(project, 2, overlap=2)
    first, second = annotators(project, 2)
    taken = submit_next(first, queue)
    assert_counts(queue, 2, 0)
    assert submit_next(second, queue) == taken
    assert_counts(queue, 2, 1)
    submit_next(first, queue)
    assert_counts(queue, 2, 1)
    submit_next(second, queue)
    assert_counts(queue, 2, 2)
    assert submitted_by(queue) == {first.pk: 2, second.pk: 2}


@pytest.mark.django_db
def test_a_bulk_submit_counts_every_item(project: Project) -> None:
    """Four annotators' leases on two items of overlap two, submitted in one statement:
    each item gets both its submits at once."""
    queue = made(project, 2, overlap=2)
    states = [leased_state(user, queue) for user in annotators(project, 4)]
    assert len({s.trajectory.pk for s in states}) == 2
    trajectories_submit_write(
        [trajectory_submit_checked(state=s, finish_reason=GIVE_UP) for s in states]
    )
    assert_counts(queue, 2, 2)


@pytest.mark.django_db
def test_a_submit_taken_back_leaves_its_item_incomplete(project: Project) -> None:
    """No page reopens a submit; an admin's edit of the assignment's status does, and the
    counts follow it."""
    queue = made(project, 2)
    (user,) = annotators(project, 1)
    submit_next(user, queue)
    submit_next(user, queue)
    assert_counts(queue, 2, 2)
    assignment = QueueAssignment.objects.filter(item__queue=queue).first()
    assert assignment is not None
    assignment.status = QueueAssignment.Status.LEASED
    assignment.save()
    assert_counts(queue, 2, 1)
    QueueAssignment.objects.filter(pk=assignment.pk).update(status="submitted")
    assert_counts(queue, 2, 2)


@pytest.mark.django_db
def test_skips_and_expired_leases_complete_nothing(project: Project) -> None:
    queue = made(project, 2, overlap=2)
    first, second, third, fourth = annotators(project, 4)
    taken = submit_next(first, queue)
    assert queue_item_take(queue=queue, annotator=second) is not None
    assert queue_assignment_release(queue=queue, annotator=second) == taken.pk
    assert_counts(queue, 2, 0)
    lease = queue_item_take(queue=queue, annotator=third)
    assert lease is not None and lease.item.trajectory == taken
    QueueAssignment.objects.filter(pk=lease.pk).update(
        expires_at=timezone.now() - dt.timedelta(minutes=1)
    )
    # The expired lease's slot goes to the fourth annotator, who completes the item; the
    # third's lease is then marked expired when they come back.
    assert submit_next(fourth, queue) == taken
    assert_counts(queue, 2, 1)
    assert queue_item_take(queue=queue, annotator=third) is not None
    assert QueueAssignment.objects.filter(pk=lease.pk, status="expired").exists()
    assert_counts(queue, 2, 1)


@pytest.mark.django_db
def test_removed_items_and_assignments_are_taken_off(project: Project) -> None:
    queue = made(project, 3)
    (user,) = annotators(project, 1)
    done = [submit_next(user, queue) for _ in range(2)]
    assert_counts(queue, 3, 2)
    # An item removed with its submitted assignment (the ORM's cascade deletes the
    # assignment first); then an item removed before its assignment in one transaction
    # (the foreign key is checked at commit).
    QueueItem.objects.filter(queue=queue, trajectory=done[0]).delete()
    assert_counts(queue, 2, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM labeling_queueitem WHERE queue_id = %s AND trajectory_id = %s"
            " RETURNING id",
            [queue.pk, done[1].pk],
        )
        (item_id,) = cursor.fetchone()
        assert kept(queue) == (1, 0)
        cursor.execute("DELETE FROM labeling_queueassignment WHERE item_id = %s", [item_id])
    assert_counts(queue, 1, 0)
    submit_next(user, queue)
    assert_counts(queue, 1, 1)
    QueueAssignment.objects.filter(item__queue=queue).delete()
    assert_counts(queue, 1, 0)


@pytest.mark.django_db
def test_a_deleted_annotator_takes_their_submits_with_them(project: Project) -> None:
    """A user with verdicts cannot be deleted (they are protected); one whose submitted
    assignment an admin wrote can. The cascade removes their assignments and their counts
    row, in whichever order Django deletes them: the counts follow, no row is left."""
    queue = made(project, 2, overlap=2)
    first, second = annotators(project, 2)
    submit_next(first, queue)
    now = timezone.now()
    item = QueueItem.objects.get(queue=queue, assignments__annotator=first)
    for other in (item, QueueItem.objects.filter(queue=queue).exclude(pk=item.pk).get()):
        QueueAssignment.objects.create(
            item=other, annotator=second, status="submitted", leased_at=now, expires_at=now
        )
    assert_counts(queue, 2, 1)
    assert submitted_by(queue) == {first.pk: 1, second.pk: 2}
    second.delete()
    assert_counts(queue, 2, 0)
    assert submitted_by(queue) == {first.pk: 1}
    assert not QueueAnnotatorCounts.objects.filter(annotator_id=second.pk).exists()


@pytest.mark.django_db
def test_a_changed_overlap_counts_complete_items_again(project: Project) -> None:
    queue = made(project, 2, overlap=2)
    first, second = annotators(project, 2)
    submit_next(first, queue)
    submit_next(first, queue)
    submit_next(second, queue)
    assert_counts(queue, 2, 1)
    queue.overlap = 1
    queue.save()
    assert_counts(queue, 2, 2)
    Queue.objects.filter(pk=queue.pk).update(overlap=3)
    assert_counts(queue, 2, 0)


@pytest.mark.django_db(transaction=True)
def test_two_annotators_submitting_one_item_at_once_complete_it_once(project: Project) -> None:
    """Each submit counts the item's submitted assignments after the other committed
    (the item's lock): neither sees only its own and leaves the item short."""
    queue = made(project, 1, overlap=2)
    states = [leased_state(user, queue) for user in annotators(project, 2)]
    results = at_once(
        *((lambda s=s: trajectory_submit(state=s, finish_reason=GIVE_UP)) for s in states)
    )
    assert not [r for r in results if isinstance(r, Exception)]
    assert_counts(queue, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_queues_that_exist(project: Project) -> None:
    queue = made(project, 3, overlap=2)
    first, second = annotators(project, 2)
    submit_next(first, queue)
    submit_next(second, queue)
    submit_next(first, queue)
    migrate_back(connection, ("labeling", "0014_final_spans"))
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass('labeling_queuecounts')")
            assert cursor.fetchone() == (None,)
    finally:
        migrate_to_latest(connection)
    assert_counts(queue, 3, 1)
    assert submitted_by(queue) == {first.pk: 2, second.pk: 1}
    later = queue_create(
        project=project, name="after", created_by=None, filters=TrajectoryFilters()
    )
    assert_counts(later, 3, 0)


@pytest.mark.django_db
def test_the_list_the_queue_page_and_the_labeling_page_show_the_counts(
    client: Client, project: Project, schema: LabelSchema
) -> None:
    queue = made(project, 3, overlap=2)
    first, second = annotators(project, 2)
    taken = submit_next(first, queue)
    submit_next(second, queue)
    submit_next(first, queue)
    assert_counts(queue, 3, 1)
    assert queue_progress(queue, first).mine == 2
    assert queue_progress(queue, second).mine == 1
    client.force_login(first)
    listing = client.get(reverse("queue-list", args=[project.slug]), headers=HTMX)
    row = listing.content.decode()
    assert "1 / 3 complete" in row
    assert '<td class="num">2</td>' in row
    detail = client.get(reverse("queue-detail", args=[queue.pk])).content.decode()
    assert '<span class="stat-value">3</span><span class="stat-label">items' in detail
    page = client.get(
        reverse("trajectory-detail", args=[taken.pk]) + f"?queue={queue.pk}"
    ).content.decode()
    assert "queue: <strong>1</strong> / 3 items complete · you: 2" in page
