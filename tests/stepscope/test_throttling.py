"""The per-user API rate counts small calls; bulk writes are counted on their own scope,
so a client pushing in bulk is not held to the per-user rate and does not spend it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from rest_framework.throttling import UserRateThrottle

from accounts.services import api_token_create
from tests.factories import trajectory_with_steps
from trajectories.models import Project

pytestmark = pytest.mark.django_db


def test_bulk_writes_do_not_count_against_the_user_rate(
    owner: User, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        UserRateThrottle,
        "THROTTLE_RATES",
        {"user": "3/minute", "anon": "3/minute", "bulk": "5/minute"},
    )
    cache.clear()
    trajectory = trajectory_with_steps(project, ["a", "b"])
    _, secret = api_token_create(user=owner, name="job")
    api = Client(headers={"Authorization": f"Token {secret}"})

    def push(n: int) -> int:
        records = [{"id": f"t{n}", "task": "2 + 2?", "steps": [{"content": "4"}]}]
        return api.post(
            "/api/v1/imports/",
            {"project": project.slug, "trajectories": records},
            content_type="application/json",
        ).status_code

    def label() -> int:
        items = [{"trajectory": trajectory.pk, "index": i, "value": 1} for i in range(2)]
        return api.post(
            "/api/v1/labels/bulk/", {"labels": items}, content_type="application/json"
        ).status_code

    # Five bulk writes, more than the user rate allows calls, and the reads still go.
    assert [push(0), push(1), label(), label(), push(2)] == [201, 201, 200, 200, 201]
    reads = [api.get("/api/v1/projects/").status_code for _ in range(4)]
    assert reads == [200, 200, 200, 429]
    # The bulk scope has a rate of its own.
    assert label() == 429
    cache.clear()
