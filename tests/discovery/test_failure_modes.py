"""Failure-mode runs: the first errors of the failed trajectories (by a label source)
clustered and stored, numbers kept by a re-run, the ``failure_mode`` filter of the one
selection language (list, API, saved selections, queues), the page and its one-click
actions, the API, and a judge's one-line description from the stand-in endpoint."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from discovery.mode_services import (
    FailureModeError,
    failure_mode_run_start,
    failure_modes_execute,
)
from discovery.models import FailureMode, FailureModeMember, FailureModeRun
from exports.models import Selection
from labeling.models import LabelSchema, Queue, QueueItem, StepLabel
from tests.databases import rows_shared
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import SelectionError, selection_parse
from trajectories.selectors import trajectories_filtered
from trajectories.services import project_create

THEMES = {
    "tool": [
        "The search tool returned an error 404 and the agent ignored the error",
        "The booking tool returned an error and the agent ignored that error",
        "The payment tool call returned an error but the agent ignored the error",
    ],
    "math": [
        "Computed the total price as 12 * 3 = 38, an arithmetic mistake",
        "Added the prices wrong: the total should be 45, not 54",
        "Arithmetic error when multiplying the unit price by the quantity",
    ],
    "refuse": [
        "I am unable to assist with changing this reservation, sorry",
        "Sorry, I cannot help you with that request",
        "I'm afraid I can't assist with cancelling the order",
    ],
}


def failed_run(project: Project, name: str, error_text: str, **fields: Any) -> Trajectory:
    """A failed trajectory whose step 1 (``error_text``) an annotator marks as the first
    error (step 2, later, is wrong too)."""
    fields.setdefault("success", False)
    trajectory = trajectory_with_steps(
        project,
        ["Read the task.", error_text, "Then it went on wrongly."],
        external_id=name,
        **fields,
    )
    schema = LabelSchema.objects.get(project=project, is_active=True)
    annotator, _ = User.objects.get_or_create(username="ann")
    for step in Step.objects.filter(trajectory=trajectory):
        StepLabel.objects.create(
            step=step, annotator=annotator, schema=schema, value=1 if step.index == 0 else -1
        )
    return trajectory


@pytest.fixture(scope="module")
def failing_rows(django_db_setup: None, django_db_blocker: Any) -> Iterator[Project]:
    """The failed trajectories, written once for the module's tests (each runs in a
    savepoint of the module's transaction)."""
    with rows_shared(django_db_blocker):
        with django_db_blocker.unblock():
            project = project_create(slug="demo", name="Demo")
            for theme, texts in THEMES.items():
                for i, text in enumerate(texts):
                    failed_run(project, f"{theme}{i}", text, model_name=f"m{i % 2}")
            # A success with a wrong step and a failure nobody labelled: neither is
            # clustered.
            failed_run(project, "won", "The search tool returned an error", success=True)
            trajectory_with_steps(project, ["unlabelled"], external_id="bare", success=False)
        yield project


@pytest.fixture
def project(db: None, failing_rows: Project) -> Project:
    """The project of the failed trajectories (the personas' project)."""
    return failing_rows


@pytest.fixture
def failing(project: Project) -> Project:
    return project


def run_now(project: Project, user: User | None = None, **given: Any) -> FailureModeRun:
    run = failure_mode_run_start(project=project, user=user, **given)
    return failure_modes_execute(run_id=run.pk)


def themes_of(run: FailureModeRun) -> list[set[str]]:
    return [
        {
            re.sub(r"\d", "", t.external_id)
            for t in Trajectory.objects.filter(pk__in=mode.members.values("trajectory_id"))
        }
        for mode in run.modes.all()
    ]


def test_a_run_clusters_the_failed_first_errors_by_meaning(failing: Project) -> None:
    run = run_now(failing)
    assert run.status == "done", run.error
    assert (run.total, run.chosen, run.k) == (9, 10, 3)
    assert sorted(map(sorted, themes_of(run))) == [["math"], ["refuse"], ["tool"]]
    for mode in run.modes.all():
        assert mode.size == 3 and mode.share == pytest.approx(1 / 3)
        assert len(mode.examples) == 3 and mode.name
        # Each member is its trajectory's first error (step 1), not the later one.
        assert set(mode.members.values_list("step__index", flat=True)) == {1}
    # Names are each mode's distinctive words ("error" is in the arithmetic mode's too).
    names = {frozenset(m.words) for m in run.modes.all()}
    assert {"ignored", "price", "assist"} <= {w for words in names for w in words}


