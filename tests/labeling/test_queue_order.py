"""Queues in "most uncertain first" order: annotators lease the trajectories whose
unlabelled steps the latest trained head is least sure of first, still with SKIP LOCKED
leases (each annotator a different item at once)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import LabelSchema, Queue, StepLabel
from labeling.services import (
    queue_create,
    queue_item_take,
    queue_order_set,
    queue_uncertainty_refresh,
)
from scoring import prm
from scoring.models import Scorer, StepScore
from tests.factories import UserFactory, trajectory_with_steps
from tests.labeling.test_concurrency import at_once, members, take
from trajectories.models import Project, Trajectory
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

STEPS = [
    "Janet has 16 eggs and eats 3, so 16 - 3 = 13 remain.",
    "She bakes with 4, leaving 13 - 4 = 9 eggs.",
    "She sells 9 eggs at $2 each for 9 * 2 = 18 dollars.",
]


def head(project: Project, revision: str) -> Scorer:
    return Scorer.objects.create(
        project=project,
        name="head",
        kind=prm.TRAINED_HEAD,
        revision=revision,
        artifact={"head": {"weights": [0.0]}},
    )


def scored(project: Project, scorer: Scorer, scores: list[list[float]]) -> list[Trajectory]:
    """One trajectory per list of step scores (an empty list: no score at all)."""
    trajectories = []
    for values in scores:
        trajectory = trajectory_with_steps(project, STEPS[: max(len(values), 2)])
        for step, value in zip(trajectory.steps.order_by("index"), values, strict=False):
            StepScore.objects.create(step=step, scorer=scorer, value=value)
        trajectories.append(trajectory)
    return trajectories


def leased_in_turn(queue: Queue, annotators: list[User]) -> list[int | None]:
    out = []
    for user in annotators:
        assignment = queue_item_take(queue=queue, annotator=user)
        out.append(assignment.item.trajectory_id if assignment else None)
    return out


@pytest.mark.django_db
def test_the_least_certain_trajectory_is_leased_first(project: Project) -> None:
    scorer = head(project, "1")
    # Most uncertain step per trajectory: 0.4, 0.02, 0.2, none scored.
    sure, unsure, middling, unscored = scored(
        project, scorer, [[0.9, 0.95], [0.1, 0.52], [0.3, 0.8], []]
    )
    users = [UserFactory.create(username=f"a{n}") for n in range(5)]
    queue = queue_create(
        project=project,
        name="uncertain",
        created_by=None,
        filters=TrajectoryFilters(),
        order=Queue.Order.UNCERTAIN,
    )
    expected = [unsure.pk, middling.pk, sure.pk, unscored.pk, None]
    assert leased_in_turn(queue, users) == expected
    plain = queue_create(
        project=project, name="plain", created_by=None, filters=TrajectoryFilters()
    )
    assert leased_in_turn(plain, users[:4]) == [sure.pk, unsure.pk, middling.pk, unscored.pk]


@pytest.mark.django_db
def test_labelled_steps_and_newer_heads_change_the_ranking(project: Project) -> None:
    old = head(project, "1")
    first, second = scored(project, old, [[0.45, 0.9], [0.35, 0.9]])
    queue = queue_create(
        project=project,
        name="q",
        created_by=None,
        filters=TrajectoryFilters(),
        order=Queue.Order.UNCERTAIN,
    )
    ranks = dict(queue.items.values_list("trajectory_id", "uncertainty"))
    assert ranks == pytest.approx({first.pk: 0.05, second.pk: 0.15})
    # Once its uncertain step is labelled, the first trajectory is sure of the rest.
    step = first.steps.get(index=0)
    schema = LabelSchema.objects.get(project=project)
    StepLabel.objects.create(step=step, annotator=UserFactory.create(), schema=schema, value=1)
    queue_uncertainty_refresh(queue=queue)
    ranks = dict(queue.items.values_list("trajectory_id", "uncertainty"))
    assert ranks == pytest.approx({first.pk: 0.4, second.pk: 0.15})
    # A newer head revision is the one that ranks.
    new = head(project, "2")
    StepScore.objects.create(step=first.steps.get(index=1), scorer=new, value=0.5)
    queue_uncertainty_refresh(queue=queue)
    ranks = dict(queue.items.values_list("trajectory_id", "uncertainty"))
    assert ranks == {first.pk: 0.0, second.pk: None}
    assert leased_in_turn(queue, [UserFactory.create()]) == [first.pk]


@pytest.mark.django_db
def test_switching_a_queue_to_uncertain_ranks_it(project: Project) -> None:
    scorer = head(project, "1")
    _, unsure = scored(project, scorer, [[0.9], [0.5]])
    queue = queue_create(project=project, name="q", created_by=None, filters=TrajectoryFilters())
    assert not queue.items.filter(uncertainty__isnull=False).exists()
    queue_order_set(queue=queue, order=Queue.Order.UNCERTAIN)
    assert leased_in_turn(queue, [UserFactory.create()]) == [unsure.pk]


@pytest.mark.django_db
def test_the_queue_form_offers_the_order(project: Project, owner: User) -> None:
    scorer = head(project, "1")
    _, unsure = scored(project, scorer, [[0.9], [0.5]])
    client = Client()
    client.force_login(owner)
    url = reverse("queue-create", args=[project.slug])
    assert "most uncertain first" in client.get(url).content.decode()
    response = client.post(
        url, {"name": "teach", "overlap": 1, "lease_minutes": 30, "order": "uncertain"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    queue = Queue.objects.get(name="teach")
    assert queue.order == Queue.Order.UNCERTAIN
    detail = client.get(reverse("queue-detail", args=[queue.pk])).content.decode()
    assert "most uncertain first" in detail
    assert leased_in_turn(queue, [owner]) == [unsure.pk]


@pytest.mark.django_db(transaction=True)
def test_concurrent_annotators_get_different_items_in_uncertain_order() -> None:
    project = project_create(slug="conc", name="Concurrency")
    scorer = head(project, "1")
    trajectories = scored(project, scorer, [[0.5 + n / 20, 0.99] for n in range(8)])
    queue = queue_create(
        project=project,
        name="q",
        created_by=None,
        filters=TrajectoryFilters(),
        order=Queue.Order.UNCERTAIN,
    )
    users = members(project, 4)
    taken = at_once(*(take(queue, user) for user in users))
    # Four different items, and the four most uncertain ones.
    assert sorted(taken) == sorted(t.pk for t in trajectories[:4])
