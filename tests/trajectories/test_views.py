"""The browse pages of every app (home, trajectories, labeling's trajectory page): access
control, the project pages, the trajectory list's filters and
cursor pagination, and the trajectory page's steps, labels, long contents and escaping."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from pytest_django import DjangoAssertNumQueries

from labeling.models import TERNARY_VALUES, LabelSchema, StepLabel
from tests.factories import (
    MembershipFactory,
    ProjectFactory,
    TrajectoryFactory,
    trajectory_with_steps,
)
from trajectories.models import ImportBatch, Membership, Project, Step, Trajectory
from trajectories.selectors import STEP_PREVIEW_CHARS, TRAJECTORY_PAGE_SIZE

HTMX = {"HX-Request": "true"}


def page_urls(trajectory: Trajectory) -> list[str]:
    step = trajectory.steps.first()
    assert step is not None
    return [
        reverse("project-home", args=[trajectory.project.slug]),
        reverse("trajectory-list", args=[trajectory.project.slug]),
        reverse("trajectory-detail", args=[trajectory.pk]),
        reverse("step-content", args=[step.pk]),
    ]


def imported_label(step: Step, value: int, source: str = "import:processbench") -> StepLabel:
    schema, _ = LabelSchema.objects.get_or_create(
        project=step.trajectory.project, name="step quality", defaults={"values": TERNARY_VALUES}
    )
    # A non-login user named after the source, as the importers make them.
    label_user, _ = get_user_model().objects.get_or_create(
        username=source, defaults={"password": UNUSABLE_PASSWORD_PREFIX}
    )
    return StepLabel.objects.create(step=step, annotator=label_user, schema=schema, value=value)


def row_ids(html: str) -> list[int]:
    """The trajectory ids of the list rows, in page order, read from the HTML."""
    return [int(pk) for pk in re.findall(r'<tr id="trajectory-(\d+)"', html)]


def external_ids(response: Any) -> list[str]:
    return [row.external_id for row in response.context["rows"]]


# --- Access ---------------------------------------------------------------------------


def test_anonymous_is_redirected_to_login(client: Client, project: Project) -> None:
    trajectory = trajectory_with_steps(project, ["a"])
    for url in [reverse("project-list"), *page_urls(trajectory)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url


def test_outsider_gets_404(client: Client, project: Project, outsider: User) -> None:
    trajectory = trajectory_with_steps(project, ["a"])
    client.force_login(outsider)
    for url in page_urls(trajectory):
        assert client.get(url).status_code == 404, url
        assert client.get(url, headers=HTMX).status_code == 404, url


def test_member_of_another_project_gets_404(client: Client, project: Project) -> None:
    trajectory = trajectory_with_steps(project, ["a"])
    elsewhere = MembershipFactory.create(project=ProjectFactory()).user
    client.force_login(elsewhere)
    for url in page_urls(trajectory):
        assert client.get(url).status_code == 404, url


def test_member_sees_every_page(client: Client, project: Project, annotator: User) -> None:
    trajectory = trajectory_with_steps(project, ["a"])
    client.force_login(annotator)
    for url in page_urls(trajectory):
        assert client.get(url).status_code == 200, url


# --- Project pages --------------------------------------------------------------------


def test_project_list_shows_own_projects_with_role_and_counts(
    client: Client, project: Project, owner: User
) -> None:
    other = ProjectFactory(name="Other team", slug="other-team")
    TrajectoryFactory.create_batch(3, project=project)
    TrajectoryFactory.create_batch(2, project=other)
    second = ProjectFactory(name="Second", slug="second")
    MembershipFactory(user=owner, project=second, role=Membership.Role.RESEARCHER)
    TrajectoryFactory(project=second)

    client.force_login(owner)
    response = client.get(reverse("project-list"))

    rows = {p.slug: (p.role, p.trajectory_count) for p in response.context["projects"]}
    assert rows == {"demo": ("admin", 3), "second": ("researcher", 1)}
    assert b"Other team" not in response.content
    assert reverse("project-home", args=["demo"]).encode() in response.content


def test_project_home_counts(client: Client, project: Project, owner: User) -> None:
    ok = trajectory_with_steps(project, ["a", "b"], success=True)
    trajectory_with_steps(project, ["a", "b", "c"], success=False)
    trajectory_with_steps(project, ["a"], success=None)
    Step.objects.filter(trajectory=ok, index=0).update(labelable=False)
    imported_label(ok.steps.get(index=1), 1)
    ImportBatch.objects.create(
        project=project,
        file_name="old.jsonl",
        source_format="stepscope",
        status=ImportBatch.Status.DONE,
    )
    ImportBatch.objects.create(
        project=project,
        file_name="bad.jsonl",
        source_format="processbench",
        status=ImportBatch.Status.DONE,
        created_count=3,
        rejected_count=5,
        errors=[
            {"location": f"line {n}", "field": "steps", "message": f"problem {n}"}
            for n in range(1, 6)
        ],
    )

    client.force_login(owner)
    response = client.get(reverse("project-home", args=[project.slug]))

    stats = response.context["stats"]
    outcomes = (stats.successes, stats.failures, stats.unknown_outcome)
    assert (stats.trajectories, outcomes) == (3, (1, 1, 1))
    counts = response.context["kept"].value
    assert (stats.steps, counts.labelable, counts.labelled) == (6, 5, 1)
    batches = response.context["import_batches"]
    assert [b.file_name for b in batches] == ["bad.jsonl", "old.jsonl"]
    assert batches[0].error_count == 5
    assert [e["location"] for e in batches[0].first_errors] == ["line 1", "line 2", "line 3"]
    html = response.content.decode()
    assert "5 errors" in html
    assert "problem 3" in html
    assert "problem 4" not in html


# --- Trajectory list ------------------------------------------------------------------


@pytest.fixture
def varied(project: Project) -> Project:
    rows = [
        # external id, model, success, steps, task key
        ("gpt-ok", "gpt", True, 3, "t1"),
        ("gpt-bad", "gpt", False, 8, "t2"),
        ("qwen-ok", "qwen", True, 12, "t1"),
        ("qwen-unk", "qwen", None, 5, "t2"),
    ]
    for external_id, model_name, success, step_count, task_key in rows:
        TrajectoryFactory(
            project=project,
            external_id=external_id,
            model_name=model_name,
            success=success,
            step_count=step_count,
            task_key=task_key,
        )
    return project


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, {"gpt-ok", "gpt-bad", "qwen-ok", "qwen-unk"}),
        ({"outcome": "success"}, {"gpt-ok", "qwen-ok"}),
        ({"outcome": "failure"}, {"gpt-bad"}),
        ({"outcome": "unknown"}, {"qwen-unk"}),
        ({"model": "qwen"}, {"qwen-ok", "qwen-unk"}),
        # A name is exact; a trailing * takes the names that start so (#40 item 16).
        ({"model": "qw"}, set()),
        ({"model": "qw*"}, {"qwen-ok", "qwen-unk"}),
        ({"model": "%*"}, set()),
        ({"task": "t2"}, {"gpt-bad", "qwen-unk"}),
        ({"task": "t*", "model": "g*"}, {"gpt-ok", "gpt-bad"}),
        ({"min_steps": "5"}, {"gpt-bad", "qwen-ok", "qwen-unk"}),
        ({"max_steps": "5"}, {"gpt-ok", "qwen-unk"}),
        ({"min_steps": "4", "max_steps": "10", "model": "gpt"}, {"gpt-bad"}),
        ({"outcome": "success", "model": "nobody"}, set()),
    ],
)
def test_filters_filter(
    client: Client, varied: Project, annotator: User, query: dict[str, str], expected: set[str]
) -> None:
    client.force_login(annotator)
    response = client.get(reverse("trajectory-list", args=[varied.slug]), query)
    assert response.status_code == 200
    assert set(external_ids(response)) == expected


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"min_steps": "lots", "model": "gpt"}, "Min steps: Enter a whole number."),
        ({"meta": "metadata.level >", "model": "gpt"}, "Metadata:"),
    ],
)
def test_an_invalid_filter_is_reported_and_nothing_is_listed(
    client: Client, varied: Project, annotator: User, query: dict[str, str], message: str
) -> None:
    """Listing the rest beside the error read as if the bad filter had been applied."""
    client.force_login(annotator)
    response = client.get(reverse("trajectory-list", args=[varied.slug]), query)
    html = response.content.decode()
    assert external_ids(response) == []
    assert message in html
    assert "Nothing is listed until the filter marked above is fixed." in html


def test_the_list_leaves_out_rollout_continuations_unless_asked(
    client: Client, varied: Project, annotator: User
) -> None:
    batch = ImportBatch.objects.create(
        project=varied, file_name="rollouts", source_format="stepscope", internal=True
    )
    TrajectoryFactory.create(project=varied, external_id="gpt-ok-rollout-0", import_batch=batch)
    url = reverse("trajectory-list", args=[varied.slug])
    client.force_login(annotator)
    response = client.get(url)
    listed = set(external_ids(response))
    assert "gpt-ok-rollout-0" not in listed and "gpt-ok" in listed
    assert 'id="origin-note"' in response.content.decode()
    assert set(external_ids(client.get(url, {"origin": "rollouts"}))) == {"gpt-ok-rollout-0"}
    assert set(external_ids(client.get(url, {"origin": ""}))) == listed | {"gpt-ok-rollout-0"}
    # Saved from the default view, a selection keeps what the list showed.
    save = re.search(r'id="save-selection" href="[^"?]*\?([^"]*)"', response.content.decode())
    assert save is not None and "origin=imported" in save.group(1)


def test_the_origin_note_shows_only_where_there_are_continuations(
    client: Client, varied: Project, annotator: User
) -> None:
    client.force_login(annotator)
    response = client.get(reverse("trajectory-list", args=[varied.slug]))
    assert 'id="origin-note"' not in response.content.decode()


def test_list_rows_link_to_trajectories_and_truncate_the_task(
    client: Client, project: Project, annotator: User
) -> None:
    trajectory = TrajectoryFactory.create(
        project=project, task="Prove it. " + "x" * 5000 + "END", outcome_reward=0.25
    )
    client.force_login(annotator)
    response = client.get(reverse("trajectory-list", args=[project.slug]))
    html = response.content.decode()
    assert f'href="{reverse("trajectory-detail", args=[trajectory.pk])}"' in html
    assert "Prove it. xxx" in html
    assert "END" not in html
    assert "0.250" in html
    # The list never loads the task text, metadata or the raw source record.
    row = response.context["rows"][0]
    assert {"task", "metadata", "ground_truth"} <= row.get_deferred_fields()
    assert "source" not in row._state.fields_cache


def test_cursor_pagination_pages_without_repeats(
    client: Client, project: Project, annotator: User
) -> None:
    created = [
        TrajectoryFactory.create(project=project).pk for _ in range(TRAJECTORY_PAGE_SIZE * 2 + 7)
    ]
    url = reverse("trajectory-list", args=[project.slug])
    client.force_login(annotator)

    first = client.get(url)
    first_ids = [t.pk for t in first.context["rows"]]
    assert first_ids == sorted(created, reverse=True)[:TRAJECTORY_PAGE_SIZE]
    after = first.context["next_after"]
    assert after == first_ids[-1]
    assert f'hx-get="?after={after}"' in first.content.decode()

    second = client.get(url, {"after": after}, headers=HTMX)
    html = second.content.decode()
    assert "<html" not in html
    assert html.count("<tr ") == TRAJECTORY_PAGE_SIZE
    assert 'id="load-more"' in html and 'hx-swap-oob="outerHTML"' in html
    second_ids = row_ids(html)
    assert len(second_ids) == TRAJECTORY_PAGE_SIZE
    next_after = second_ids[-1]
    assert f'hx-get="?after={next_after}"' in html

    third = client.get(url, {"after": next_after}, headers=HTMX).content.decode()
    third_ids = row_ids(third)
    assert len(third_ids) == 7
    assert "Load more" not in third

    seen = first_ids + second_ids + third_ids
    assert seen == sorted(created, reverse=True)


def test_cursor_keeps_the_filters(client: Client, project: Project, annotator: User) -> None:
    for _ in range(TRAJECTORY_PAGE_SIZE + 5):
        TrajectoryFactory(project=project, model_name="gpt")
        TrajectoryFactory(project=project, model_name="qwen")
    client.force_login(annotator)
    url = reverse("trajectory-list", args=[project.slug])
    first = client.get(url, {"model": "qwen"})
    after = first.context["next_after"]
    assert f'hx-get="?model=qwen&amp;after={after}"' in first.content.decode()
    second = client.get(url, {"model": "qwen", "after": after}, headers=HTMX).content.decode()
    qwen = Trajectory.objects.filter(model_name="qwen").order_by("-id")
    assert row_ids(second) == [t.pk for t in qwen[TRAJECTORY_PAGE_SIZE:]]
    assert len(row_ids(second)) == 5


# --- Trajectory page ------------------------------------------------------------------


def test_trajectory_page_shows_steps_in_order_with_imported_labels(
    client: Client, project: Project, annotator: User
) -> None:
    trajectory = trajectory_with_steps(
        project, ["First, add.", "Then, carry the one.", "So the answer is 5."], model_name="qwen"
    )
    steps = list(trajectory.steps.order_by("index"))
    imported_label(steps[0], 1)
    imported_label(steps[2], -1)
    client.force_login(annotator)

    html = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()

    positions = [html.index(f'id="step-{s.pk}" data-index="{s.index}"') for s in steps]
    assert positions == sorted(positions)
    assert html.index("First, add.") < html.index("Then, carry") < html.index("answer is 5")
    first_step = html[positions[0] : positions[1]]
    last_step = html[positions[2] :]
    assert "good" in first_step and "import:processbench" in first_step
    assert "--label-color: #2f9e44" in first_step
    assert "bad" in last_step and "--label-color: #d64545" in last_step
    assert "import:processbench" not in html[positions[1] : positions[2]]


def test_trajectory_page_shows_tool_calls_and_metadata(
    client: Client, project: Project, annotator: User
) -> None:
    trajectory = trajectory_with_steps(project, ["calling"], metadata={"seed": 7})
    Step.objects.filter(trajectory=trajectory).update(
        kind=Step.Kind.TOOL_CALL, tool_name="search", tool_args={"query": "<b>cats</b>"}
    )
    client.force_login(annotator)
    html = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    assert "search" in html
    assert "&quot;query&quot;: &quot;&lt;b&gt;cats&lt;/b&gt;&quot;" in html
    assert '<details class="metadata">' in html and "&quot;seed&quot;: 7" in html


def test_long_content_is_truncated_and_loaded_on_demand(
    client: Client, project: Project, annotator: User
) -> None:
    long_output = "".join(f"line {n}\n" for n in range(2000)) + "THE END"
    trajectory = trajectory_with_steps(project, ["short", long_output])
    Step.objects.filter(trajectory=trajectory, index=1).update(kind=Step.Kind.TOOL_RESULT)
    step = trajectory.steps.get(index=1)
    content_url = reverse("step-content", args=[step.pk])
    client.force_login(annotator)

    html = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    assert "THE END" not in html
    assert long_output[: STEP_PREVIEW_CHARS - 10] in html
    assert f'hx-get="{content_url}"' in html
    assert f'href="{content_url}"' in html
    assert f'hx-target="#step-content-{step.pk}"' in html

    partial = client.get(content_url, headers=HTMX).content.decode()
    assert "<html" not in partial
    assert partial.strip().startswith(f'<div class="step-content" id="step-content-{step.pk}">')
    assert "THE END" in partial and "line 1999" in partial
    assert "Show all" not in partial

    page = client.get(content_url).content.decode()
    assert "<html" in page and "THE END" in page
    assert reverse("trajectory-detail", args=[trajectory.pk]) in page


class _UnsafeMarkupFinder(HTMLParser):
    """Collects the markup a browser would act on: scripts other than the page's own
    static ones, event-handler attributes and javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: (value or "") for name, value in attrs}
        if tag == "script" and not values.get("src", "").startswith("/static/"):
            self.found.append("<script>")
        if tag in {"iframe", "object", "embed", "img"}:
            self.found.append(f"<{tag}>")
        for name, value in values.items():
            if name.startswith("on"):
                self.found.append(f"{tag}[{name}]")
            if name in {"href", "src"} and value.strip().lower().startswith("javascript:"):
                self.found.append(f"{tag}[{name}={value}]")