def test_a_rerun_keeps_numbers_and_names_where_members_stay(failing: Project) -> None:
    first = run_now(failing)
    FailureMode.objects.filter(run=first).update(name="renamed")
    failed_run(failing, "tool9", "The weather tool returned an error which was ignored")
    again = run_now(failing)
    assert again.total == 10
    before = {m.number for m in first.modes.all()}
    assert {m.number for m in again.modes.all()} == before
    assert all(m.kept and m.name == "renamed" for m in again.modes.all())


def test_a_selection_and_a_scorer_source_choose_what_is_clustered(failing: Project) -> None:
    run = run_now(failing, filters=selection_parse({"model": "m0"}))
    assert run.status == "done" and run.total == 6  # i = 0, 2 of each theme
    with pytest.raises(FailureModeError) as refused:
        failure_mode_run_start(project=failing, user=None, labels="model:nothing")
    assert "labels" in refused.value.errors
    with pytest.raises(FailureModeError) as refused:
        failure_mode_run_start(project=failing, user=None, judge="nobody")
    assert "judge" in refused.value.errors


def test_the_failure_mode_filter_works_in_the_one_selection_language(
    failing: Project, owner: User, client: Client
) -> None:
    run = run_now(failing)
    mode = run.modes.first()
    assert mode is not None
    members = set(mode.members.values_list("trajectory_id", flat=True))
    filters = selection_parse({"failure_mode": str(mode.pk)})
    assert set(trajectories_filtered(failing, filters).values_list("id", flat=True)) == members
    client.force_login(owner)
    listed = client.get(reverse("trajectory-list", args=["demo"]), {"failure_mode": mode.pk})
    assert listed.status_code == 200
    api = client.get("/api/v1/trajectories/", {"project": "demo", "failure_mode": str(mode.pk)})
    assert api.status_code == 200, api.content
    assert {row["id"] for row in api.json()["results"]} == members
    other = Project.objects.create(slug="other", name="Other")
    with pytest.raises(SelectionError) as refused:
        trajectories_filtered(other, filters)
    assert "failure_mode" in refused.value.errors


def test_a_cancelled_run_stores_nothing(failing: Project) -> None:
    run = failure_mode_run_start(project=failing, user=None)
    FailureModeRun.objects.filter(pk=run.pk).update(status="cancelled")
    assert failure_modes_execute(run_id=run.pk).status == "cancelled"
    assert not FailureMode.objects.exists() and not FailureModeMember.objects.exists()


def test_the_page_shows_modes_and_makes_a_queue_and_a_selection(
    failing: Project, owner: User, client: Client
) -> None:
    run = run_now(failing)
    client.force_login(owner)
    failures = client.get(reverse("failure-overview", args=["demo"])).content.decode()
    assert reverse("failure-modes", args=["demo"]) in failures
    html = client.get(reverse("failure-modes", args=["demo"])).content.decode()
    modes = list(run.modes.all())
    assert len(re.findall(r'class="card failure-mode"', html)) == 3
    for mode in modes:
        assert f'id="mode-{mode.pk}"' in html and "33%" in html
        for step in mode.examples:
            assert f"#step-{step}" in html
        assert f"failure_mode={mode.pk}" in html
    mode = modes[0]
    answer = client.post(reverse("failure-mode-queue", args=[mode.pk]))
    assert answer.status_code == 302
    queue = Queue.objects.get()
    assert set(
        QueueItem.objects.filter(queue=queue).values_list("trajectory_id", flat=True)
    ) == set(mode.members.values_list("trajectory_id", flat=True))
    client.post(reverse("failure-mode-selection", args=[mode.pk]))
    assert Selection.objects.get().definition == {"failure_mode": mode.pk}
    assert client.get(reverse("failure-modes", args=["demo"]), {"bogus": "1"}).status_code == 400


