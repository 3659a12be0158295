"""``POST /labels/bulk/`` writes set-based: the statements a batch costs do not grow
with its labels, yet every label keeps what the one-label service does (history rows,
the majority, the verdict's first error), edits keep the value, and a batch with one bad
item (a step labelled twice, an edit of an unlabelled step, a correction on a step not
labelled as an error) writes nothing."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.models import LabelSchema, StepLabel, StepLabelEvent, StepMajority, TrajectoryLabel
from labeling.serializers import StepLabelSerializer
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
    # The round trips of a trajectory's labels with its submit (a test runs inside a
    # transaction: a savepoint pair stands for BEGIN and COMMIT): the token, the steps,
    # the state, the label upsert, the verdict refresh with the states' re-read, the
    # submit with its history marks, the webhooks, the answer's labels. Before the re-read
    # and the submit were sent together with what they follow, it was 14 (and 23 before
    # the batch was set-based).
    assert twenty_queries == 10, twenty_queries
    assert twenty.json()["created"] == 20
    labels = StepLabel.objects.filter(step__trajectory=long)
    assert labels.count() == 20
    events = StepLabelEvent.objects.filter(step__trajectory=long, pgh_label="insert")
    assert events.count() == 20
    assert StepMajority.objects.filter(step__trajectory=long).count() == 20
    verdict = TrajectoryLabel.objects.get(trajectory=long, annotator=owner)
    assert (verdict.status, verdict.first_error_index) == ("submitted", 19)


def test_a_batch_costs_the_same_statements_for_one_schema_as_for_two(
    owner: User, project: Project, schema: LabelSchema
) -> None:
    severity = label_schema_create(
        project=project, name="severity", kind="ordinal", values=SEVERITY
    )
    client = token_client(owner)
    short = trajectory_with_steps(project, [f"s{n}" for n in range(5)], external_id="short")
    long = trajectory_with_steps(project, [f"l{n}" for n in range(20)], external_id="long")
    one, one_queries = bulk(client, whole_trajectory(short, [1] * 5), submit=True)
    labels = [
        *whole_trajectory(long, [1] * 19 + [-1]),
        *(
            {"trajectory": long.pk, "index": n, "schema": severity.pk, "value": 2}
            for n in range(20)
        ),
    ]
    two, two_queries = bulk(client, labels, submit=True)
    assert (one.status_code, two.status_code) == (200, 200), two.content
    assert two_queries == one_queries
    assert two.json()["created"] == 40
    events = StepLabelEvent.objects.filter(step__trajectory=long)
    assert events.filter(pgh_label="insert").count() == 40
    # The submit turned every draft into a submitted label, in one history context.
    submits = events.filter(pgh_label="update", pgh_context__action="submit")
    assert submits.count() == 40
    majority = StepMajority.objects.filter(step__trajectory=long)
    assert set(majority.values_list("schema_name", "value")) == {
        (schema.name, -1),
        (schema.name, 1),
        ("severity", 2),
    }
    assert TrajectoryLabel.objects.get(trajectory=long).status == "submitted"


def test_a_batch_writes_what_one_label_at_a_time_writes(
    owner: User, project: Project, schema: LabelSchema
) -> None:
    """The same labels and submit, through ``/labels/`` one at a time and the finish
    button's endpoint on one trajectory, and through one batch on its twin: the same
    labels, history, majority and verdict, and the batch answers with each label as the
    label endpoints show it."""
    severity = label_schema_create(
        project=project, name="severity", kind="ordinal", values=SEVERITY
    )
    client = token_client(owner)
    texts = [f"step {n}" for n in range(6)]
    single = trajectory_with_steps(project, texts, external_id="single")
    batch = trajectory_with_steps(project, texts, external_id="batch")

    def items(trajectory: Trajectory) -> list[dict[str, Any]]:
        return [
            *(
                {"trajectory": trajectory.pk, "index": n, "value": 1 + n % 2, "schema": severity.pk}
                for n in range(6)
            ),
            {"trajectory": trajectory.pk, "index": 0, "value": 1, "time_spent_ms": 1200},
            {"trajectory": trajectory.pk, "index": 1, "value": 1, "rationale": "fine"},
            {"trajectory": trajectory.pk, "index": 2, "first_error": True, "tags": ["logic error"]},
            *({"trajectory": trajectory.pk, "index": n, "value": -1} for n in range(3, 6)),
        ]

    for item in items(single):
        step = single.steps.get(index=item.pop("index"))
        del item["trajectory"]
        assert post(client, "label-list", {"step": step.pk, **item}).status_code == 201
    verdict = {"outcome": "incorrect", "comment": "step 2"}
    assert post(client, "api-trajectory-submit", verdict, single.pk).status_code == 200
    response, _ = bulk(client, items(batch), submit=True, **verdict)
    assert response.status_code == 200, response.content

    def written(trajectory: Trajectory) -> dict[str, Any]:
        labels = StepLabel.objects.filter(step__trajectory=trajectory)
        events = StepLabelEvent.objects.filter(step__trajectory=trajectory)
        columns = ("step__index", "schema_id", "value", "tags", "rationale", "correction")
        return {
            "labels": sorted(
                labels.values_list(*columns, "status", "saw_model_scores", "time_spent_ms")
            ),
            "history": sorted(events.values_list("pgh_label", *columns, "status", "pgh_context")),
            "majority": sorted(
                StepMajority.objects.filter(step__trajectory=trajectory).values_list(
                    "step__index", "schema_name", "value"
                )
            ),
            "verdict": TrajectoryLabel.objects.filter(trajectory=trajectory).values(
                "status", "first_error_index", "finish_reason", "outcome", "comment", "flagged"
            )[0],
        }

    assert written(batch) == written(single)
    assert written(batch)["verdict"]["first_error_index"] == 2
    answered = response.json()
    shown = StepLabel.objects.in_bulk([row["id"] for row in answered["labels"]])
    expected = StepLabelSerializer([shown[row["id"]] for row in answered["labels"]], many=True)
    assert answered["labels"] == json.loads(json.dumps(expected.data, cls=DjangoJSONEncoder))
    assert answered["submitted"][0]["annotator"] == owner.username


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
