"""The labeling flow in a real browser: headless Chromium against a live server. An
annotator logs in, opens a queue and labels a whole trajectory with the keyboard only
(labels, undo, first-error mode, tags, rationale, correction, submit), then reloads and
finds every label stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import LabelSchema, Queue, StepLabel, TrajectoryLabel
from labeling.services import queue_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Step
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def test_annotator_labels_a_trajectory_with_the_keyboard_only(page: Any, live_server: Any) -> None:
    project = project_create(
        slug="kb", name="Keyboard", guidelines="# Be strict\nMark the *first* error."
    )
    schema = LabelSchema.objects.get(project=project)
    schema.first_error_mode = True
    schema.error_tags = ["calculation error", "logic error"]
    schema.save()
    annotator = UserFactory.create(username="ann")
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    owner = UserFactory.create(username="boss")
    trajectory = trajectory_with_steps(
        project,
        [
            "Solve 3x + 2 = 11 for x.",
            "Subtract 2: 3x = 9.",
            "Check the arithmetic: 11 - 2 = 9.",
            "Divide by 3: x = 4.",
            "Therefore x = 4.",
            "The answer is 4.",
        ],
    )
    Step.objects.filter(trajectory=trajectory, index=0).update(labelable=False, role="user")
    steps = {s.index: s for s in Step.objects.filter(trajectory=trajectory)}
    queue = queue_create(
        project=project, name="Round 1", created_by=owner, filters=TrajectoryFilters()
    )

    def row(index: int) -> str:
        return f"#step-{steps[index].pk}"

    def press(key: str) -> None:
        page.keyboard.press(key)

    def wait_current(index: int) -> None:
        page.wait_for_selector(f"{row(index)}.is-current")

    # Log in and open the queue.
    sign_in(page, live_server, "ann", PASSWORD)
    page.goto(live_server.url + reverse("queue-detail", args=[queue.pk]))
    page.click("#queue-start button")
    page.wait_for_selector("[data-labeling]")
    assert f"queue={queue.pk}" in page.url

    # The first labelable step is current; "3" labels it good and moves on.
    wait_current(1)
    press("3")
    page.wait_for_selector(f'{row(1)}[data-value="1"]')
    wait_current(2)
    press("2")
    page.wait_for_selector(f'{row(2)}[data-value="0"]')
    wait_current(3)
    # A slip: "1" (bad) in first-error mode ends the steps asked for...
    press("1")
    page.wait_for_selector(f'{row(3)}[data-value="-1"]')
    page.wait_for_selector(f"{row(4)}.after-first-error")
    # ...and "u" takes it back: the step is unlabelled again and the later steps return.
    press("u")
    page.wait_for_selector(f"{row(3)}:not([data-value])")
    wait_current(3)
    page.wait_for_selector(f"{row(4)}:not(.after-first-error)")
    press("3")
    page.wait_for_selector(f'{row(3)}[data-value="1"]')
    wait_current(4)
    # "f" marks the first error; step 5 is then not asked for.
    press("f")
    page.wait_for_selector(f'{row(4)}[data-value="-1"]')
    page.wait_for_selector(f"{row(5)}.after-first-error")
    page.wait_for_selector("#label-progress[data-first-error='4']")
    # Tags: "t" opens the editor on the tags; Space ticks the first, Enter saves.
    page.wait_for_function(
        "document.activeElement && document.activeElement.id === 'finish-submit'"
    )
    press("k")  # back from the finish panel to the steps
    press("j")
    wait_current(4)
    press("t")
    page.wait_for_selector(f"#step-editor-{steps[4].pk} input[name=tags]:focus")
    press("Space")
    press("Enter")
    page.wait_for_selector(f"{row(4)} .tags .tag")
    # Rationale and correction: type, then Ctrl+Enter.
    press("r")
    page.wait_for_selector(f"#step-editor-{steps[4].pk} textarea[name=rationale]:focus")
    page.keyboard.type("4 is wrong: 9 / 3 = 3.")
    press("Control+Enter")
    page.wait_for_selector(f"{row(4)} .rationale")
    press("c")
    page.wait_for_selector(f"#step-editor-{steps[4].pk} textarea[name=correction]:focus")
    page.keyboard.type("Divide by 3: x = 3.")
    press("Control+Enter")
    page.wait_for_selector(f"{row(4)} .correction")
    # "?" shows the shortcuts; Escape closes them.
    press("?")
    page.wait_for_selector("#shortcuts-dialog[open]")
    press("Escape")
    page.wait_for_selector("#shortcuts-dialog", state="hidden")
    # "s" submits the trajectory, as the shortcuts say.
    wait_current(4)
    press("s")
    page.wait_for_selector("#finish-status")

    # Reload: every label is there, in the page and in the database.
    page.reload()
    page.wait_for_selector("[data-labeling]")
    for index, value in [(1, "1"), (2, "0"), (3, "1"), (4, "-1")]:
        assert page.get_attribute(row(index), "data-value") == value
        pressed = page.get_attribute(
            f'{row(index)} button[name=value][value="{value}"]', "aria-pressed"
        )
        assert pressed == "true"
    assert page.get_attribute(row(5), "data-value") is None
    assert "after-first-error" in (page.get_attribute(row(5), "class") or "")
    assert "4 is wrong" in page.inner_text(row(4))

    labels = {
        label.step.index: label
        for label in StepLabel.objects.filter(annotator=annotator).select_related("step")
    }
    assert {i: label.value for i, label in labels.items()} == {1: 1, 2: 0, 3: 1, 4: -1}
    assert labels[4].tags == ["calculation error"]
    assert labels[4].rationale == "4 is wrong: 9 / 3 = 3."
    assert labels[4].correction == "Divide by 3: x = 3."
    assert {label.status for label in labels.values()} == {"submitted"}
    assert all(label.time_spent_ms is not None for label in labels.values())
    verdict = TrajectoryLabel.objects.get(annotator=annotator, trajectory=trajectory)
    assert (verdict.status, verdict.finish_reason, verdict.first_error_index) == (
        "submitted",
        "found_error",
        4,
    )

    # "n": the queue has nothing more for this annotator.
    press("n")
    page.wait_for_url(f"**{reverse('queue-detail', args=[queue.pk])}")
    assert "Nothing left for you" in page.inner_text("#flash")
    assert Queue.objects.get().items.get().assignments.get().status == "submitted"
