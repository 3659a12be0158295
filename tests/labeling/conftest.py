"""Fixtures for the labeling tests: more personas (a researcher, a second annotator), a
trajectory to label, a queue over it, and small helpers that act as one user."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from labeling.models import LabelSchema, Queue
from labeling.selectors import LabelingState, labeling_state_for_user
from labeling.services import queue_create, queue_item_take
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters

STEP_TEXTS = [
    "Let x be the number of apples.",
    "Then 3x + 2 = 11.",
    "So 3x = 9.",
    "Hence x = 4.",
    "The answer is 4.",
]


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user


@pytest.fixture
def annotator2(project: Project) -> User:
    user = UserFactory.create(username="annotator2")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    return user


@pytest.fixture
def schema(project: Project) -> LabelSchema:
    schema = project.label_schemas.get(is_active=True)
    schema.error_tags = ["calculation error", "logic error"]
    schema.save(update_fields=["error_tags"])
    return schema


@pytest.fixture
def trajectory(project: Project, schema: LabelSchema) -> Trajectory:
    return trajectory_with_steps(project, STEP_TEXTS, external_id="apples")


@pytest.fixture
def queue(project: Project, trajectory: Trajectory, owner: User) -> Queue:
    return queue_create(
        project=project, name="Round 1", created_by=owner, filters=TrajectoryFilters(), overlap=2
    )


def step_at(trajectory: Trajectory, index: int) -> Step:
    return Step.objects.get(trajectory=trajectory, index=index)


def state(user: User, trajectory: Trajectory, queue: Queue | None = None) -> LabelingState:
    return labeling_state_for_user(user, trajectory.pk, queue_id=queue.pk if queue else None)


def leased_state(user: User, queue: Queue) -> LabelingState:
    """Take the next item of ``queue`` for ``user`` and return their state on it."""
    assignment = queue_item_take(queue=queue, annotator=user)
    assert assignment is not None
    return labeling_state_for_user(user, assignment.item.trajectory_id, queue_id=queue.pk)
