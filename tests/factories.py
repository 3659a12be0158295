"""factory_boy factories for the models tests build by hand."""

from __future__ import annotations

import factory
from django.contrib.auth.models import User

from trajectories.formats.base import ParsedStep
from trajectories.hashing import prefix_hashes
from trajectories.models import Membership, Project, Step, Trajectory


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


class ProjectFactory(factory.django.DjangoModelFactory[Project]):
    class Meta:
        model = Project

    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.Sequence(lambda n: f"Project {n}")


class MembershipFactory(factory.django.DjangoModelFactory[Membership]):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    project = factory.SubFactory(ProjectFactory)
    role = Membership.Role.ANNOTATOR


class TrajectoryFactory(factory.django.DjangoModelFactory[Trajectory]):
    class Meta:
        model = Trajectory

    project = factory.SubFactory(ProjectFactory)
    external_id = factory.Sequence(lambda n: f"ext-{n}")
    source_format = "stepscope"
    task_key = factory.Sequence(lambda n: f"task-{n}")
    task = "What is 2 + 2?"
    content_hash = factory.Sequence(lambda n: f"{n:064x}")


def trajectory_with_steps(project: Project, contents: list[str], **fields: object) -> Trajectory:
    """A trajectory whose steps carry the given contents, with real prefix hashes."""
    trajectory = TrajectoryFactory.create(project=project, step_count=len(contents), **fields)
    parsed = [
        ParsedStep(kind="thought", role="assistant", content=c, labelable=True) for c in contents
    ]
    hashes = prefix_hashes(trajectory.task, parsed)
    Step.objects.bulk_create(
        Step(
            trajectory=trajectory,
            index=i,
            kind=s.kind,
            role=s.role,
            content=s.content,
            labelable=s.labelable,
            prefix_hash=h,
        )
        for i, (s, h) in enumerate(zip(parsed, hashes, strict=True))
    )
    return trajectory
