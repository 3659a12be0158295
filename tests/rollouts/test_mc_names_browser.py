"""The two Monte Carlo values on the trajectory page, in a real browser, each named with
its source: "MC · task's rollouts" (an mc-prefix run over the project's own rollouts of
the task) and "MC · policy NAME" (a policy's continuations, as the demo's start-up
rollout jobs write them), the latter shown as a strip of its own and under the same name
in the step's rollout panel. At a laptop's and a phone's size."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from rollouts.models import Policy, StepMC
from scoring import services as scoring_services
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.scoring.test_attribution_runs import make_rollouts, run_to_completion
from tests.screens import WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_each_mc_value_says_where_it_comes_from(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="mc", name="MC")
    failed = make_rollouts(project)["A"]
    run_to_completion(scoring_services.attribution_run_start(project=project, method="mc-prefix"))
    policy = Policy.objects.create(name="demo-policy", model_ref="demo", project=project)
    steps = list(failed.steps.order_by("index"))
    for step, successes in zip(steps, [8, 0, 0], strict=True):
        StepMC.objects.create(
            step=step,
            policy=policy,
            k=8,
            successes=successes,
            soft=successes / 8,
            hard=successes > 0,
        )
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[failed.pk]))

    page.wait_for_selector("#mc-strip")
    assert "MC · task's rollouts" in page.inner_text("#evidence")
    page.wait_for_selector("#policy-mc:not([hidden])")
    assert "MC · policy demo-policy" in page.inner_text("#policy-mc")
    cells = page.eval_on_selector_all(
        "#policy-mc .score-cell", "cells => cells.map(c => c.getAttribute('title'))"
    )
    assert cells == ["step 0: 1.000", "step 1: 0.000", "step 2: 0.000"]
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"mc-names-{width}")

    # The step's rollout panel names the policy's value the same way.
    page.click(f"#step-rollouts-{steps[1].pk} .step-rollouts-open")
    page.wait_for_selector(f"#step-rollouts-{steps[1].pk}.step-rollouts-panel")
    assert "MC · policy demo-policy: 0.00" in page.inner_text(f"#step-rollouts-{steps[1].pk}")