def unsafe_markup(html: str) -> list[str]:
    finder = _UnsafeMarkupFinder()
    finder.feed(html)
    return finder.found


XSS = (
    "Look: <script>alert(1)</script>\n\n"
    "<img src=x onerror=alert(1)>\n\n"
    "[click me](javascript:alert(1)) and [docs](https://example.com)\n\n"
    '<a href="javascript:alert(2)">raw link</a>'
)


def test_untrusted_content_is_escaped_or_sanitized(
    client: Client, project: Project, annotator: User
) -> None:
    trajectory = trajectory_with_steps(project, [XSS], task=XSS, model_name="<script>m</script>")
    Step.objects.filter(trajectory=trajectory).update(
        role='assistant" onclick="alert(3)', tool_name="<script>t</script>"
    )
    client.force_login(annotator)
    step = trajectory.steps.get()

    for html in [
        client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode(),
        client.get(reverse("step-content", args=[step.pk]), headers=HTMX).content.decode(),
        client.get(reverse("trajectory-list", args=[project.slug])).content.decode(),
    ]:
        assert unsafe_markup(html) == []
        assert "<script>alert(1)</script>" not in html
        assert "<img" not in html

    detail = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    # Shown as text, so the reader sees what the model wrote.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert '<a href="https://example.com" rel="noopener noreferrer">docs</a>' in detail


