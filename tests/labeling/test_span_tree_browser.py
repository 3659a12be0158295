"""The trajectory page's tree of spans and agent lanes in a real browser, on real agent
logs: a Claude Code session (prompts, the model's steps below them, tool results below
their calls, a subagent below its Task call) and a Who&When multi-agent chat."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import shot
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_DIR, WHO_AND_WHEN_LABELABLE
from tests.trajectories.trace_shapes import REALDATA
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.services import project_create, trajectory_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def signed_in(page: Any, live_server: Any, project: Project) -> None:
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    sign_in(page, live_server, "reader", PASSWORD)


def visible(page: Any) -> list[int]:
    return page.eval_on_selector_all(
        "li.step", "rows => rows.filter(r => !r.hidden).map(r => Number(r.dataset.index))"
    )


def margin(page: Any, step: Step) -> float:
    return float(
        page.eval_on_selector(f"#step-{step.pk}", "r => parseFloat(getComputedStyle(r).marginLeft)")
    )


def test_spans_nest_and_fold_and_the_keys_skip_folded_steps(page: Any, live_server: Any) -> None:
    project = project_create(slug="cc", name="Claude Code")
    trajectory_import(
        project=project,
        source_format="agent-session",
        path=REALDATA / "claude_code" / "subagent.jsonl",
    )
    trajectory = Trajectory.objects.get(project=project)
    steps = {s.index: s for s in Step.objects.filter(trajectory=trajectory)}
    signed_in(page, live_server, project)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector(f"#step-{steps[1].pk} .tree-toggle")
    shot(page, "tree-1440")

    # Step 1 is the session's prompt; the model's steps hang below it, tool results below
    # their calls (step 8 answers the call at step 4).
    assert steps[2].metadata["parent"] == 1 and steps[8].metadata["parent"] == 4
    assert margin(page, steps[0]) < margin(page, steps[2]) < margin(page, steps[8])
    below_prompt = {i for i, s in steps.items() if _under(steps, i, 1)}
    assert len(below_prompt) > 10

    # Folding the prompt hides everything below it, at every depth, and nothing else.
    page.click(f"#step-{steps[1].pk} .tree-toggle")
    assert set(visible(page)) == set(steps) - below_prompt
    assert page.get_attribute(f"#step-{steps[1].pk} .tree-toggle", "aria-expanded") == "false"
    # j walks the labelable steps still shown: none of the folded ones becomes current.
    for _ in range(3):
        page.keyboard.press("j")
    current = page.eval_on_selector_all(
        "li.is-current", "rows => rows.map(r => Number(r.dataset.index))"
    )
    assert current and not below_prompt & set(current)

    page.click("[data-tree=expand]")
    assert set(visible(page)) == set(steps)
    page.click("[data-tree=collapse]")
    roots = {i for i, s in steps.items() if "parent" not in s.metadata}
    assert set(visible(page)) == roots
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("[data-tree=expand]")
    page.locator(f"#step-{steps[8].pk}").scroll_into_view_if_needed()
    shot(page, "tree-390")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_agents_get_lanes_and_filters(page: Any, live_server: Any) -> None:
    project = project_create(slug="ww", name="Who and When")
    trajectory_import(
        project=project,
        source_format="mapped",
        path=WHO_AND_WHEN_DIR / "Algorithm-Generated" / "1.json",
        mapping=WHO_AND_WHEN_LABELABLE,
    )
    trajectory = Trajectory.objects.get(project=project)
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    agents = list(dict.fromkeys(s.agent for s in steps if s.agent))
    assert len(agents) >= 3
    signed_in(page, live_server, project)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector(".agent-filters:not([hidden])")
    filters = page.eval_on_selector_all("[data-agent-filter]", "boxes => boxes.map(b => b.value)")
    assert filters == agents  # in the order they first act

    # A filter hides that agent's steps only.
    second = agents[1]
    page.uncheck(f"[data-agent-filter][value='{second}']")
    assert set(visible(page)) == {s.index for s in steps if s.agent != second}
    page.check(f"[data-agent-filter][value='{second}']")
    assert len(visible(page)) == len(steps)

    # Lanes: each agent's steps in a column of their own, in order of first action.
    page.check("[data-lanes]")
    first_of = {agent: next(s for s in steps if s.agent == agent) for agent in agents}
    offsets = [margin(page, first_of[agent]) for agent in agents]
    assert offsets == sorted(offsets) and offsets[0] < offsets[-1]
    shot(page, "lanes-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "lanes-390")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def _under(steps: dict[int, Step], index: int, ancestor: int) -> bool:
    parent = steps[index].metadata.get("parent")
    while parent is not None:
        if parent == ancestor:
            return True
        parent = steps[parent].metadata.get("parent")
    return False


def current_index(page: Any) -> int | None:
    return page.evaluate(
        "() => { const r = document.querySelector('li.step.is-current');"
        " return r ? Number(r.dataset.index) : null; }"
    )


def test_the_keys_work_with_the_lanes_switch_or_an_agent_filter_focused(
    page: Any, live_server: Any
) -> None:
    """A focused checkbox takes no typed text: j/k still walk the steps once the lanes
    switch or an agent filter has been clicked (they were ignored as if typed)."""
    project = project_create(slug="ww", name="Who and When")
    trajectory_import(
        project=project,
        source_format="mapped",
        path=WHO_AND_WHEN_DIR / "Algorithm-Generated" / "1.json",
        mapping=WHO_AND_WHEN_LABELABLE,
    )
    trajectory = Trajectory.objects.get(project=project)
    signed_in(page, live_server, project)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector(".agent-filters:not([hidden])")
    page.keyboard.press("j")
    start = current_index(page)
    assert start is not None

    page.check("[data-lanes]")
    assert page.evaluate("document.activeElement.matches('[data-lanes]')")
    page.keyboard.press("j")
    after_switch = current_index(page)
    assert after_switch is not None and after_switch > start
    page.keyboard.press("k")
    assert current_index(page) == start

    first_filter = page.locator("[data-agent-filter]").first
    first_filter.uncheck()
    first_filter.check()
    assert page.evaluate("document.activeElement.matches('[data-agent-filter]')")
    page.keyboard.press("j")
    assert current_index(page) == after_switch


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_a_claude_code_subagent_gets_a_lane_beside_the_unnamed_main_thread(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="cc", name="Claude Code")
    trajectory_import(
        project=project,
        source_format="agent-session",
        path=REALDATA / "claude_code" / "subagent.jsonl",
    )
    trajectory = Trajectory.objects.get(project=project)
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    # The main thread's steps name no agent; the subagent's do.
    assert steps[0].agent == "" and {s.agent for s in steps} == {"", "afb92ff"}
    width, height = viewport
    signed_in(page, live_server, project)
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector(".agent-filters:not([hidden])")
    filters = page.eval_on_selector_all("[data-agent-filter]", "boxes => boxes.map(b => b.value)")
    assert filters == ["main", "afb92ff"]

    # Hiding the main lane leaves the subagent's steps.
    page.uncheck("[data-agent-filter][value='main']")
    assert set(visible(page)) == {s.index for s in steps if s.agent == "afb92ff"}
    page.check("[data-agent-filter][value='main']")
    page.check("[data-lanes]")
    main = steps[0]
    sub = next(s for s in steps if s.agent)
    assert margin(page, main) < margin(page, sub)
    page.locator(f"#step-{sub.pk}").scroll_into_view_if_needed()
    shot(page, f"lanes-claude-code-{width}")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
