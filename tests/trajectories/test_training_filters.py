"""The list's filters and columns on RL training facts: policy version (exact and
range), training step range, advantage range, and advantage against the human label;
on the page (GET form), the API (400 naming a bad value) and saved selections."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.models import LabelSchema, StepLabel
from tests.factories import UserFactory, trajectory_with_steps
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import (
    TrajectoryFilters,
    VersionRange,
    policy_version_parse,
)
from trajectories.selection import selection_parse as trajectory_filters_from
from trajectories.selectors import trajectories_filtered

pytestmark = pytest.mark.django_db


def rollout(project: Project, name: str, version: str, step: int, advantage: float) -> Trajectory:
    trajectory = trajectory_with_steps(
        project,
        [f"{name} a", f"{name} b"],
        external_id=name,
        policy_version=version,
        training_step=step,
    )
    Step.objects.filter(trajectory=trajectory, index=1).update(advantage=advantage)
    return trajectory


@pytest.fixture
def rollouts(project: Project) -> dict[str, Trajectory]:
    return {
        "v2": rollout(project, "v2", "global_step_2", 2, 0.8),
        "v5": rollout(project, "v5", "5", 5, -0.4),
        "v9": rollout(project, "v9", "global_step_9", 9, 0.1),
        "plain": trajectory_with_steps(project, ["no facts"], external_id="plain"),
    }


def names(project: Project, **fields: object) -> set[str]:
    found = trajectories_filtered(project, TrajectoryFilters(**fields))  # type: ignore[arg-type]
    return set(found.values_list("external_id", flat=True))


def test_policy_version_exact_and_range(project: Project, rollouts: dict[str, Trajectory]) -> None:
    assert names(project, policy_version="5") == {"v5"}
    assert names(project, policy_version="global_step_9") == {"v9"}
    assert names(project, policy_version="2..5") == {"v2", "v5"}
    assert names(project, policy_version="6..") == {"v9"}
    assert names(project, policy_version="..2") == {"v2"}


def test_policy_version_range_syntax() -> None:
    assert policy_version_parse("3..7") == VersionRange(3, 7)
    assert policy_version_parse(" v1 ") == "v1"
    with pytest.raises(ValueError, match="neither end"):
        policy_version_parse("..")
    with pytest.raises(ValueError, match="backwards"):
        policy_version_parse("7..3")


def test_training_step_and_advantage_ranges(
    project: Project, rollouts: dict[str, Trajectory]
) -> None:
    assert names(project, min_training_step=3) == {"v5", "v9"}
    assert names(project, min_training_step=3, max_training_step=5) == {"v5"}
    assert names(project, min_advantage=0.5) == {"v2"}
    assert names(project, max_advantage=0.0) == {"v5"}
    assert names(project, min_advantage=0.0, max_advantage=0.5) == {"v9"}


def label(step: Step, annotator: User, value: int) -> None:
    schema, _ = LabelSchema.objects.get_or_create(
        project=step.trajectory.project, name="step quality"
    )
    StepLabel.objects.create(
        step=step,
        annotator=annotator,
        schema=schema,
        value=value,
        status=StepLabel.Status.SUBMITTED,
    )


def test_advantage_disagreeing_with_the_human_label(
    project: Project, rollouts: dict[str, Trajectory]
) -> None:
    alice = UserFactory.create(username="alice")
    # v2: positive advantage on a step people call wrong; v5: negative on one called
    # right; v9: positive advantage on a right step agrees.
    label(Step.objects.get(trajectory=rollouts["v2"], index=1), alice, -1)
    label(Step.objects.get(trajectory=rollouts["v5"], index=1), alice, 1)
    label(Step.objects.get(trajectory=rollouts["v9"], index=1), alice, 1)
    assert names(project, advantage_disagrees="yes") == {"v2", "v5"}


def test_list_page_filters_and_shows_the_columns(
    project: Project, annotator: User, rollouts: dict[str, Trajectory]
) -> None:
    client = Client()
    client.force_login(annotator)
    url = reverse("trajectory-list", args=[project.slug])
    html = client.get(url, {"policy_version": "2..5", "min_advantage": "0"}).content.decode()
    shown = set(re.findall(r'<tr id="trajectory-(\d+)"', html))
    assert shown == {str(rollouts["v2"].pk)}
    assert "global_step_2 · step 2" in html
    assert "+0.800" in html
    # The old name answers too; the error names the filter.
    bad = client.get(url, {"policy": "9..1"}).content.decode()
    assert "Policy version: policy version range &#x27;9..1&#x27; runs backwards" in bad


def test_api_filters_and_names_a_bad_value(
    project: Project, annotator: User, rollouts: dict[str, Trajectory]
) -> None:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=annotator).key}")
    found = api.get(
        "/api/v1/trajectories/",
        {"project": project.slug, "min_training_step": "4", "max_advantage": "0"},
    )
    assert [t["external_id"] for t in found.json()["results"]] == ["v5"]
    bad = api.get("/api/v1/trajectories/", {"project": project.slug, "min_advantage": "high"})
    assert bad.status_code == 400
    assert "min_advantage" in bad.json()


def test_selection_definitions_check_the_new_filters() -> None:
    assert trajectory_filters_from({"policy_version": "3..7", "min_advantage": 0.5}) == (
        TrajectoryFilters(policy_version="3..7", min_advantage=0.5)
    )
    with pytest.raises(ValueError, match="policy_version"):
        trajectory_filters_from({"policy_version": "7..3"})
    with pytest.raises(ValueError, match="advantage_disagrees"):
        trajectory_filters_from({"advantage_disagrees": "no"})
