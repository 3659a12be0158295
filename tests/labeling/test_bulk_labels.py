"""``POST /labels/bulk/`` writes set-based: the statements a batch costs do not grow
with its labels, yet every label keeps what the one-label service does (history rows,
the majority, the verdict's first error), edits keep the value, and a batch with one bad
item (a step labelled twice, an edit of an unlabelled step, a correction on a step not
labelled as an error) writes nothing."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.models import LabelSchema, StepLabel, StepLabelEvent, StepMajority, TrajectoryLabel
from labeling.services import label_schema_create
from tests.factories import trajectory_with_steps
from tests.labeling.test_api import token_client
from tests.labeling.test_api_workflow import post, whole_trajectory
from trajectories.models import Project, Trajectory

SEVERITY = [{"value": 1, "name": "minor", "key": "7"}, {"value": 2, "name": "major", "key": "8"}]


def bulk(client: Any, labels: list[dict[str, Any]], **more: Any) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as queries:
        response = post(client, "label-bulk", {"labels": labels, **more})
    return response, len(queries.captured_queries)


def test_a_batch_costs_the_same_statements_for_5_labels_as_for_20(
    owner: User, project: Project, schema: LabelSchema
) -> None:
    client = token_client(owner)
    short = trajectory_with_steps(project, [f"s{n}" for n in range(5)], external_id="short")
    long = trajectory_with_steps(project, [f"l{n}" for n in range(20)], external_id="long")
    five, five_queries = bulk(client, whole_trajectory(short, [1] * 5), submit=True)
    twenty, twenty_queries = bulk(client, whole_trajectory(long, [1] * 19 + [-1]), submit=True)
    assert (five.status_code, twenty.status_code) == (200, 200), twenty.content
    assert twenty_queries == five_queries
    assert twenty.json()["created"] == 20
    labels = StepLabel.objects.filter(step__trajectory=long)
    assert labels.count() == 20
    events = StepLabelEvent.objects.filter(step__trajectory=long, pgh_label="insert")
    assert events.count() == 20
    assert StepMajority.objects.filter(step__trajectory=long).count() == 20
    verdict = TrajectoryLabel.objects.get(trajectory=long, annotator=owner)
    assert (verdict.status, verdict.first_error_index) == ("submitted", 19)


def test_two_schemas_and_an_edit_in_one_batch(
    owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    severity = label_schema_create(
        project=project, name="severity", kind="ordinal", values=SEVERITY
    )
    client = token_client(owner)
    labels = whole_trajectory(trajectory, [1, -1, 1, 1, 1])
    labels += [{"trajectory": trajectory.pk, "index": 1, "value": 2, "schema": severity.pk}]
    response, _ = bulk(client, labels)
    assert response.status_code == 200, response.content
    edit = [{"trajectory": trajectory.pk, "index": 1, "tags": ["logic error"]}]
    edited, _ = bulk(client, edit)
    assert edited.status_code == 200 and edited.json()["updated"] == 1
    second = StepLabel.objects.get(step__trajectory=trajectory, step__index=1, schema=schema)
    assert (second.value, second.tags) == (-1, ["logic error"])
    assert StepLabel.objects.get(schema=severity).value == 2


def test_one_bad_item_writes_nothing(owner: User, trajectory: Trajectory) -> None:
    client = token_client(owner)
    again = {"trajectory": trajectory.pk, "index": 0, "value": -1}
    twice = [*whole_trajectory(trajectory, [1, 1]), again]
    response, _ = bulk(client, twice)
    assert response.status_code == 400
    assert "in item 0 already" in response.json()["labels"]["2"]["step"]
    unlabelled = [
        *whole_trajectory(trajectory, [1]),
        {"trajectory": trajectory.pk, "index": 3, "rationale": "why"},
    ]
    response, _ = bulk(client, unlabelled)
    assert response.json()["labels"] == {
        "1": {"value": "Label step 3 first, then add to the label."}
    }
    wrong = [{"trajectory": trajectory.pk, "index": 0, "value": 1, "correction": "x"}]
    response, _ = bulk(client, wrong)
    assert list(response.json()["labels"]["0"]) == ["correction"]
    assert not StepLabel.objects.filter(step__trajectory=trajectory).exists()
