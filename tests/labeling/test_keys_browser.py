"""Keys that did less than the shortcuts said, in a real browser: after "Go to step N"
that step is current and a digit labels it (it typed into the box); ``s`` submits the
trajectory (it only focused the button); on the review page a final label's key moves on
to the next step, as a label's key does while labelling."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from labeling.models import FinalLabel, StepLabel, TrajectoryLabel
from labeling.selectors import STEPS_PAGE_SIZE
from labeling.services import queue_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.labeling.conftest import step_at
from tests.labeling.test_review import reviewed  # noqa: F401  (the fixture)
from tests.screens import shot
from trajectories.models import Membership, Step, Trajectory
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
VIEWPORTS = [(1440, 900), (390, 844)]


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_go_to_step_makes_it_current_and_s_submits(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="keys", name="Keys")
    steps_total = STEPS_PAGE_SIZE + 20
    trajectory = trajectory_with_steps(project, [f"Step {i}." for i in range(steps_total)])
    annotator = UserFactory.create(username="ann")
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    owner = UserFactory.create(username="boss")
    queue = queue_create(
        project=project, name="Round 1", created_by=owner, filters=TrajectoryFilters()
    )
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "ann", PASSWORD)
    page.goto(live_server.url + reverse("queue-detail", args=[queue.pk]))
    page.click("#queue-start button")
    page.wait_for_selector("[data-labeling]")

    target = Step.objects.get(trajectory=trajectory, index=STEPS_PAGE_SIZE + 5)
    page.click("#step-goto-index")
    page.keyboard.type(str(target.index))
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#step-{target.pk}.is-current")
    # The digit labels the step gone to instead of typing into the box.
    page.keyboard.press("3")
    page.wait_for_selector(f'#step-{target.pk}[data-value="1"]')
    assert page.input_value("#step-goto-index") == str(target.index)
    assert StepLabel.objects.get(annotator=annotator).step_id == target.pk
    shot(page, f"keys-goto-{width}")

    # s submits: with steps left, the refusal shows beside the button; with "give up"
    # chosen, the trajectory is submitted.
    page.keyboard.press("s")
    page.wait_for_selector("#finish-error:not(:empty)")
    page.select_option("#finish-reason", "give_up")
    page.click("#finish-comment")
    page.keyboard.press("Escape")
    page.keyboard.press("s")
    page.wait_for_selector("#finish-status")
    assert TrajectoryLabel.objects.get(annotator=annotator).finish_reason == "give_up"


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_a_final_label_key_moves_on_to_the_next_step(
    page: Any,
    live_server: Any,
    researcher: User,
    reviewed: Trajectory,  # noqa: F811
    viewport: tuple[int, int],
) -> None:
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("review-trajectory", args=[reviewed.pk]))
    first, second, third = (f"#review-{step_at(reviewed, i).pk}" for i in (0, 1, 2))
    page.click(f"{first} .review-content")
    page.wait_for_selector(f"{first}.is-current")
    page.keyboard.press("3")
    page.wait_for_selector(f'{first} button[data-key="3"][aria-pressed="true"]')
    page.wait_for_selector(f"{second}.is-current")
    page.keyboard.press("1")
    page.wait_for_selector(f'{second} button[data-key="1"][aria-pressed="true"]')
    page.wait_for_selector(f"{third}.is-current")
    finals = dict(FinalLabel.objects.values_list("step__index", "value"))
    assert finals == {0: 1, 1: -1}
    shot(page, f"keys-review-{width}")
