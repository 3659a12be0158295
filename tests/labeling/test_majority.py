"""The kept majority label (labeling_stepmajority, maintained by triggers on the step
labels) equals the majority counted from the labels, after every kind of label write."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from labeling.models import LabelSchema, StepLabel, StepMajority
from labeling.sources import label_source_parse, label_source_sql
from tests.factories import UserFactory, trajectory_with_steps
from tests.waiting import wait_until
from trajectories.models import Project, Step
from trajectories.services import imported_annotator, project_create

pytestmark = pytest.mark.services

# The majority as counted from scratch: the reference the kept table must equal.
COUNTED = (
    "SELECT l.step_id, mode() WITHIN GROUP (ORDER BY l.value)"
    " FROM labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id"
    " JOIN trajectories_step s ON s.id = l.step_id"
    " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
    " WHERE t.project_id = %s AND l.status = 'submitted' AND u.username NOT LIKE 'import:%%'"
    " GROUP BY l.step_id HAVING mode() WITHIN GROUP (ORDER BY l.value)"
    " = mode() WITHIN GROUP (ORDER BY l.value DESC)"
)


COLUMNS = "step_id, annotator_id, schema_id, value, status"


def counted(project: Project) -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(COUNTED, [project.pk])
        return dict(cursor.fetchall())


def kept(project: Project) -> dict[int, int]:
    sql, params = label_source_sql(project, label_source_parse("human:majority"))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def label(step: Step, user: User, value: int, status: str = "submitted") -> StepLabel:
    schema = LabelSchema.objects.get(project=step.trajectory.project)
    return StepLabel.objects.create(
        step=step, annotator=user, schema=schema, value=value, status=status
    )


@pytest.mark.django_db
def test_every_kind_of_write_keeps_the_majority(project: Project) -> None:
    a, b = trajectory_with_steps(project, ["a", "b"]).steps.order_by("index")
    x, y, z = (UserFactory.create(username=name) for name in "xyz")
    first = label(a, x, 1)
    assert kept(project) == {a.pk: 1}
    label(a, y, -1)
    assert kept(project) == {}  # a tie
    third = label(a, z, -1, status="draft")
    assert kept(project) == {}  # a draft does not vote
    StepLabel.objects.filter(pk=third.pk).update(status="submitted")
    assert kept(project) == {a.pk: -1}
    StepLabel.objects.filter(pk=first.pk).update(value=-1)
    assert kept(project) == {a.pk: -1}
    StepLabel.objects.filter(pk=third.pk).update(value=1)  # x -1, y -1, z 1
    assert kept(project) == {a.pk: -1}
    StepLabel.objects.filter(pk=first.pk).delete()
    assert kept(project) == {}  # y -1, z 1
    # Moving a label to another step recounts both.
    StepLabel.objects.filter(pk=third.pk).update(step=b)
    assert kept(project) == {a.pk: -1, b.pk: 1}
    StepLabel.objects.filter(annotator__in=[x, y, z]).delete()
    assert kept(project) == {}
    assert not StepMajority.objects.exists()  # no vote left, no row


@pytest.mark.django_db
def test_imported_labels_and_other_projects_never_vote(project: Project) -> None:
    (a,) = trajectory_with_steps(project, ["a"]).steps.all()
    other = project_create(slug="other", name="Other")
    (b,) = trajectory_with_steps(other, ["b"]).steps.all()
    label(a, imported_annotator("processbench"), -1)
    assert kept(project) == {}
    label(a, UserFactory.create(username="x"), 1)
    label(b, UserFactory.create(username="y"), -1)
    assert kept(project) == {a.pk: 1}
    assert kept(other) == {b.pk: -1}


@pytest.mark.django_db
def test_bulk_and_upsert_statements_keep_the_majority(project: Project) -> None:
    """Random batches written the ways the code writes labels (COPY as imports do,
    INSERT ... ON CONFLICT as the label service does, bulk updates and deletes), checked
    against a recount after each statement."""
    steps = [s for _ in range(6) for s in trajectory_with_steps(project, list("abcde")).steps.all()]
    users = [UserFactory.create(username=f"u{n}") for n in range(5)]
    imported = imported_annotator("src")
    schema = LabelSchema.objects.get(project=project)
    rng = np.random.default_rng(0)
    now = timezone.now()
    for _ in range(25):
        chosen = rng.choice(len(steps), size=12, replace=False)
        annotators = [*users, imported]
        rows = [
            (steps[i].pk, annotators[rng.integers(len(annotators))].pk, int(rng.integers(-1, 2)))
            for i in chosen
        ]
        action = rng.integers(4)
        with connection.cursor() as cursor:
            if action == 0:
                existing = set(StepLabel.objects.values_list("step_id", "annotator_id"))
                new = [
                    (step_id, user_id, schema.pk, value, "draft" if n % 5 == 0 else "submitted")
                    for n, (step_id, user_id, value) in enumerate(
                        {(r[0], r[1]): r for r in rows}.values()
                    )
                    if (step_id, user_id) not in existing
                ]
                with cursor.cursor.copy(
                    f"COPY labeling_steplabel ({COLUMNS}, tags, rationale, saw_model_scores,"
                    " created_at, updated_at) FROM STDIN"
                ) as copy:
                    for row in new:
                        copy.write_row((*row, "[]", "", False, now, now))
            elif action == 1:
                for step_id, user_id, value in rows:
                    cursor.execute(
                        f"INSERT INTO labeling_steplabel ({COLUMNS}, tags, rationale,"
                        " saw_model_scores, created_at, updated_at)"
                        " VALUES (%s, %s, %s, %s, 'submitted', '[]', '', false, now(), now())"
                        " ON CONFLICT (step_id, annotator_id, schema_id)"
                        " DO UPDATE SET value = EXCLUDED.value, status = EXCLUDED.status",
                        [step_id, user_id, schema.pk, value],
                    )
            elif action == 2:
                StepLabel.objects.filter(step_id__in=[r[0] for r in rows[:6]]).update(
                    value=int(rng.integers(-1, 2))
                )
            else:
                StepLabel.objects.filter(step_id__in=[r[0] for r in rows[:3]]).delete()
        assert kept(project) == counted(project)
    assert len(kept(project)) > 5


@pytest.mark.django_db(transaction=True)
def test_concurrent_labels_on_one_step_are_all_counted() -> None:
    """Two annotators label one step at the same time: the second writes while the
    first's transaction is still open, and the first commits only once the second's
    write is waiting on it (or, were nothing locked, done). The second recount must
    still see both votes."""
    project = project_create(slug="conc", name="Concurrency")
    (step,) = trajectory_with_steps(project, ["a"]).steps.all()
    label(step, UserFactory.create(username="w"), -1)
    first_user, second_user = (UserFactory.create(username=name) for name in ("x", "y"))
    first_wrote, first_may_commit, second_done = (threading.Event() for _ in range(3))
    second_pid: list[int] = []
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                label(step, first_user, 1)
                first_wrote.set()
                assert first_may_commit.wait(timeout=60)
        except BaseException as error:  # handed back to the test
            errors.append(error)
        finally:
            first_wrote.set()
            connection.close()

    def second() -> None:
        try:
            assert first_wrote.wait(timeout=60)
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    second_pid.append(cursor.fetchone()[0])
                label(step, second_user, 1)
        except BaseException as error:
            errors.append(error)
        finally:
            second_done.set()
            connection.close()

    def second_waits_or_is_done() -> bool:
        if second_done.is_set():
            return True
        if not second_pid:
            return False
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", second_pid
            )
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock"

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    try:
        assert wait_until(second_waits_or_is_done, timeout=60)
    finally:
        first_may_commit.set()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == []
    assert kept(project) == counted(project) == {step.pk: 1}
