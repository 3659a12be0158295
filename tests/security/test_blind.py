"""Blind labeling: an annotator who has not submitted a trajectory must not read another
annotator's labels on it through any page, HTMX partial or API call. The other
annotator's label carries a distinctive rationale, correction and verdict comment; every
GET route of the project (plain and as HTMX, the evidence parts too) is requested as the
annotator and none of them may contain it, while a researcher does see it (so the search
would find it if it leaked)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from labeling.models import EpisodeVerdict, StepLabel, TrajectoryLabel
from tests.security.world import Route, Visitors, World, body, build_world, project_routes

pytestmark = pytest.mark.django_db

SECRET = "BLIND-SECRET-7f3a"


@pytest.fixture
def world(tmp_path: Path) -> World:
    world = build_world(tmp_path, blind=True)
    StepLabel.objects.filter(pk=world.label.pk).update(
        rationale=f"rationale {SECRET}", correction=f"correction {SECRET}"
    )
    TrajectoryLabel.objects.filter(annotator=world.other_annotator).update(
        comment=f"comment {SECRET}"
    )
    # Their episode verdict's critique, through the episode panel and API.
    EpisodeVerdict.objects.create(
        trajectory=world.trajectory,
        annotator=world.other_annotator,
        outcome="failure",
        critique=f"critique {SECRET}",
    )
    return world


def _variants(route: Route, world: World) -> list[tuple[str, dict[str, Any]]]:
    """Extra query strings of the partials a route serves."""
    if route.key == "trajectory-evidence":
        step = world.step.pk
        return [
            ("", {}),
            ("?part=top", {"htmx": True}),
            ("?part=columns&from=0&to=10", {"htmx": True}),
            (f"?part=step&step={step}", {"htmx": True}),
        ]
    if route.key == "api:label-list":
        return [("", {}), (f"?step={world.step.pk}", {}), ("?annotator=annotator2", {})]
    return [("", {})]


# Project-wide counts that include everyone's labels (how many steps carry a label, how
# many labels each schema version has) say nothing about any step's label; /readyz
# reports its own timings.
COUNTS_ONLY = {"project-home", "schema-edit", "readyz"}


def _normalised(text: str) -> str:
    # CSRF tokens are masked afresh on every render.
    return re.sub(r'(csrfmiddlewaretoken" value="|X-CSRFToken": ")[^"]+', r"\1", text)


@dataclass(frozen=True)
class Read:
    key: str
    status: int
    text: str


def _reads(visitors: Visitors, role: str, *, skip: frozenset[str] = frozenset()) -> dict[str, Read]:
    """Every GET of the project as ``role``, plain and as HTMX (the API has no partials:
    it answers HTMX as it answers anyone), with the partials' queries, the routes in
    ``skip`` aside: path -> its route, status and body (CSRF tokens blanked)."""
    seen = {}
    for route in project_routes():
        if route.key in skip:
            continue
        for query, options in _variants(route, visitors.world):
            for htmx in {False, bool(options.get("htmx"))} | {not route.is_api}:
                response = visitors.request(route, role, "GET", htmx=htmx, query=query)
                label = f"{route.path(visitors.world)}{query}{' (htmx)' if htmx else ''}"
                seen[label] = Read(route.key, response.status_code, _normalised(body(response)))
    return seen


def test_blind_annotator_reads_nothing_of_other_annotators_labels(world: World) -> None:
    """No GET route, plain or as HTMX, shows the blind annotator the other annotator's
    label (its text), while a researcher's pages do show it.

    Stronger than looking for a text: every GET route answers the blind annotator
    exactly the same before and after the other annotator's label (a -1 on a step) and
    verdict are removed. Nothing of them, not even a colour or a count on the trajectory
    page, reaches the annotator. One walk of the annotator's serves both checks."""
    visitors = Visitors(world)
    with_labels = _reads(visitors, "annotator")
    leaked = sorted(
        path for path, read in with_labels.items() if read.status == 200 and SECRET in read.text
    )
    assert not leaked, f"another annotator's label reached a blind annotator: {leaked}"
    # The pages that matter were read (not refused), so the check above means something.
    trajectory = f"/t/{world.trajectory.pk}/"
    for page in (trajectory, f"/steps/{world.step.pk}/history/", "/api/v1/labels/"):
        assert with_labels[page].status == 200, f"{page} was not readable by the annotator"

    # A researcher does read the label on these pages, so the search above would find it.
    routes: dict[str, Route] = {}
    for route in project_routes():
        routes.setdefault(route.key, route)  # the plain path, not a format suffix's
    for key in (
        "step-history",
        "review-trajectory",
        "api:label-list",
        "api:trajectory-labels",
        "episode-panel",
        "api:api-trajectory-episode",
    ):
        response = visitors.request(routes[key], "researcher", "GET")
        shown = response.status_code == 200 and SECRET in body(response)
        assert shown, f"a researcher should see the label on {routes[key].path(world)}"

    StepLabel.objects.filter(annotator=world.other_annotator).delete()
    TrajectoryLabel.objects.filter(annotator=world.other_annotator).delete()
    without_labels = _reads(visitors, "annotator", skip=frozenset(COUNTS_ONLY))
    changed = sorted(
        path
        for path, read in without_labels.items()
        if (read.status, read.text) != (with_labels[path].status, with_labels[path].text)
    )
    assert not changed, f"pages that show the other annotator's work: {changed}"


