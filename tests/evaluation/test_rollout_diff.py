"""Debugging a failed rollout against a success of the same task."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.factories import ProjectFactory, trajectory_with_steps
from trajectories.models import Project, Trajectory
from trajectories.services import imported_annotator

pytestmark = pytest.mark.django_db


def rollout(
    project: Project, contents: list[str], success: bool, task_key: str = "t1"
) -> Trajectory:
    return trajectory_with_steps(project, contents, success=success, task_key=task_key)


def test_default_partner_is_the_success_sharing_the_longest_prefix(
    client: Client, project: Project, owner: User
) -> None:
    failed = rollout(project, ["a", "b", "wrong", "bad answer"], success=False)
    rollout(project, ["x", "y", "z"], success=True)  # shares nothing
    best = rollout(project, ["a", "b", "right", "good answer"], success=True)
    rollout(project, ["a", "b", "c"], success=False)  # shares more but failed
    rollout(project, ["a", "b", "right", "good answer"], success=True, task_key="other")

    client.force_login(owner)
    page = client.get(f"/t/{failed.pk}/compare/")
    assert page.status_code == 200
    assert page.context["other"] == best
    assert page.context["matching"].divergence == 2
    assert len(page.context["shared_rows"]) == 2
    kinds = [kind for kind, _, _ in page.context["rows"]]
    assert kinds == ["changed", "changed"]
    assert b"is-divergence" in page.content


def test_first_errors_per_source_and_labels_hidden_from_annotators(
    client: Client, project: Project, owner: User, annotator: User
) -> None:
    from labeling.models import LabelSchema, StepLabel

    failed = rollout(project, ["a", "b", "wrong"], success=False)
    good = rollout(project, ["a", "b", "right"], success=True)
    schema = LabelSchema.objects.get(project=project)
    source = imported_annotator("truth")
    StepLabel.objects.create(
        step=failed.steps.get(index=2), annotator=source, schema=schema, value=-1
    )

    client.force_login(owner)
    page = client.get(f"/t/{failed.pk}/compare/?with={good.pk}")
    assert page.context["first_errors"] == [("import:truth", 2, None)]
    assert b"import:truth" in page.content

    client.force_login(annotator)
    page = client.get(f"/t/{failed.pk}/compare/?with={good.pk}")
    assert page.status_code == 200
    assert b"import:truth" not in page.content


def test_outsiders_and_other_projects_get_404(
    client: Client, project: Project, owner: User, outsider: User
) -> None:
    failed = rollout(project, ["a"], success=False)
    elsewhere = trajectory_with_steps(ProjectFactory.create(slug="else"), ["a"], success=True)
    client.force_login(outsider)
    assert client.get(f"/t/{failed.pk}/compare/").status_code == 404
    client.force_login(owner)
    assert client.get(f"/t/{failed.pk}/compare/?with={elsewhere.pk}").status_code == 404


def test_no_partner_says_so(client: Client, project: Project, owner: User) -> None:
    lonely = rollout(project, ["a"], success=False)
    client.force_login(owner)
    page = client.get(f"/t/{lonely.pk}/compare/")
    assert page.status_code == 200
    assert b"No other rollout" in page.content


def test_the_shared_prefix_is_counted_in_good_english(
    client: Client, project: Project, owner: User
) -> None:
    failed = rollout(project, ["a", "wrong"], success=False)
    one = rollout(project, ["a", "right"], success=True)
    client.force_login(owner)
    page = client.get(f"/t/{failed.pk}/compare/?with={one.pk}").content.decode()
    assert "the first step is identical" in page and "first 1 step" not in page
    longer = rollout(project, ["a", "b", "wrong"], success=False)
    two = rollout(project, ["a", "b", "right"], success=True)
    page = client.get(f"/t/{longer.pk}/compare/?with={two.pk}").content.decode()
    assert "the first 2 steps are identical" in page
