"""Queues name span schemas as they name step schemas: the form and the service take
them, an unknown name is refused naming it, the queue's annotators are offered only
those, and progress counts a trajectory done for one when it has a span of it or is
submitted (the page and the API say so)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import LabelSchema, Queue, SpanSchema
from labeling.selectors import queue_span_progress
from labeling.services import (
    LabelingError,
    queue_create,
    span_label_set,
    span_schema_save,
    trajectory_submit,
)
from tests.factories import trajectory_with_steps
from tests.labeling.conftest import STEP_TEXTS, leased_state
from tests.labeling.test_api import token_client
from trajectories.models import Project, Trajectory
from trajectories.selection import TrajectoryFilters

pytestmark = pytest.mark.django_db


@pytest.fixture
def triage(project: Project) -> SpanSchema:
    return span_schema_save(project=project, name="triage")


@pytest.fixture
def patterns(project: Project) -> SpanSchema:
    return span_schema_save(
        project=project, name="patterns", values=[{"value": "loop", "key": "7"}]
    )


def make_queue(project: Project, owner: User, span_schemas: list[str] | None) -> Queue:
    return queue_create(
        project=project,
        name="Spans",
        created_by=owner,
        filters=TrajectoryFilters(),
        span_schemas=span_schemas,
    )


def test_an_unknown_span_schema_is_refused_naming_it(
    project: Project, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    with pytest.raises(LabelingError) as refused:
        make_queue(project, owner, ["triage", "tone"])
    assert refused.value.field == "span_schemas"
    assert "'tone' is no active span schema of this project (active: triage)" in (
        refused.value.message
    )
    assert not Queue.objects.filter(name="Spans").exists()


def test_progress_counts_a_span_of_the_schema_or_a_submit(
    project: Project,
    owner: User,
    annotator: User,
    annotator2: User,
    schema: LabelSchema,
    trajectory: Trajectory,
    triage: SpanSchema,
    patterns: SpanSchema,
) -> None:
    trajectory_with_steps(project, STEP_TEXTS, external_id="pears")
    queue = make_queue(project, owner, ["triage"])
    assert queue.span_schemas == ["triage"]
    first = leased_state(annotator, queue)
    second = leased_state(annotator2, queue)
    assert first.trajectory.pk != second.trajectory.pk
    [before] = queue_span_progress(queue, annotator)
    assert (before.schema, before.items, before.done, before.mine) == ("triage", 2, 0, 0)
    # A span of another schema is refused in this queue and counts nothing.
    with pytest.raises(LabelingError, match="Queue 'Spans' asks for spans of triage; not of"):
        span_label_set(state=first, schema="patterns", start=0, end=1, value="loop")
    span_label_set(state=first, schema="triage", start=0, end=1, value="regression")
    [after_span] = queue_span_progress(queue, annotator)
    assert (after_span.done, after_span.mine) == (1, 1)
    # The other annotator submits with no span: their trajectory is done too.
    trajectory_submit(state=second, finish_reason="give_up")
    [mine] = queue_span_progress(queue, annotator)
    [theirs] = queue_span_progress(queue, annotator2)
    assert (mine.done, mine.mine, theirs.mine) == (2, 1, 1)


def test_the_form_takes_span_schemas_and_the_pages_and_api_show_progress(
    client: Client,
    project: Project,
    owner: User,
    annotator: User,
    trajectory: Trajectory,
    triage: SpanSchema,
    patterns: SpanSchema,
) -> None:
    client.force_login(owner)
    form = client.get(reverse("queue-create", args=[project.slug])).content.decode()
    assert 'name="span_schemas" value="patterns"' in form
    response = client.post(
        reverse("queue-create", args=[project.slug]),
        {"name": "Spans", "overlap": 1, "lease_minutes": 30, "span_schemas": ["patterns"]},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    queue = Queue.objects.get(name="Spans")
    assert queue.span_schemas == ["patterns"]
    mine = leased_state(annotator, queue)
    span_label_set(state=mine, schema="patterns", start=2, end=3, value="loop")
    detail = client.get(reverse("queue-detail", args=[queue.pk])).content.decode()
    assert "1 / 1" in detail and "done for spans of patterns (0 by you)" in detail
    api = token_client(annotator).get(reverse("api-queue-detail", args=[queue.pk])).json()
    assert api["span_schemas"] == ["patterns"]
    assert api["span_progress"] == [{"schema": "patterns", "items": 1, "done": 1, "mine": 1}]
    # The queue's annotator is offered only the queue's span schema on the page.
    client.force_login(annotator)
    panel = client.get(
        reverse("trajectory-spans", args=[trajectory.pk]) + f"?queue={queue.pk}",
        headers={"HX-Request": "true"},
    ).content.decode()
    assert "loop" in panel and "decisive progress" not in panel


def test_the_form_refuses_an_unknown_span_schema(
    client: Client, project: Project, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    client.force_login(owner)
    response = client.post(
        reverse("queue-create", args=[project.slug]),
        {"name": "Spans", "overlap": 1, "lease_minutes": 30, "span_schemas": ["tone"]},
    )
    assert response.status_code == 200
    assert "tone is not one of the available choices" in response.content.decode()
    assert not Queue.objects.filter(name="Spans").exists()
