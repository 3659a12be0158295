"""Deleting a project stops its jobs first (imports, exports, scoring and attribution
runs, rollouts: every kind with a status), says what it stopped, and keeps the slug
taken until the last row is gone, with an error that says why."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from exports.models import ExportJob
from scoring import services as scoring
from scoring.models import AttributionRun, Scorer, ScoringRun
from tests.factories import trajectory_with_steps
from trajectories.models import ImportBatch, Project, ProjectDeletion
from trajectories.services import (
    SlugTaken,
    import_batch_run,
    project_create,
    project_delete_start,
    project_deletion_run,
)

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def jobs_of(project: Project, owner: User) -> dict[str, object]:
    """A queued scoring run (through its service), a running attribution run, a queued
    import and export, and a scoring run that finished."""
    trajectory_with_steps(project, ["a", "b"])
    scorer = Scorer.objects.create(
        project=project, name="prm", kind="token-classification", model_ref="some/prm"
    )
    return {
        "scoring": scoring.scoring_run_start(project=project, scorer=scorer, user=owner),
        "attribution": AttributionRun.objects.create(
            project=project, method="returns", status="running"
        ),
        "import": ImportBatch.objects.create(
            project=project, file_name="a.jsonl", source_format="jsonl", status="queued"
        ),
        "export": ExportJob.objects.create(
            project=project, format="rl", label_source="human:majority", neutral="skip"
        ),
        "finished": ScoringRun.objects.create(project=project, scorer=scorer, status="done"),
    }


def test_deleting_a_project_cancels_its_queued_and_running_jobs(
    project: Project, owner: User
) -> None:
    jobs = jobs_of(project, owner)
    other = project_create(slug="other", name="Other", owner=owner)
    untouched = ImportBatch.objects.create(
        project=other, file_name="b.jsonl", source_format="jsonl", status="queued"
    )

    deletion = project_delete_start(project=project, actor=owner, confirm="demo")

    for name in ("scoring", "attribution", "import", "export"):
        job = jobs[name]
        job.refresh_from_db()  # type: ignore[attr-defined]
        assert job.status == "cancelled", name  # type: ignore[attr-defined]
        assert job.finished_at is not None, name  # type: ignore[attr-defined]
    finished = jobs["finished"]
    finished.refresh_from_db()  # type: ignore[attr-defined]
    assert finished.status == "done"  # type: ignore[attr-defined]
    untouched.refresh_from_db()
    assert untouched.status == "queued"
    assert deletion.cancelled == {"import": 1, "export": 1, "scoring": 1, "attribution": 1}
    # Their tasks, delivered now, do nothing: the scoring run plans no chunk, the import
    # writes no trajectory.
    run = jobs["scoring"]
    scoring.scoring_run_plan(run_id=run.pk)  # type: ignore[attr-defined]
    assert not ScoringRun.objects.get(pk=run.pk).chunks.exists()  # type: ignore[attr-defined]
    assert import_batch_run(batch_id=jobs["import"].pk).status == "cancelled"  # type: ignore[attr-defined]
    # The deletion's page and the API say what was stopped.
    page = signed_in(owner).get(reverse("project-deletion", args=[deletion.pk])).content.decode()
    assert 'id="deletion-cancelled"' in page
    assert "1 scoring job" in page and "1 import job" in page
    followed = api_for(owner).get(f"/api/v1/project-deletions/{deletion.pk}/").json()
    assert followed["cancelled"]["export"] == 1


def test_the_slug_stays_taken_while_the_project_is_being_deleted(owner: User) -> None:
    project = project_create(slug="doomed", name="Doomed", owner=owner)
    trajectory_with_steps(project, ["a"])
    deletion = project_delete_start(project=project, actor=owner, confirm="doomed")

    with pytest.raises(SlugTaken, match="being deleted"):
        project_create(slug="doomed", name="Again", owner=owner)
    page = signed_in(owner).post(reverse("project-list"), {"name": "Again", "slug": "doomed"})
    assert page.status_code == 200
    assert page.context["form"].errors["slug"] == [
        "The slug 'doomed' belongs to a project that is being deleted; it is free once the"
        " deletion finishes."
    ]
    api = api_for(owner).post("/api/v1/projects/", {"name": "Again", "slug": "doomed"})
    assert api.status_code == 400 and "being deleted" in api.json()["slug"][0]
    assert Project.objects.filter(slug="doomed").count() == 1

    project_deletion_run(deletion_id=deletion.pk)

    assert ProjectDeletion.objects.get(pk=deletion.pk).status == "done"
    again = api_for(owner).post("/api/v1/projects/", {"name": "Again", "slug": "doomed"})
    assert again.status_code == 201, again.content
    assert Project.objects.get(slug="doomed").name == "Again"


def test_a_slug_in_use_still_says_so(project: Project, owner: User) -> None:
    api = api_for(owner).post("/api/v1/projects/", {"name": "X", "slug": "demo"})
    assert api.status_code == 400
    assert api.json()["slug"] == ["A project with the slug 'demo' exists already; choose another."]
    # The project's own PATCH keeps its slug without tripping over itself.
    patched = api_for(owner).patch("/api/v1/projects/demo/", {"slug": "demo", "name": "Y"})
    assert patched.status_code == 200, patched.content