def test_blind_annotator_cannot_fetch_the_label_by_id_or_filter(world: World) -> None:
    visitors = Visitors(world)
    routes = {route.key: route for route in project_routes()}
    detail = visitors.request(routes["api:label-detail"], "annotator", "GET")
    assert detail.status_code == 404
    listed = visitors.request(
        routes["api:label-list"], "annotator", "GET", query=f"?step={world.step.pk}"
    )
    assert listed.status_code == 200
    assert listed.json()["results"] == []
    on_trajectory = visitors.request(routes["api:trajectory-labels"], "annotator", "GET")
    assert on_trajectory.status_code == 200
    assert on_trajectory.json() == []
    # The compare pages show everyone's labels: refused in a blind project.
    for key in (
        "compare",
        "compare-humans",
        "compare-decisive",
        "compare-disagreements",
        "failure-overview",
        "failure-modes",
        "api:api-failure-modes",
    ):
        assert visitors.request(routes[key], "annotator", "GET").status_code == 403, key


def test_blind_annotator_cannot_reach_failure_modes_by_run_or_filter(world: World) -> None:
    """A failure mode is made of everyone's first errors: as the failures page, its run's
    row, the run through the API and the ``failure_mode`` filter (list page and API) are
    refused to a blind annotator, and open to a researcher."""
    visitors = Visitors(world)
    routes = {route.key: route for route in project_routes()}
    for key in ("failure-mode-run-row", "failure-mode-run-cancel", "api:failure-mode-run-detail"):
        method = "POST" if key.endswith("cancel") else "GET"
        assert visitors.request(routes[key], "annotator", method).status_code == 403, key
    row = visitors.request(routes["failure-mode-run-row"], "researcher", "GET", htmx=True)
    assert row.status_code == 200
    assert (
        visitors.request(routes["api:failure-mode-run-detail"], "researcher", "GET").status_code
        == 200
    )
    mode = f"failure_mode={world.failure_mode.pk}"
    listed = visitors.request(routes["trajectory-list"], "annotator", "GET", query=f"?{mode}")
    assert listed.status_code == 200
    page = body(listed)
    assert "only researchers and admins filter by it" in page
    assert f'href="/t/{world.trajectory.pk}/"' not in page  # nothing listed beside the refusal
    api = visitors.request(
        routes["api:trajectory-list"],
        "annotator",
        "GET",
        query=f"?project={world.project.slug}&{mode}",
    )
    assert api.status_code == 400 and "failure_mode" in api.json()
    researcher = visitors.request(routes["trajectory-list"], "researcher", "GET", query=f"?{mode}")
    assert "only researchers and admins filter by it" not in body(researcher)
    assert f'href="/t/{world.trajectory.pk}/"' in body(researcher)
    api = visitors.request(
        routes["api:trajectory-list"],
        "researcher",
        "GET",
        query=f"?project={world.project.slug}&{mode}",
    )
    assert api.status_code == 200, api.content


