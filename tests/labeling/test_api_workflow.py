"""The label API finishes the job: submit a trajectory, work through a queue, set many
labels in one all-or-nothing request; with the labeling pages' rules (roles, leases,
blind mode, schema values, history rows), and the labels then count for the label
sources that read submitted labels."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from labeling.models import LabelSchema, Queue, StepLabel, StepLabelEvent, TrajectoryLabel
from labeling.sources import label_source_parse, label_source_sql
from tests.factories import ProjectFactory, trajectory_with_steps
from tests.labeling.conftest import STEP_TEXTS, step_at
from tests.labeling.test_api import token_client
from trajectories.models import Project, Trajectory


def post(client: Client, name: str, data: Any, *args: Any) -> Any:
    return client.post(reverse(name, args=list(args)), data, content_type="application/json")


def source_values(project: Project, source: str) -> dict[int, int]:
    """What a label source yields, step id to value, through the SQL that compare and
    exports run."""
    sql, params = label_source_sql(project, label_source_parse(source))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {int(step): int(value) for step, value in cursor.fetchall()}


def whole_trajectory(trajectory: Trajectory, values: list[int]) -> list[dict[str, Any]]:
    return [{"trajectory": trajectory.pk, "index": i, "value": v} for i, v in enumerate(values)]


def test_bulk_labels_then_submit_count_for_human_user_and_majority(
    project: Project, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client = token_client(owner)
    response = post(
        client, "label-bulk", {"labels": whole_trajectory(trajectory, [1, 1, -1, 0, 1])}
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["created"], body["updated"]) == (5, 0)
    assert [label["status"] for label in body["labels"]] == ["draft"] * 5
    # Drafts count for nobody yet.
    assert source_values(project, "human:owner") == {}

    submitted = post(client, "api-trajectory-submit", {"comment": "done"}, trajectory.pk)
    assert submitted.status_code == 200, submitted.json()
    assert submitted.json()["status"] == "submitted"
    # Step 2 is labelled bad: the first error, as the page would record it.
    assert submitted.json()["finish_reason"] == "found_error"
    assert submitted.json()["first_error_index"] == 2
    expected = {step_at(trajectory, i).pk: v for i, v in enumerate([1, 1, -1, 0, 1])}
    assert source_values(project, "human:owner") == expected
    assert source_values(project, "human:majority") == expected
    assert set(StepLabel.objects.values_list("status", flat=True)) == {"submitted"}
    # Every write left a history row (five inserts, five submit updates).
    assert StepLabelEvent.objects.filter(annotator=owner).count() == 10


def test_bulk_with_submit_finishes_each_trajectory_it_touches(
    project: Project, owner: User, trajectory: Trajectory
) -> None:
    second = trajectory_with_steps(project, ["a", "b"], external_id="second")
    labels = [
        *whole_trajectory(trajectory, [1, 1, 1, 1, 1]),
        {"step": step_at(second, 0).pk, "value": 1},
        {"step": step_at(second, 1).pk, "first_error": True, "tags": ["logic error"]},
    ]
    response = post(
        token_client(owner),
        "label-bulk",
        {"labels": labels, "submit": True, "outcome": "incorrect"},
    )
    assert response.status_code == 200, response.json()
    verdicts = {v["trajectory"]: v for v in response.json()["submitted"]}
    assert verdicts[second.pk]["finish_reason"] == "found_error"
    assert verdicts[second.pk]["first_error_index"] == 1
    assert verdicts[trajectory.pk]["outcome"] == "incorrect"
    assert TrajectoryLabel.objects.filter(status="submitted").count() == 2


def test_one_bad_item_refuses_the_batch_naming_index_and_field(
    owner: User, trajectory: Trajectory
) -> None:
    client = token_client(owner)
    labels = whole_trajectory(trajectory, [1, 1, 1, 9, 1])
    labels[1]["tags"] = ["no such tag"]
    labels.append({"trajectory": trajectory.pk, "index": 99, "value": 1})
    response = post(client, "label-bulk", {"labels": labels})
    assert response.status_code == 400
    errors = response.json()["labels"]
    assert set(errors) == {"1", "3", "5"}
    assert errors["3"] == {
        "value": "9 is not a value of step quality v1; use one of -1 (bad), 0 (neutral), 1 (good)."
    }
    assert errors["1"] == {"tags": "Unknown tag: no such tag."}
    assert errors["5"] == {"index": "No such step in your projects."}
    assert StepLabel.objects.count() == 0
    assert TrajectoryLabel.objects.count() == 0

    # Shape errors are named the same way, before anything is looked up.
    shaped = post(client, "label-bulk", {"labels": [{"step": 1, "valu": 1}, {"value": 1}]})
    assert shaped.status_code == 400
    assert shaped.json() == {
        "labels": {
            "0": {"valu": "Unknown field."},
            "1": {"step": "Give step, or trajectory and index."},
        }
    }
    assert post(client, "label-bulk", {"labels": [], "sumbit": True}).json() == {
        "sumbit": "Unknown field."
    }
    assert post(client, "label-bulk", {"labels": []}).json() == {
        "labels": "This list may not be empty."
    }


def test_label_values_are_taken_as_the_file_importers_take_them(
    owner: User, trajectory: Trajectory
) -> None:
    """``"1"``, ``1.0`` and ``true`` are not the integer 1: refused by the label API as
    the importers refuse them in a file, naming the item and the field."""
    client = token_client(owner)
    labels = whole_trajectory(trajectory, [1, 1, 1, 1, 1])
    labels[1]["value"] = "1"
    labels[2]["value"] = 1.0
    labels[4]["value"] = True
    response = post(client, "label-bulk", {"labels": labels})
    assert response.status_code == 400
    assert response.json() == {
        "labels": {
            "1": {"value": "expected int, got str"},
            "2": {"value": "expected int, got float"},
            "4": {"value": "expected int, got bool"},
        }
    }
    assert StepLabel.objects.count() == 0

    step = step_at(trajectory, 0).pk
    for value, kind in (("1", "str"), (1.0, "float"), (False, "bool")):
        single = post(client, "label-list", {"step": step, "value": value})
        assert single.status_code == 400
        assert single.json() == {"value": [f"expected int, got {kind}"]}
    assert StepLabel.objects.count() == 0
    assert post(client, "label-list", {"step": step, "value": -1}).status_code == 201


def test_submit_that_fails_rolls_back_the_labels_too(owner: User, trajectory: Trajectory) -> None:
    partial = whole_trajectory(trajectory, [1, 1])
    response = post(token_client(owner), "label-bulk", {"labels": partial, "submit": True})
    assert response.status_code == 400
    assert response.json() == {
        "submit": {
            str(trajectory.pk): "3 steps still need a label. Label them, or finish with"
            " \u201cgive up\u201d or \u201cbad problem\u201d."
        }
    }
    assert StepLabel.objects.count() == 0


def test_annotator_works_a_queue_through_the_api_in_blind_mode(
    project: Project, annotator: User, annotator2: User, trajectory: Trajectory, queue: Queue
) -> None:
    project.settings = {"blind_labeling": True}
    project.save(update_fields=["settings"])
    client = token_client(annotator)
    refused = post(client, "label-bulk", {"labels": whole_trajectory(trajectory, [1] * 5)})
    assert refused.status_code == 403
    assert refused.json()["labels"]["0"] == {
        "step": "Take this trajectory from a queue to label it."
    }

    assert client.get(reverse("api-queue-lease", args=[queue.pk])).json() == {"lease": None}
    lease = post(client, "api-queue-next", {}, queue.pk).json()["lease"]
    assert lease["trajectory"] == trajectory.pk and lease["status"] == "leased"
    # Asked again before submitting, the same lease comes back.
    assert post(client, "api-queue-next", {}, queue.pk).json()["lease"]["id"] == lease["id"]
    assert client.get(reverse("api-queue-lease", args=[queue.pk])).json()["lease"] == lease

    # The other annotator's labels stay hidden until this one submits.
    other = token_client(annotator2)
    post(other, "api-queue-next", {}, queue.pk)
    labels = whole_trajectory(trajectory, [0] * 5)
    assert post(other, "label-bulk", {"labels": labels, "queue": queue.pk}).status_code == 200
    labels = whole_trajectory(trajectory, [1, 1, 1, 1, -1])
    done = post(client, "label-bulk", {"labels": labels, "queue": queue.pk})
    assert done.status_code == 200, done.json()
    seen = client.get(reverse("trajectory-labels", args=[trajectory.pk])).json()
    assert {row["annotator"] for row in seen} == {"annotator"}

    submitted = post(client, "api-queue-submit", {}, queue.pk)
    assert submitted.status_code == 200, submitted.json()
    seen = client.get(reverse("trajectory-labels", args=[trajectory.pk])).json()
    assert {row["annotator"] for row in seen} == {"annotator", "annotator2"}
    detail = client.get(reverse("api-queue-detail", args=[queue.pk])).json()
    assert detail["progress"] == {"items": 1, "complete": 0, "mine": 1}
    # Nothing left for this annotator; submitting again has no lease to submit.
    assert post(client, "api-queue-next", {}, queue.pk).json()["lease"] is None
    again = post(client, "api-queue-submit", {}, queue.pk)
    assert again.status_code == 400
    assert "no lease" in again.json()["detail"]


def test_skip_gives_the_lease_back(annotator: User, trajectory: Trajectory, queue: Queue) -> None:
    client = token_client(annotator)
    post(client, "api-queue-next", {}, queue.pk)
    assert post(client, "api-queue-skip", {}, queue.pk).json() == {"skipped": trajectory.pk}
    assert client.get(reverse("api-queue-lease", args=[queue.pk])).json() == {"lease": None}
    # A skipped item does not come back to the same annotator.
    assert post(client, "api-queue-next", {}, queue.pk).json()["lease"] is None
    late = post(client, "label-bulk", {"labels": [{"step": step_at(trajectory, 0).pk, "value": 1}]})
    assert late.status_code == 403


def test_queue_list_follows_assignees_and_membership(
    project: Project, owner: User, annotator: User, annotator2: User, outsider: User, queue: Queue
) -> None:
    queue.assignees.set([annotator2])

    def names(user: User) -> list[str]:
        listed = token_client(user).get(reverse("api-queue-list")).json()["results"]
        return [q["name"] for q in listed]

    assert names(owner) == ["Round 1"]
    assert names(annotator2) == ["Round 1"]
    assert names(annotator) == []
    assert names(outsider) == []
    assert (
        token_client(annotator).get(reverse("api-queue-detail", args=[queue.pk])).status_code == 404
    )
    assert post(token_client(outsider), "api-queue-next", {}, queue.pk).status_code == 404


def test_outsiders_and_other_projects_get_404_or_nothing(
    owner: User, outsider: User, trajectory: Trajectory
) -> None:
    elsewhere = trajectory_with_steps(ProjectFactory.create(), STEP_TEXTS)
    response = post(
        token_client(owner),
        "label-bulk",
        {"labels": [{"step": step_at(elsewhere, 0).pk, "value": 1}]},
    )
    assert response.status_code == 404
    assert response.json() == {"labels": {"0": {"step": "No such step in your projects."}}}
    client = token_client(outsider)
    assert post(client, "api-trajectory-submit", {}, trajectory.pk).status_code == 404
    refused = post(client, "label-bulk", {"labels": whole_trajectory(trajectory, [1] * 5)})
    assert refused.status_code == 404
    assert StepLabel.objects.count() == 0


def test_submit_needs_every_step_unless_giving_up(owner: User, trajectory: Trajectory) -> None:
    client = token_client(owner)
    refused = post(client, "api-trajectory-submit", {}, trajectory.pk)
    assert refused.status_code == 400 and "5 steps still need" in refused.json()["detail"]
    bad = post(client, "api-trajectory-submit", {"finish_reason": "bored"}, trajectory.pk)
    assert bad.status_code == 400 and "finish_reason" in bad.json()
    gave_up = post(client, "api-trajectory-submit", {"finish_reason": "give_up"}, trajectory.pk)
    assert gave_up.status_code == 200 and gave_up.json()["finish_reason"] == "give_up"


def test_single_label_post_refuses_unknown_fields(owner: User, trajectory: Trajectory) -> None:
    response = post(
        token_client(owner), "label-list", {"step": step_at(trajectory, 0).pk, "vlaue": 1}
    )
    assert response.status_code == 400
    assert response.json() == {"vlaue": ["Unknown field."]}
