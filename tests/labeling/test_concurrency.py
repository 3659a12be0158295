"""Queue leases and label writes under concurrency, on the real database: each thread is
its own session with its own connection, released together by a barrier."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.utils import timezone

from labeling.models import Queue, QueueAssignment, StepLabel, StepLabelEvent
from labeling.selectors import labeling_state_for_user
from labeling.services import (
    LeaseLost,
    queue_assignment_release,
    queue_create,
    queue_item_take,
    step_label_set,
    trajectory_submit,
)
from stepscope.locks import LockClass
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in parallel threads (one database session each), starting together;
    return their results (or exceptions) in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[index] = call()
        except Exception as error:  # handed back to the test
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def members(project: Project, count: int) -> list[User]:
    users = []
    for n in range(count):
        user = UserFactory.create(username=f"a{n}")
        MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
        users.append(user)
    return users


def setup(items: int, overlap: int, annotators: int) -> tuple[Queue, list[Trajectory], list[User]]:
    project = project_create(slug="conc", name="Concurrency")
    trajectories = [trajectory_with_steps(project, ["a", "b", "c"]) for _ in range(items)]
    queue = queue_create(
        project=project, name="q", created_by=None, filters=TrajectoryFilters(), overlap=overlap
    )
    return queue, trajectories, members(project, annotators)


def take(queue: Queue, user: User) -> Callable[[], int | None]:
    def call() -> int | None:
        assignment = queue_item_take(queue=queue, annotator=user)
        return assignment.item.trajectory_id if assignment else None

    return call


def test_concurrent_annotators_get_different_items() -> None:
    queue, trajectories, users = setup(items=8, overlap=1, annotators=8)
    taken = at_once(*(take(queue, user) for user in users))
    assert sorted(taken) == sorted(t.pk for t in trajectories)


def test_overlap_caps_how_many_annotators_hold_an_item() -> None:
    queue, trajectories, users = setup(items=1, overlap=2, annotators=5)
    taken = at_once(*(take(queue, user) for user in users))
    assert sorted(taken, key=str) == sorted([trajectories[0].pk] * 2 + [None] * 3, key=str)
    assert QueueAssignment.objects.count() == 2


def test_overlap_spreads_over_items_under_load() -> None:
    queue, trajectories, users = setup(items=5, overlap=2, annotators=10)
    taken = at_once(*(take(queue, user) for user in users))
    assert None not in taken
    assert {t.pk: taken.count(t.pk) for t in trajectories} == {t.pk: 2 for t in trajectories}


def test_same_annotator_in_two_sessions_gets_one_lease() -> None:
    queue, trajectories, (user,) = setup(items=3, overlap=1, annotators=1)
    first, second = at_once(take(queue, user), take(queue, user))
    assert first == second == trajectories[0].pk
    assert QueueAssignment.objects.filter(annotator=user).count() == 1


def test_an_item_never_goes_to_the_same_annotator_twice() -> None:
    queue, trajectories, (user, other) = setup(items=2, overlap=2, annotators=2)
    assert take(queue, user)() == trajectories[0].pk
    queue_assignment_release(queue=queue, annotator=user)
    assert take(queue, user)() == trajectories[1].pk
    queue_assignment_release(queue=queue, annotator=user)
    assert take(queue, user)() is None
    assert take(queue, other)() == trajectories[0].pk


def expire(user: User) -> None:
    QueueAssignment.objects.filter(annotator=user).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )


def test_expired_lease_goes_to_someone_else_and_its_holder_is_told() -> None:
    queue, trajectories, (slow, quick) = setup(items=1, overlap=1, annotators=2)
    trajectory = trajectories[0]
    assert take(queue, slow)() == trajectory.pk
    assert take(queue, quick)() is None  # held
    expire(slow)
    assert take(queue, quick)() == trajectory.pk
    step = Step.objects.get(trajectory=trajectory, index=0)
    with pytest.raises(LeaseLost) as error:
        step_label_set(
            state=labeling_state_for_user(slow, trajectory.pk, queue_id=queue.pk),
            step=step,
            value=1,
        )
    assert error.value.status == 409
    assert "another annotator took it" in error.value.message
    assert StepLabel.objects.count() == 0
    assert QueueAssignment.objects.get(annotator=slow).status == "expired"
    assert take(queue, slow)() is None


def test_expired_lease_is_resumed_while_the_item_has_room() -> None:
    queue, trajectories, (user,) = setup(items=2, overlap=1, annotators=1)
    assert take(queue, user)() == trajectories[0].pk
    expire(user)
    step = Step.objects.get(trajectory=trajectories[0], index=0)
    state = labeling_state_for_user(user, trajectories[0].pk, queue_id=queue.pk)
    step_label_set(state=state, step=step, value=1)
    assignment = QueueAssignment.objects.get(annotator=user)
    assert assignment.status == "leased" and assignment.expires_at > timezone.now()
    assert take(queue, user)() == trajectories[0].pk


def test_submitted_items_count_towards_the_overlap() -> None:
    queue, trajectories, (first, second, third) = setup(items=1, overlap=2, annotators=3)
    trajectory = trajectories[0]
    for user in (first, second):
        assert take(queue, user)() == trajectory.pk
        for step in Step.objects.filter(trajectory=trajectory):
            state = labeling_state_for_user(user, trajectory.pk, queue_id=queue.pk)
            step_label_set(state=state, step=step, value=1)
        trajectory_submit(state=labeling_state_for_user(user, trajectory.pk, queue_id=queue.pk))
    expire(first)  # an old lease timestamp does not matter once submitted
    assert take(queue, third)() is None


def test_same_annotator_double_posting_at_once_gives_one_label() -> None:
    project = project_create(slug="dup", name="Dup")
    (owner,) = members(project, 1)
    Membership.objects.filter(user=owner).update(role=Membership.Role.ADMIN)
    trajectory = trajectory_with_steps(project, ["a"])
    step = Step.objects.get(trajectory=trajectory)

    def post(value: int) -> Callable[[], Any]:
        def call() -> Any:
            state = labeling_state_for_user(owner, trajectory.pk)
            return step_label_set(state=state, step=step, value=value)

        return call

    results = at_once(*(post(1) for _ in range(8)))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert StepLabel.objects.filter(step=step).count() == 1
    assert sum(1 for r in results if r.created) == 1
    assert len({r.label_id for r in results}) == 1
    assert StepLabelEvent.objects.filter(step_id=step.pk).count() == 1


def test_two_annotators_labelling_one_step_at_once_never_overwrite_each_other() -> None:
    queue, trajectories, users = setup(items=1, overlap=6, annotators=6)
    trajectory = trajectories[0]
    for user in users:
        take(queue, user)()
    step = Step.objects.get(trajectory=trajectory, index=1)

    def post(user: User, value: int) -> Callable[[], Any]:
        def call() -> Any:
            state = labeling_state_for_user(user, trajectory.pk, queue_id=queue.pk)
            return step_label_set(state=state, step=step, value=value)

        return call

    wanted = {user.pk: (-1, 0, 1)[n % 3] for n, user in enumerate(users)}
    results = at_once(*(post(user, wanted[user.pk]) for user in users))
    assert not [r for r in results if isinstance(r, Exception)], results
    stored = dict(StepLabel.objects.filter(step=step).values_list("annotator_id", "value"))
    assert stored == wanted


def test_taking_an_item_never_waits_on_another_kind_of_lock() -> None:
    """Queue takes lock under a class of their own: a queue whose id happens to equal the
    import lock's class, taken while an import of a project with the annotator's id holds
    its lock, is not kept waiting (it was, when takes locked ``(queue, annotator)``)."""
    project = project_create(slug="locks", name="Locks")
    trajectory_with_steps(project, ["a", "b"])
    (user,) = members(project, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('labeling_queue_id_seq', %s, false)", [int(LockClass.IMPORT)])
    queue = queue_create(project=project, name="q", created_by=None, filters=TrajectoryFilters())
    assert queue.pk == LockClass.IMPORT
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [int(LockClass.IMPORT), user.pk])
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '5s'")
            assert queue_item_take(queue=queue, annotator=user) is not None
    finally:
        holder.close()
