"""Batches through the API and the pages: a version pinned by number, what changed
between two, and the refusals (unknown parameters, missing versions, outsiders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from exports.models import ExportBatch, ExportJob
from tests.exports.test_batches import export_into, label
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def versions(project: Project, owner: User) -> tuple[ExportJob, ExportJob]:
    first = trajectory_with_steps(project, ["a", "b"], external_id="first")
    label(first, 0, 1, owner)
    one = export_into(project, owner)
    label(first, 1, -1, owner)
    trajectory_with_steps(project, ["c"], external_id="second")
    two = export_into(project, owner)
    return one, two


def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_version_is_pinned_by_number(owner: User, versions: tuple[ExportJob, ExportJob]) -> None:
    one, two = versions
    client = api(owner)

    pinned = client.get("/api/v1/batches/rl-batch/versions/1/?project=demo")
    assert pinned.status_code == 200, pinned.content
    body = pinned.json()
    assert (body["ref"], body["export"], body["trajectories"], body["labels"]) == (
        "rl-batch@1",
        one.pk,
        1,
        1,
    )
    assert body["manifest"] == one.manifest
    assert [f["name"] for f in body["files"]] == [f["name"] for f in one.files]
    assert body["files"][0]["url"].endswith(f"/api/v1/exports/{one.pk}/files/trl-stepwise.jsonl/")
    assert client.get(body["files"][0]["url"]).status_code == 200

    latest = client.get("/api/v1/batches/rl-batch/versions/latest/?project=demo").json()
    assert (latest["version"], latest["export"]) == (2, two.pk)
    listed = client.get("/api/v1/batches/rl-batch/?project=demo").json()
    assert [v["ref"] for v in listed["versions"]] == ["rl-batch@2", "rl-batch@1"]
    assert client.get("/api/v1/batches/?project=demo").json()[0]["name"] == "rl-batch"
    # The export says which version it became.
    assert client.get(f"/api/v1/exports/{two.pk}/").json()["batch_version"] == 2

    missing = client.get("/api/v1/batches/rl-batch/versions/3/?project=demo")
    assert missing.status_code == 404 and "no version 3" in missing.json()["detail"]
    assert client.get("/api/v1/batches/other/versions/1/?project=demo").status_code == 404


def test_the_diff_through_the_api(owner: User, versions: tuple[ExportJob, ExportJob]) -> None:
    answer = api(owner).get("/api/v1/batches/rl-batch/diff/?project=demo&from=1&to=2")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["counts"] == {
        "trajectories": {"added": 1, "removed": 0, "changed": 0},
        "labels": {"added": 1, "removed": 0, "changed": 0},
    }
    assert [(c["external_id"], c["change"]) for c in body["trajectories"]] == [("second", "added")]
    assert [(c["index"], c["before"], c["after"]) for c in body["labels"]] == [(1, None, -1)]
    # Without from and to: the newest against the one before.
    default = api(owner).get("/api/v1/batches/rl-batch/diff/?project=demo").json()
    assert (default["from"], default["to"], default["counts"]) == (1, 2, body["counts"])


def test_refusals_name_the_parameter(
    owner: User, outsider: User, versions: tuple[ExportJob, ExportJob]
) -> None:
    client = api(owner)
    unknown = client.get("/api/v1/batches/rl-batch/?project=demo&verison=2")
    assert unknown.status_code == 400 and unknown.json() == {"verison": ["unknown parameter"]}
    no_project = client.get("/api/v1/batches/rl-batch/versions/1/")
    assert no_project.status_code == 400 and "project" in no_project.json()
    bad = client.get("/api/v1/batches/rl-batch/diff/?project=demo&from=first")
    assert bad.status_code == 400 and "from" in bad.json()
    gone = client.get("/api/v1/batches/rl-batch/diff/?project=demo&from=9")
    assert gone.status_code == 404
    refused = client.post(
        "/api/v1/exports/",
        {
            "project": "demo",
            "format": "trl-stepwise",
            "labels": "human:owner",
            "neutral": "positive",
            "batch": "rl batch",
        },
        format="json",
    )
    assert refused.status_code == 400 and "not a batch name" in refused.json()["batch"]
    assert ExportJob.objects.count() == 2

    # An outsider meets nothing: every batch route is a 404, as the project is.
    stranger = api(outsider)
    for path in (
        "/api/v1/batches/?project=demo",
        "/api/v1/batches/rl-batch/?project=demo",
        "/api/v1/batches/rl-batch/versions/1/?project=demo",
        "/api/v1/batches/rl-batch/diff/?project=demo",
    ):
        assert stranger.get(path).status_code == 404, path
    page = Client()
    page.force_login(outsider)
    assert page.get("/p/demo/batches/rl-batch/").status_code == 404


def test_annotators_of_a_blind_project_get_no_manifest_or_diff(
    project: Project, versions: tuple[ExportJob, ExportJob]
) -> None:
    project.settings = {**(project.settings or {}), "blind_labeling": True}
    project.save(update_fields=["settings"])
    annotator = UserFactory.create(username="blind-annotator")
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    client = api(annotator)
    version = client.get("/api/v1/batches/rl-batch/versions/2/?project=demo").json()
    assert version["version"] == 2 and version["manifest"] is None
    assert client.get("/api/v1/batches/rl-batch/diff/?project=demo").status_code == 403
    page = Client()
    page.force_login(annotator)
    shown = page.get("/p/demo/batches/rl-batch/").content.decode()
    assert 'id="batch-diff-hidden"' in shown and 'id="diff-labels"' not in shown


def test_the_batch_page_lists_versions_and_diffs_two(
    owner: User, versions: tuple[ExportJob, ExportJob]
) -> None:
    page = Client()
    page.force_login(owner)
    shown = page.get("/p/demo/batches/rl-batch/").content.decode()
    assert 'id="version-2"' in shown and 'id="version-1"' in shown
    assert 'id="diff-trajectories"' in shown and "second" in shown

    partial = page.get("/p/demo/batches/rl-batch/?from=2&to=1", headers={"HX-Request": "true"})
    text = partial.content.decode()
    assert partial.status_code == 200 and text.lstrip().startswith('<section id="batch-diff"')
    assert "@2 → @1" in text and "removed" in text

    wrong = page.get("/p/demo/batches/rl-batch/?from=7")
    assert wrong.status_code == 400
    assert "from and to must name two of them (got 7)" in wrong.content.decode()
    listed = page.get("/p/demo/batches/").content.decode()
    assert "rl-batch@2" in listed


def test_the_export_form_puts_an_export_into_a_batch(project: Project, owner: User) -> None:
    trajectory_with_steps(project, ["a"], external_id="only")
    page = Client()
    page.force_login(owner)
    form = {"format": "trl-stepwise", "labels": "human:owner", "neutral": "positive"}
    preview = page.get("/p/demo/exports/preview/", {**form, "batch": "nightly"})
    assert "version 1, pinned as" in preview.content.decode()
    bad = page.post("/p/demo/exports/", {**form, "batch": "night ly"})
    assert bad.status_code == 400 and "is not a batch name" in bad.content.decode()
    made = page.post("/p/demo/exports/", {**form, "batch": "nightly"})
    assert made.status_code == 302
    job = ExportJob.objects.get()
    assert job.batch == ExportBatch.objects.get(project=project, name="nightly")
    shown = page.get(made["Location"]).content.decode()
    assert "as its next version when it finishes" in shown