def test_trajectory_page_query_count_does_not_grow_with_steps(
    client: Client,
    project: Project,
    annotator: User,
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    short = trajectory_with_steps(project, ["a", "b"])
    long = trajectory_with_steps(project, [f"step {n} " * 50 for n in range(60)])
    for trajectory in (short, long):
        for step in trajectory.steps.all():
            imported_label(step, step.index % 3 - 1)
            imported_label(step, 1, source="import:prm800k")
    client.force_login(annotator)

    counts = []
    for trajectory in (short, long):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("trajectory-detail", args=[trajectory.pk]))
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]

    with django_assert_max_num_queries(6):
        client.get(reverse("trajectory-detail", args=[long.pk]))


@pytest.mark.django_db
def test_prm800k_alternatives_link_to_the_step_of_the_path_they_branch_from(
    client: Client, project: Project, owner: User
) -> None:
    from tests.conftest import REALDATA
    from trajectories.services import trajectory_import

    phase2 = REALDATA / "prm800k_sample" / "phase2_train_sample.jsonl"
    trajectory_import(project=project, source_format="prm800k", path=phase2)
    alternative = (
        Trajectory.objects.filter(project=project, parent__isnull=False)
        .select_related("parent")
        .order_by("pk")
        .first()
    )
    assert alternative is not None and alternative.parent is not None
    client.force_login(owner)
    page = client.get(reverse("trajectory-detail", args=[alternative.pk])).content.decode()
    link = reverse("trajectory-steps", args=[alternative.parent.pk])
    link += f"?step={alternative.branch_index}"
    assert f'<a id="branch-parent" href="{link}"' in page
    # The link lands on the parent's step where the alternative parts from it.
    landed = client.get(link)
    branch_step = Step.objects.get(
        trajectory=alternative.parent,
        index=min(alternative.branch_index or 0, alternative.parent.step_count - 1),
    )
    assert landed["Location"].endswith(f"#step-{branch_step.pk}")
    listing = client.get(reverse("trajectory-list", args=[project.slug])).content.decode()
    assert f'href="{link}"' in listing
    assert f"branches from #{alternative.parent.pk} at step {alternative.branch_index}" in listing