@pytest.mark.parametrize(
    "query",
    [
        "first_error=yes",
        "min_agreement=0.5",
        "human_model=disagree&model_scorer={scorer}",
        "advantage_disagrees=yes",
        "credit_above=0.1&credit_run={run}",
    ],
)
def test_blind_annotator_cannot_filter_by_everyones_labels_or_the_models(
    world: World, query: str
) -> None:
    """Each of these filters reads everyone's labels, the model's scores or credits: a
    blind annotator filtering by them would read what the project hides (#39's note). The
    list and the API refuse them by name."""
    visitors = Visitors(world)
    routes = {route.key: route for route in project_routes()}
    query = query.format(scorer=world.scorer.name, run=world.attribution_run.pk)
    name = query.split("=")[0]
    listed = visitors.request(routes["trajectory-list"], "annotator", "GET", query=f"?{query}")
    assert "only researchers and admins filter by it" in body(listed)
    api = visitors.request(
        routes["api:trajectory-list"],
        "annotator",
        "GET",
        query=f"?project={world.project.slug}&{query}",
    )
    assert api.status_code == 400 and name in api.json()
    researcher = visitors.request(routes["trajectory-list"], "researcher", "GET", query=f"?{query}")
    assert "only researchers and admins filter by it" not in body(researcher)


def test_blind_annotator_cannot_download_exports(world: World) -> None:
    """An export's files carry every annotator's labels: in a blind project they are for
    researchers and admins only, on the page and through the API."""
    visitors = Visitors(world)
    routes = {route.key: route for route in project_routes()}
    for key in ("export-download", "api:export-download"):
        assert visitors.request(routes[key], "annotator", "GET").status_code == 403, key
        assert visitors.request(routes[key], "researcher", "GET").status_code == 200, key


def test_blind_annotators_export_page_offers_no_download_or_cancel(world: World) -> None:
    """The export page does not offer what the annotator would be refused: no link to
    a file, no cancel button; a researcher gets both."""
    visitors = Visitors(world)
    routes = {route.key: route for route in project_routes()}
    detail = routes["export-detail"]
    files = f"/exports/{world.export_job.pk}/files/"
    annotator_page = body(visitors.request(detail, "annotator", "GET"))
    assert "train.jsonl" in annotator_page and files not in annotator_page
    assert "only researchers and admins download" in annotator_page
    researcher_page = body(visitors.request(detail, "researcher", "GET"))
    assert f"{files}train.jsonl" in researcher_page and f"{files}manifest.json" in researcher_page

    world.export_job.status = "running"
    world.export_job.save(update_fields=["status"])
    assert "Cancel</button>" not in body(visitors.request(detail, "annotator", "GET"))
    assert "Cancel</button>" in body(visitors.request(detail, "researcher", "GET"))


def test_blind_annotator_cannot_read_step_credits(world: World) -> None:
    """Credits are computed from model scores or from everyone's labels (a first-error
    credit marks where the majority put the first error)."""
    visitors = Visitors(world)
    routes = {route.key: route for route in project_routes()}
    credits = routes["api:attribution-run-credits"]
    assert visitors.request(credits, "annotator", "GET").status_code == 403
    response = visitors.request(credits, "researcher", "GET")
    assert response.status_code == 200 and response.json()["results"]
