"""The trajectory list sorts by any column: ``?ordering=`` on the page (clickable headers
with ``aria-sort``) and on the API, empty values last either way; the list also takes
the filters on labels, scores and credits, and a saved selection opens as the list."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from exports.services import selection_save
from tests.factories import trajectory_with_steps
from tests.trajectories.test_views import row_ids
from trajectories.api import SortedCursor
from trajectories.columns import list_columns_all
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters
from trajectories.selectors import (
    list_ordering_parse,
    model_names_for_project,
    trajectory_list_page,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(project: Project) -> dict[str, Trajectory]:
    """Four trajectories: steps 3, 1, 4, 2; rewards 0.5, none, 0.9, 0.1; costs none, 2, 1, 3."""
    made = {}
    for name, steps, reward, cost in (
        ("a", 3, 0.5, None),
        ("b", 1, None, 2.0),
        ("c", 4, 0.9, 1.0),
        ("d", 2, 0.1, 3.0),
    ):
        metadata = {} if cost is None else {"cost": cost}
        made[name] = trajectory_with_steps(
            project, ["s"] * steps, external_id=name, outcome_reward=reward, metadata=metadata
        )
    return made


def page(client: Client, project: Project, **query: str) -> tuple[list[str], str]:
    response = client.get(f"/p/{project.slug}/trajectories/", query)
    assert response.status_code == 200
    html = response.content.decode()
    names = {t.pk: t.external_id for t in Trajectory.objects.filter(project=project)}
    return [names[pk] for pk in row_ids(html)], html


def test_the_page_sorts_by_a_column_both_ways_with_empty_values_last(
    project: Project, owner: User, rows: dict[str, Trajectory]
) -> None:
    client = Client()
    client.force_login(owner)
    assert page(client, project)[0] == ["d", "c", "b", "a"]  # newest first
    assert page(client, project, ordering="steps")[0] == ["b", "d", "a", "c"]
    assert page(client, project, ordering="-steps")[0] == ["c", "a", "d", "b"]
    assert page(client, project, ordering="reward")[0] == ["d", "a", "c", "b"]
    assert page(client, project, ordering="-reward")[0] == ["c", "a", "d", "b"]
    # A registered column sorts by its annotation.
    assert page(client, project, ordering="cost")[0] == ["c", "b", "d", "a"]
    assert page(client, project, ordering="-cost")[0] == ["d", "b", "c", "a"]


def test_headers_link_to_their_sort_and_say_it_with_aria_sort(
    project: Project, owner: User, rows: dict[str, Trajectory]
) -> None:
    client = Client()
    client.force_login(owner)
    _, html = page(client, project, ordering="steps", outcome="")
    sorted_headers = re.findall(
        r'<th [^>]*aria-sort="(\w+)"[^>]*><a class="sort" href="([^"]+)"', html
    )
    # Only the sorted column says so; its link sorts the other way.
    assert len(sorted_headers) == 1
    direction, link = sorted_headers[0]
    assert direction == "ascending" and "ordering=-steps" in link
    assert 'href="?ordering=reward&amp;outcome="' in html
    _, html = page(client, project, ordering="-steps")
    assert re.search(r'aria-sort="descending"[^>]*><a class="sort" href="\?ordering=steps"', html)


def test_an_unknown_sort_is_said_and_the_list_stays_newest_first(
    project: Project, owner: User, rows: dict[str, Trajectory]
) -> None:
    client = Client()
    client.force_login(owner)
    names, html = page(client, project, ordering="colour")
    assert names == ["d", "c", "b", "a"]
    assert "cannot sort by &#x27;colour&#x27;" in html


def test_a_sorted_list_pages_by_offset_through_every_row(
    project: Project, rows: dict[str, Trajectory]
) -> None:
    columns = list_columns_all()
    ordering = list_ordering_parse("-reward", columns)
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        found, offset = trajectory_list_page(
            project, TrajectoryFilters(), ordering=ordering, offset=offset, size=3, columns=columns
        )
        seen += [t.external_id for t in found]
    assert seen == ["c", "a", "d", "b"]


def api_names(client: Client, **query: Any) -> list[str]:
    names: list[str] = []
    response = client.get("/api/v1/trajectories/", query)
    while True:
        assert response.status_code == 200, response.content
        body = response.json()
        names += [row["external_id"] for row in body["results"]]
        if not body["next"]:
            return names
        response = client.get(body["next"])


def test_the_api_sorts_and_pages_the_same_way(
    project: Project, owner: User, rows: dict[str, Trajectory], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SortedCursor, "page_size", 1)
    client = Client()
    client.force_login(owner)
    assert api_names(client, project="demo") == ["d", "c", "b", "a"]
    assert api_names(client, project="demo", ordering="reward") == ["d", "a", "c", "b"]
    assert api_names(client, project="demo", ordering="-reward") == ["c", "a", "d", "b"]
    assert api_names(client, project="demo", ordering="-cost") == ["d", "b", "c", "a"]
    assert api_names(client, project="demo", ordering="model", min_steps=2) == ["a", "c", "d"]
    bad = client.get("/api/v1/trajectories/", {"project": "demo", "ordering": "colour"})
    assert bad.status_code == 400 and "colour" in bad.json()["ordering"][0]


def test_a_column_hidden_from_a_member_does_not_sort_for_them(
    project: Project, annotator: User, rows: dict[str, Trajectory]
) -> None:
    project.settings = {"hide_model_scores": True}
    project.save()
    client = Client()
    client.force_login(annotator)
    refused = client.get("/api/v1/trajectories/", {"project": "demo", "ordering": "latest_score"})
    assert refused.status_code == 400
    assert client.get("/api/v1/trajectories/", {"ordering": "steps"}).status_code == 200


def test_the_list_takes_label_filters_and_shows_their_errors(
    project: Project, owner: User, rows: dict[str, Trajectory]
) -> None:
    client = Client()
    client.force_login(owner)
    names, html = page(client, project, label_status="unlabelled")
    assert sorted(names) == ["a", "b", "c", "d"]
    assert 'id="label-filters" open' in html
    names, _ = page(client, project, label_status="complete")
    assert names == []
    names, html = page(client, project, credit_run="999999", task_key="nope", bogus="1")
    assert "no attribution run 999999" in html
    assert "bogus: unknown filter" in html
    # The refused filter filters nothing; the old name task_key still does.
    assert names == []
    assert re.search(r'name="task"[^>]* value="nope"', html)


def test_a_saved_selection_opens_as_the_list_with_its_filters_filled_in(
    project: Project, owner: User, rows: dict[str, Trajectory]
) -> None:
    selection_save(
        project=project, name="long", filters=TrajectoryFilters(min_steps=3, q="s"), user=owner
    )
    client = Client()
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/selections/").content.decode()
    [link] = re.findall(r'href="(/p/demo/trajectories/\?[^"]*)">Open as list', html)
    response = client.get(link.replace("&amp;", "&"))
    names = {t.pk: t.external_id for t in Trajectory.objects.filter(project=project)}
    assert sorted(names[pk] for pk in row_ids(response.content.decode())) == ["a", "c"]
    assert re.search(r'name="min_steps"[^>]* value="3"', response.content.decode())


def test_the_training_columns_sort_by_step_and_mean_advantage(
    project: Project, owner: User, rows: dict[str, Trajectory]
) -> None:
    for name, step, advantage in (("a", 7, -0.5), ("b", 2, 0.25), ("c", None, 0.75)):
        Trajectory.objects.filter(pk=rows[name].pk).update(training_step=step)
        Step.objects.filter(trajectory=rows[name]).update(advantage=advantage)
    client = Client()
    client.force_login(owner)
    assert page(client, project, ordering="policy")[0] == ["b", "a", "c", "d"]
    assert page(client, project, ordering="-advantage")[0] == ["c", "b", "a", "d"]
    # Ties (no step) go by id in the same direction: newest first when descending.
    assert api_names(client, project="demo", ordering="-policy") == ["a", "b", "d", "c"]
    assert api_names(client, project="demo", ordering="advantage") == ["a", "b", "c", "d"]


def test_the_newest_first_pages_read_an_index_not_the_whole_project(
    project: Project, rows: dict[str, Trajectory], researcher: User
) -> None:
    """A newest-first page is read from the (project, id) or id index in order, a page's
    worth: a sort of every trajectory of the project took 0.2 s at 58,000 (the page's
    ``id NULLS LAST``; the API's project joined by slug, so no index on it could serve)."""
    client = Client()
    client.force_login(researcher)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(f"/p/{project.slug}/trajectories/").status_code == 200
    page = [q["sql"] for q in captured.captured_queries if "task_preview" in q["sql"]]
    assert page
    for sql in page:
        # Plainly by id, as the indexes hold it (the planner's choice on a test's few
        # rows says nothing of a big project's, so the order itself is checked).
        assert 'ORDER BY "trajectories_trajectory"."id" DESC' in sql, sql
        assert "NULLS LAST" not in sql, sql
    for query in ("", "&q=s&min_steps=1"):
        with CaptureQueriesContext(connection) as captured:
            url = f"/api/v1/trajectories/?project={project.slug}{query}"
            assert client.get(url).status_code == 200
        listed = [
            q["sql"] for q in captured.captured_queries if "trajectories_trajectory" in q["sql"]
        ]
        assert listed
        for sql in listed:
            # The project by its id, a constant the planner sees, not a join on its slug;
            # the filters on the project's own query, not a second walk of it through
            # ``id IN (...)`` (a search took 68 s so on the tau-bench file's 50 runs).
            assert f'"trajectories_trajectory"."project_id" = {project.pk}' in sql, sql
            assert '"trajectories_project"."slug" =' not in sql, sql
            assert '"trajectories_trajectory"."id" IN (SELECT' not in sql, sql


def test_the_model_names_are_each_name_once_in_order(project: Project) -> None:
    for name in ("qwen", "", "gpt", "qwen", "claude", "gpt"):
        trajectory_with_steps(project, ["s"], model_name=name)
    assert model_names_for_project(project) == ["claude", "gpt", "qwen"]
    assert model_names_for_project(project, limit=2) == ["claude", "gpt"]
