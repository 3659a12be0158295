"""The status page's queue depths: a queue nothing has declared yet holds nothing (0), and
no longer makes every depth unknown ("—")."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from stepscope.health import QUEUES, queue_depths

pytestmark = pytest.mark.django_db


def test_every_queue_has_a_depth_while_the_broker_answers(client: Client) -> None:
    # This test run's broker keys are its own: no worker has declared the gpu queue.
    depths = queue_depths()
    assert set(depths) == set(QUEUES)
    assert all(isinstance(depth, int) for depth in depths.values()), depths
    staff = User.objects.create_user("ops", password="pw-ops-123456", is_staff=True)
    client.force_login(staff)
    page = client.get(reverse("admin-status")).content.decode()
    row = page.split('id="queue-gpu"')[1].split("</tr>")[0]
    assert "—" not in row
