"""Rolling out from a step in a real browser: headless Chromium against a live server and
a real Celery worker generating with a tiny causal LM. The owner opens a trajectory,
clicks "roll out from here" under a step, starts k continuations, and watches them
arrive in the panel (it polls while the job runs) with the step's Monte Carlo value;
labeling the step afterwards keeps the panel open."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse

from rollouts.models import Continuation, Policy, RolloutJob, StepMC
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.rollouts.conftest import arithmetic
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def test_roll_out_from_a_step_and_see_the_continuations_arrive(
    page: Any, live_server: Any, celery_worker: object, make_policy: Callable[..., Policy]
) -> None:
    project = project_create(slug="roll", name="Rollouts")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    trajectory = arithmetic(project, slip=2)
    step = trajectory.steps.get(index=1)
    policy = make_policy("tiny-browser", project=project)

    sign_in(page, live_server, "owner", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))

    # Every labelable step has the link; it opens the panel in place.
    assert page.locator(".step-rollouts-open").count() == trajectory.steps.count()
    panel = f"#step-rollouts-{step.pk}"
    page.locator(f"{panel} a.step-rollouts-open").click()
    page.wait_for_selector(f"{panel}.step-rollouts-panel")
    assert "no Monte Carlo value yet" in page.locator(panel).inner_text()
    page.select_option(f"{panel} select[name=policy]", str(policy.pk))
    page.fill(f"{panel} input[name=k]", "3")
    page.locator(f"{panel} button[type=submit]", has_text="Roll out").click()

    # The continuations appear as the worker finishes them, without a reload.
    page.wait_for_selector(f"{panel} .continuation >> nth=2", timeout=120_000)
    page.wait_for_selector(f"{panel} .mc-value", timeout=30_000)
    job = RolloutJob.objects.get()
    assert job.status == RolloutJob.Status.DONE, job.error
    assert (job.selection, job.k, job.done) == ({"step_ids": [step.pk]}, 3, 3)
    assert page.locator(f"{panel} .continuation").count() == 3
    for link in Continuation.objects.filter(branch__job=job):
        assert page.locator(f'{panel} a[href="/t/{link.trajectory_id}/"]').count() == 1
    value = StepMC.objects.get(step=step, policy=policy)
    shown = page.locator(f"{panel} .mc-value").inner_text()
    assert f"({value.successes}/3," in shown and "tiny-browser" in shown
    # Polling stopped with the job: no live region asks for more.
    assert page.locator(f"{panel} [hx-trigger='every 2s']").count() == 0

    # Labeling the step swaps its row; the open panel stays as it was.
    page.locator(f"#step-{step.pk} .label-button").first.click()
    page.wait_for_selector(f"#step-{step.pk}[data-value]")
    assert page.locator(f"{panel} .continuation").count() == 3
    assert re.search(r"MC · policy tiny-browser", page.locator(panel).inner_text())
