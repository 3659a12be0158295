"""The label API: the same rules as the pages (upsert, validation, leases, blind mode,
404 outside the user's projects), with token and session authentication."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from labeling.models import LabelSchema, Queue, StepLabel
from labeling.services import step_label_set
from tests.factories import ProjectFactory, trajectory_with_steps
from tests.labeling.conftest import leased_state, state, step_at
from trajectories.models import Project, Trajectory


def token_client(user: User) -> Client:
    token, _ = Token.objects.get_or_create(user=user)
    return Client(headers={"Authorization": f"Token {token.key}"})


def post(client: Client, **data: Any) -> Any:
    return client.post(reverse("label-list"), data, content_type="application/json")


def test_post_is_an_idempotent_upsert_of_your_own_label(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client = token_client(owner)
    step = step_at(trajectory, 2)
    created = post(client, step=step.pk, value=-1, schema=schema.pk, tags=["logic error"])
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["value"], body["annotator"], body["tags"], body["step_index"]) == (
        -1,
        "owner",
        ["logic error"],
        2,
    )
    again = post(client, step=step.pk, value=-1, schema=schema.pk)
    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    assert again.json()["tags"] == ["logic error"]  # not sent, so kept
    changed = post(client, step=step.pk, value=1, correction="")
    assert changed.status_code == 200 and changed.json()["value"] == 1
    assert StepLabel.objects.count() == 1


def test_bad_requests_get_clear_4xx_and_change_nothing(
    owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client = token_client(owner)
    step = step_at(trajectory, 0)
    assert post(client, step=step.pk, value=9).json() == {
        "detail": "9 is not a value of step quality v1; use one of -1 (bad), 0 (neutral), 1 (good)."
    }
    assert post(client, step=step.pk, value=9).status_code == 400
    assert post(client, step=step.pk).status_code == 400  # nothing to change on no label
    assert post(client, value=1).status_code == 400  # no step
    LabelSchema.objects.filter(pk=schema.pk).update(is_active=False)
    LabelSchema.objects.create(project=schema.project, values=schema.values, version=2)
    stale = post(client, step=step.pk, value=1, schema=schema.pk)
    assert stale.status_code == 409 and "now uses v2" in stale.json()["detail"]
    elsewhere = trajectory_with_steps(ProjectFactory.create(), ["x"])
    assert post(client, step=step_at(elsewhere, 0).pk, value=1).status_code == 404
    assert StepLabel.objects.count() == 0


def test_annotator_posts_within_a_lease_only(
    annotator: User, trajectory: Trajectory, queue: Queue
) -> None:
    client = token_client(annotator)
    step = step_at(trajectory, 0)
    refused = post(client, step=step.pk, value=1)
    assert refused.status_code == 403
    assert refused.json()["detail"] == "Take this trajectory from a queue to label it."
    leased_state(annotator, queue)
    assert post(client, step=step.pk, value=1, queue=queue.pk).status_code == 201


def test_list_filters_and_visibility(
    project: Project,
    owner: User,
    annotator: User,
    annotator2: User,
    trajectory: Trajectory,
    queue: Queue,
) -> None:
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    step_label_set(state=leased_state(annotator, queue), step=step_at(trajectory, 1), value=-1)
    step_label_set(state=leased_state(annotator2, queue), step=step_at(trajectory, 1), value=0)

    owner_client = token_client(owner)
    everything = owner_client.get(reverse("label-list")).json()["results"]
    assert len(everything) == 3
    only = owner_client.get(reverse("label-list"), {"annotator": "annotator", "value": "-1"}).json()
    assert [r["annotator"] for r in only["results"]] == ["annotator"]
    by_step = owner_client.get(reverse("label-list"), {"step": step_at(trajectory, 1).pk}).json()
    assert len(by_step["results"]) == 2
    per_trajectory = owner_client.get(reverse("trajectory-labels", args=[trajectory.pk])).json()
    assert [(r["step_index"], r["annotator"]) for r in per_trajectory] == [
        (0, "owner"),
        (1, "annotator"),
        (1, "annotator2"),
    ]

    # Blind mode: an annotator sees only their own until they submit.
    project.settings = {"blind_labeling": True}
    project.save()
    mine = token_client(annotator).get(reverse("label-list")).json()["results"]
    assert [r["annotator"] for r in mine] == ["annotator"]
    assert len(token_client(owner).get(reverse("label-list")).json()["results"]) == 3


def test_outsider_gets_404_or_nothing(owner: User, outsider: User, trajectory: Trajectory) -> None:
    label = step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 0), value=1)
    client = token_client(outsider)
    assert client.get(reverse("label-list")).json()["results"] == []
    assert client.get(reverse("label-detail", args=[label.label_id])).status_code == 404
    assert client.get(reverse("trajectory-labels", args=[trajectory.pk])).status_code == 404
    assert post(client, step=step_at(trajectory, 0).pk, value=-1).status_code == 404
    assert StepLabel.objects.get().value == 1


def test_schema_documents_the_label_endpoints(client: Client, owner: User) -> None:
    client.force_login(owner)
    schema = client.get(reverse("api-schema")).content.decode()
    assert "/api/v1/labels/" in schema
    assert "/api/v1/trajectories/{id}/labels/" in schema
