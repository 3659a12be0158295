"""Queues per schema: a queue names the step schemas it asks for (none: every active
one, as before); its annotators' pages offer those and their progress counts labels
under them; an unknown name is refused naming it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import LabelSchema, Queue
from labeling.services import LabelingError, label_schema_create, queue_create, step_label_set
from tests.labeling.conftest import leased_state, step_at
from trajectories.models import Project, Trajectory
from trajectories.selection import TrajectoryFilters

pytestmark = pytest.mark.django_db
SEVERITY = [
    {"value": 1, "name": "minor", "key": "7"},
    {"value": 2, "name": "major", "key": "8"},
]


@pytest.fixture
def severity(project: Project, schema: LabelSchema) -> LabelSchema:
    return label_schema_create(project=project, name="severity", kind="ordinal", values=SEVERITY)


def make_queue(project: Project, owner: User, name: str, schemas: list[str] | None) -> Queue:
    return queue_create(
        project=project,
        name=name,
        created_by=owner,
        filters=TrajectoryFilters(),
        schemas=schemas,
    )


def test_an_unknown_schema_is_refused_naming_it(
    project: Project, owner: User, trajectory: Trajectory, severity: LabelSchema
) -> None:
    with pytest.raises(LabelingError) as refused:
        make_queue(project, owner, "Severity", ["severity", "tone"])
    assert refused.value.field == "schemas"
    assert "'tone' is no active label schema of this project" in refused.value.message
    assert "(active: severity, step quality)" in refused.value.message
    assert not Queue.objects.filter(name="Severity").exists()


def test_a_queue_asking_for_one_schema_offers_and_counts_only_it(
    project: Project,
    owner: User,
    annotator: User,
    trajectory: Trajectory,
    schema: LabelSchema,
    severity: LabelSchema,
) -> None:
    queue = make_queue(project, owner, "Severity", ["severity"])
    assert queue.schemas == ["severity"]
    mine = leased_state(annotator, queue)
    assert [s.name for s in mine.schemas] == ["severity"]
    assert mine.schema == severity
    assert (mine.done, mine.to_label) == (0, 5)
    # A schema the queue does not ask for is refused, naming the queue's.
    with pytest.raises(LabelingError) as refused:
        step_label_set(state=mine, step=step_at(trajectory, 0), schema_id=schema.pk, value=1)
    assert refused.value.message == "Queue 'Severity' asks for severity; not for 'step quality'."
    step_label_set(state=mine, step=step_at(trajectory, 1), schema_id=severity.pk, value=2)
    again = leased_state(annotator, queue)
    assert (again.done, again.to_label) == (1, 5)


def test_a_queue_asking_for_two_schemas_counts_a_label_per_step_and_schema(
    client: Client,
    project: Project,
    owner: User,
    annotator: User,
    trajectory: Trajectory,
    schema: LabelSchema,
    severity: LabelSchema,
) -> None:
    queue = make_queue(project, owner, "Both", ["severity", "step quality"])
    mine = leased_state(annotator, queue)
    # The queue's order: severity first.
    assert [s.name for s in mine.schemas] == ["severity", "step quality"]
    step = step_at(trajectory, 0)
    step_label_set(state=mine, step=step, schema_id=schema.pk, value=1)
    step_label_set(state=mine, step=step, schema_id=severity.pk, value=1)
    again = leased_state(annotator, queue)
    assert (again.done, again.to_label) == (2, 10)
    client.force_login(annotator)
    page = client.get(
        reverse("trajectory-detail", args=[trajectory.pk]) + f"?queue={queue.pk}"
    ).content.decode()
    assert "asks for: severity, step quality" in page
    assert "labels (severity, step quality)" in page


def test_a_queue_naming_no_schema_asks_for_all_as_before(
    project: Project,
    owner: User,
    annotator: User,
    trajectory: Trajectory,
    schema: LabelSchema,
    severity: LabelSchema,
) -> None:
    queue = make_queue(project, owner, "All", None)
    assert queue.schemas == []
    mine = leased_state(annotator, queue)
    assert [s.name for s in mine.schemas] == ["step quality", "severity"]
    # Progress follows the first schema, as it always has.
    step_label_set(state=mine, step=step_at(trajectory, 0), schema_id=severity.pk, value=1)
    step_label_set(state=mine, step=step_at(trajectory, 1), schema_id=schema.pk, value=1)
    again = leased_state(annotator, queue)
    assert (again.done, again.to_label) == (1, 5)


def test_the_queue_form_takes_schemas(
    client: Client, project: Project, owner: User, trajectory: Trajectory, severity: LabelSchema
) -> None:
    client.force_login(owner)
    response = client.post(
        reverse("queue-create", args=[project.slug]),
        {"name": "Sev", "overlap": 1, "lease_minutes": 30, "schemas": ["severity"]},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    queue = Queue.objects.get(name="Sev")
    assert queue.schemas == ["severity"]
    detail = client.get(reverse("queue-detail", args=[queue.pk])).content.decode()
    assert 'id="queue-schemas"' in detail and ">severity<" in detail
