"""What the trajectories tests share: a researcher of the project (who may import)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, Project


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user