def test_a_mode_becomes_a_judge_run_and_an_export_in_one_click(
    failing: Project, owner: User, client: Client, openai_server: Any
) -> None:
    from scoring.models import ScoringRun
    from scoring.services.scores import _selected_steps
    from tests.scoring.test_judge_runs import remote_judge

    run = run_now(failing)
    mode = run.modes.first()
    assert mode is not None
    members = set(mode.members.values_list("trajectory_id", flat=True))
    judge = remote_judge(failing, openai_server, name="checker")
    client.force_login(owner)
    html = client.get(reverse("failure-modes", args=["demo"])).content.decode()
    assert reverse("failure-mode-judge", args=[mode.pk]) in html
    assert reverse("failure-mode-export", args=[mode.pk]) in html
    assert '<option value="checker">' in html

    # The judge run reads every labelable step of the mode's trajectories and no other.
    answer = client.post(reverse("failure-mode-judge", args=[mode.pk]), {"judge": "checker"})
    assert answer.status_code == 302 and answer["Location"] == reverse(
        "scoring-section", args=["demo"]
    )
    scoring = ScoringRun.objects.get()
    assert scoring.scorer == judge and scoring.selection["filters"] == {"failure_mode": mode.pk}
    assert {trajectory for trajectory, _ in _selected_steps(scoring)} == members
    # No judge, an unknown judge or an unknown parameter: back to the page, nothing queued.
    for form in ({}, {"judge": "nobody"}, {"judge": "checker", "bogus": "1"}):
        refused = client.post(reverse("failure-mode-judge", args=[mode.pk]), form, follow=True)
        assert refused.redirect_chain[-1][0] == reverse("failure-modes", args=["demo"])
    assert ScoringRun.objects.count() == 1

    # Export: the export form, its selection the mode's (saved once, reused after).
    answer = client.post(reverse("failure-mode-export", args=[mode.pk]))
    name = f"failure-mode-{mode.pk}"
    assert answer["Location"] == reverse("export-list", args=["demo"]) + f"?selection={name}"
    assert Selection.objects.get(name=name).definition == {"failure_mode": mode.pk}
    export_page = client.get(answer["Location"]).content.decode()
    assert re.search(rf'<option value="{name}" selected>', export_page), export_page
    client.post(reverse("failure-mode-export", args=[mode.pk]))
    assert Selection.objects.filter(name=name).count() == 1
    # A selection of that name with other filters is not silently exported instead.
    other = run.modes.exclude(pk=mode.pk).first()
    assert other is not None
    Selection.objects.filter(name=name).update(definition={"failure_mode": other.pk})
    answer = client.post(reverse("failure-mode-export", args=[mode.pk]))
    assert answer["Location"] == reverse("failure-modes", args=["demo"])


def test_an_annotator_reads_but_cannot_act(failing: Project, client: Client) -> None:
    run = run_now(failing)
    annotator = UserFactory.create(username="reader")
    MembershipFactory.create(user=annotator, project=failing, role="annotator")
    client.force_login(annotator)
    html = client.get(reverse("failure-modes", args=["demo"])).content.decode()
    assert "Make a queue" not in html and "Judge run" not in html and "Export…" not in html
    mode = run.modes.first()
    assert mode is not None
    for action in ("queue", "selection", "judge", "export"):
        answer = client.post(reverse(f"failure-mode-{action}", args=[mode.pk]))
        assert answer.status_code == 403, action


def test_the_api_starts_a_run_and_lists_modes(
    failing: Project, owner: User, client: Client
) -> None:
    client.force_login(owner)
    url = "/api/v1/projects/demo/failure-modes/"
    started = client.post(url, {"filters": {"model": "m1"}}, content_type="application/json")
    assert started.status_code == 202, started.content
    assert started.json()["selection"] == {"model": "m1"}
    failure_modes_execute(run_id=started.json()["id"])
    listed = client.get(url).json()
    assert listed["run"]["status"] == "done" and listed["run"]["total"] == 3
    assert sum(mode["size"] for mode in listed["modes"]) == 3
    assert all(mode["examples"] and mode["splits"]["model"] for mode in listed["modes"])
    bad = client.post(url, {"filters": {"nope": 1}, "extra": 2}, content_type="application/json")
    assert bad.status_code == 400 and "extra" in bad.json()
    bad = client.post(url, {"filters": {"nope": 1}}, content_type="application/json")
    assert bad.status_code == 400 and "nope" in bad.json()["filters"]


def test_a_judge_describes_each_new_mode_in_one_line(failing: Project, openai_server: Any) -> None:
    from tests.scoring.test_judge_runs import remote_judge

    judge = remote_judge(failing, openai_server, name="describer")
    openai_server.control(fixed_reply="The agent went wrong in one way.\nA second line.")
    run = run_now(failing, judge=judge.name)
    assert run.status == "done", run.error
    assert [m.description for m in run.modes.all()] == ["The agent went wrong in one way."] * 3
    asked = openai_server.stats()["asked"]
    assert len(asked) == 3 and all("first wrong steps" in m for m in asked)
    # A re-run keeps the descriptions of the modes it keeps and asks nothing again.
    again = run_now(failing, judge=judge.name)
    assert all(m.description for m in again.modes.all())
    assert len(openai_server.stats()["asked"]) == 3
