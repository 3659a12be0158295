"""``POST /api/v1/exports/{id}/cancel/``, as the other job kinds have it: researchers and
admins stop a queued export, which a worker then leaves alone; annotators are refused,
outsiders get a 404; an ended export stays as it ended. And an export that fails says
why the one way every job kind does (``job_fail``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from exports.models import ExportJob
from exports.services import export_job_run
from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path


def api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def queued(project: Project, **fields: Any) -> ExportJob:
    values = {"format": "stepscope", "label_source": "human:majority", "neutral": "drop"}
    return ExportJob.objects.create(project=project, total=3, **{**values, **fields})


def test_a_researcher_cancels_a_queued_export_and_the_worker_leaves_it(
    project: Project, annotator: User, outsider: User, tmp_path: Path
) -> None:
    researcher = UserFactory.create(username="researcher")
    MembershipFactory.create(user=researcher, project=project, role=Membership.Role.RESEARCHER)
    job = queued(project)
    url = f"/api/v1/exports/{job.pk}/cancel/"

    assert api(outsider).post(url).status_code == 404
    refused = api(annotator).post(url)
    assert refused.status_code == 403 and "researcher or admin" in refused.json()["detail"]
    job.refresh_from_db()
    assert job.status == ExportJob.Status.QUEUED

    response = api(researcher).post(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["status"]) == (job.pk, "cancelled")
    assert body["finished_at"] is not None
    job.refresh_from_db()
    assert job.status == ExportJob.Status.CANCELLED and not job.is_active

    # The queued task, delivered after the cancel, writes nothing.
    assert export_job_run(job_id=job.pk).status == ExportJob.Status.CANCELLED
    assert not (tmp_path / "exports" / str(job.pk)).exists()
    job.refresh_from_db()
    assert (job.started_at, job.files, job.manifest) == (None, [], None)


def test_cancelling_an_ended_export_leaves_it_as_it_ended(project: Project, owner: User) -> None:
    done = queued(project, status=ExportJob.Status.DONE, row_count=7)
    response = api(owner).post(f"/api/v1/exports/{done.pk}/cancel/")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["row_count"]) == ("done", 7)
    done.refresh_from_db()
    assert done.status == ExportJob.Status.DONE and done.finished_at is None


def test_a_failed_export_says_why_and_when_it_started(project: Project, owner: User) -> None:
    # A row whose request was never written (no label source among its options): the
    # worker cannot resolve it.
    job = queued(project, options={})
    ran = export_job_run(job_id=job.pk)
    assert ran.status == ExportJob.Status.FAILED
    # The exception's type and message, as every job kind writes a failure.
    assert ran.error == "KeyError: 'labels'"
    assert ran.started_at is not None and ran.finished_at is not None
    assert ran.started_at <= ran.finished_at
    shown = api(owner).get(f"/api/v1/exports/{job.pk}/").json()
    assert (shown["status"], shown["error"]) == ("failed", ran.error)
