"""A deletion batch that a row written meanwhile made fail is tried again: a job the
deletion cancelled may still store the chunk in hand, on a step the batch is deleting,
and the deferred foreign-key check then fails the batch's commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection

from scoring.models import Scorer, StepScore
from tests.factories import trajectory_with_steps
from trajectories.models import Project, ProjectDeletion, Step
from trajectories.services import deletion, project_create, project_deletion_run

# Commits are real here: the batch's deferred foreign-key check runs at its commit.
pytestmark = pytest.mark.django_db(transaction=True)

STEP_DELETE = 'DELETE FROM "trajectories_step"'


def score_from_another_connection(scorer: Scorer, step_id: int) -> None:
    """A score on the step, stored and committed by a connection of its own (the
    cancelled job's last chunk)."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute(
            "INSERT INTO scoring_stepscore (value, raw, updated_at, scorer_id, step_id)"
            " VALUES (0.5, '{}', now(), %s, %s)",
            [scorer.pk, step_id],
        )


def test_a_batch_a_row_written_meanwhile_failed_is_tried_again_and_removes_that_row() -> None:
    owner = User.objects.create_user("owner")
    project = project_create(slug="doomed", name="Doomed", owner=owner)
    trajectory = trajectory_with_steps(project, ["a", "b", "c"])
    scorer = Scorer.objects.create(
        project=project, name="prm", kind="token-classification", model_ref="some/prm"
    )
    step_id = Step.objects.filter(trajectory=trajectory).order_by("index").first().pk  # type: ignore[union-attr]
    record = ProjectDeletion.objects.create(project=project, slug=project.slug, name=project.name)
    statements: list[str] = []

    def late_writer(execute: Callable[..., Any], sql: str, *rest: Any) -> Any:
        # Between the deletion of the steps' scores and of the steps themselves, another
        # connection stores a score on one of them, as only the first try sees it.
        statements.append(sql)
        if sql.startswith(STEP_DELETE) and statements.count(sql) == 1:
            score_from_another_connection(scorer, step_id)
        return execute(sql, *rest)

    with connection.execute_wrapper(late_writer):
        project_deletion_run(deletion_id=record.pk)

    record.refresh_from_db()
    assert record.status == ProjectDeletion.Status.DONE, record.error
    step_deletes = [sql for sql in statements if sql.startswith(STEP_DELETE)]
    assert len(step_deletes) == 2  # the batch was tried twice
    assert not Project.objects.filter(pk=project.pk).exists()
    assert not StepScore.objects.filter(step_id=step_id).exists()
    assert record.removed_steps == 3
    # The score written meanwhile is counted with the rest of what went.
    assert record.removed[deletion._label(StepScore)] == 1


def test_a_batch_that_keeps_failing_fails_the_deletion_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = User.objects.create_user("owner")
    project = project_create(slug="doomed", name="Doomed", owner=owner)
    trajectory = trajectory_with_steps(project, ["a"])
    # A scorer per try: a second score of the same scorer would wait on the batch's
    # uncommitted deletion of the first (the unique constraint), and the batch on it.
    scorers = [
        Scorer.objects.create(
            project=project, name=f"prm-{n}", kind="token-classification", model_ref="some/prm"
        )
        for n in range(2)
    ]
    step_id = Step.objects.get(trajectory=trajectory).pk
    record = ProjectDeletion.objects.create(project=project, slug=project.slug, name=project.name)
    monkeypatch.setattr(deletion, "BATCH_TRIES", 2)
    tries: list[str] = []

    def always_late(execute: Callable[..., Any], sql: str, *rest: Any) -> Any:
        if sql.startswith(STEP_DELETE):
            score_from_another_connection(scorers[len(tries)], step_id)
            tries.append(sql)
        return execute(sql, *rest)

    with connection.execute_wrapper(always_late), pytest.raises(Exception, match="foreign key"):
        project_deletion_run(deletion_id=record.pk)

    assert len(tries) == 2
    record.refresh_from_db()
    assert record.status == ProjectDeletion.Status.FAILED
    assert "IntegrityError" in record.error
    # Nothing of the failed batch went: the trajectory and its step are still there.
    assert Step.objects.filter(pk=step_id).exists()
