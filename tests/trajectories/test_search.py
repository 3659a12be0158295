"""Search and the step and metadata filters of the trajectory list, on real files (tau-bench
airline runs, Who&When multi-agent chats), through the page, saved selections and the API;
and the list's columns on labels, scores and cost at a constant query count."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from exports.services import selection_save
from labeling.models import LabelSchema, StepLabel
from labeling.services import queue_create
from scoring import prm
from scoring.models import AttributionRun, Scorer, ScoringRun, StepCredit, StepScore
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_DIR, WHO_AND_WHEN_LABELABLE
from tests.trajectories.test_views import row_ids
from tests.waiting import wait_until
from trajectories.models import Membership, Project, Step, StepSearch, Trajectory
from trajectories.search import search_probe_pays
from trajectories.selection import TrajectoryFilters
from trajectories.selection import selection_definition as trajectory_filters_definition
from trajectories.selection import selection_parse as trajectory_filters_from
from trajectories.selectors import trajectories_filtered, trajectory_list_page
from trajectories.services import (
    trajectory_import,
    trajectory_records_import,
    trajectory_search_index,
)

REALDATA = Path(__file__).resolve().parents[2].parent / "shared" / "realdata"
TAU_BENCH = REALDATA / "tau_bench" / "gpt-4o-airline.json"


@pytest.fixture
def tau(project: Project) -> Project:
    trajectory_import(project=project, source_format="openai-messages", path=TAU_BENCH)
    return project


def ids(project: Project, filters: TrajectoryFilters) -> set[int]:
    return set(trajectories_filtered(project, filters).values_list("id", flat=True))


def with_word(project: Project, word: str, *, without: str = "", also: str = "") -> set[int]:
    """The trajectories whose task or some one step has ``word`` (and ``also``, and not
    ``without``), by Python's regex: what the search must find, told another way."""

    def has(text: str, word: str) -> bool:
        return re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE) is not None

    def matches(text: str) -> bool:
        return (
            has(text, word)
            and (not also or has(text, also))
            and (not without or not has(text, without))
        )

    found = {t.pk for t in Trajectory.objects.filter(project=project) if matches(t.task)}
    steps = Step.objects.filter(trajectory__project=project).values_list("trajectory_id", "content")
    return found | {trajectory for trajectory, content in steps if matches(content)}


def test_search_finds_a_word_of_the_real_file_before_and_after_indexing(tau: Project) -> None:
    expected = with_word(tau, "boston")
    assert 0 < len(expected) < Trajectory.objects.filter(project=tau).count()
    # Not indexed yet: the worker has not run, so the search reads the text.
    assert not StepSearch.objects.exists()
    assert ids(tau, TrajectoryFilters(q="Boston")) == expected
    written = trajectory_search_index(project_id=tau.pk)
    assert written == Step.objects.filter(trajectory__project=tau).count()
    assert ids(tau, TrajectoryFilters(q="Boston")) == expected
    assert ids(tau, TrajectoryFilters(q="boston")) == expected
    # Indexing again writes nothing.
    assert trajectory_search_index(project_id=tau.pk) == 0


def test_search_syntax_phrase_or_and_exclusion(tau: Project) -> None:
    trajectory_search_index(project_id=tau.pk)
    # The words of a query meet in one step (or the task), not anywhere in a trajectory.
    both = with_word(tau, "boston", also="insurance")
    assert 0 < len(both) < len(with_word(tau, "boston"))
    assert ids(tau, TrajectoryFilters(q="boston insurance")) == both
    assert ids(tau, TrajectoryFilters(q="boston or wheelchair")) == with_word(
        tau, "boston"
    ) | with_word(tau, "wheelchair")
    assert ids(tau, TrajectoryFilters(q="boston -insurance")) == with_word(
        tau, "boston", without="insurance"
    )
    phrase = {
        t
        for t, content in Step.objects.filter(trajectory__project=tau).values_list(
            "trajectory_id", "content"
        )
        if re.search(r"\bflying to boston\b", content, re.IGNORECASE)
    }
    assert ids(tau, TrajectoryFilters(q='"flying to boston"')) >= phrase
    assert ids(tau, TrajectoryFilters(q="zzqx-not-a-word")) == set()


def test_an_identifier_is_searched_whole_on_the_real_file(tau: Project) -> None:
    """``basic_economy`` (the tool calls' cabin class) is not the words "basic economy"
    the airline policy of every task uses (#40: it matched every run)."""

    def has(text: str, pattern: str) -> bool:
        return re.search(pattern, text, re.IGNORECASE) is not None

    def found(pattern: str) -> set[int]:
        texts = [(t.pk, t.task) for t in Trajectory.objects.filter(project=tau)]
        steps = Step.objects.filter(trajectory__project=tau)
        texts += steps.values_list("trajectory_id", "content")
        return {pk for pk, text in texts if has(text, pattern)}

    identifier = found(r"\bbasic_economy\b")
    words = found(r"\bbasic\W+economy\b")
    every = set(Trajectory.objects.filter(project=tau).values_list("id", flat=True))
    assert 0 < len(identifier) < len(every)
    for _ in ("unindexed", "indexed"):
        assert ids(tau, TrajectoryFilters(q="basic_economy")) == identifier
        # Its parts are still words, and the phrase still finds the prose and the identifier.
        assert ids(tau, TrajectoryFilters(q='"basic economy"')) == words | identifier
        assert ids(tau, TrajectoryFilters(q="basic_economy -economy")) == set()
        trajectory_search_index(project_id=tau.pk)


def test_search_mixes_indexed_and_unindexed_trajectories(project: Project) -> None:
    old = trajectory_with_steps(project, ["the quokka sleeps"], task="animals")
    trajectory_search_index(project_id=project.pk)
    new = trajectory_with_steps(project, ["another quokka"], task="more animals")
    by_task = trajectory_with_steps(project, ["nothing here"], task="a quokka task")
    assert ids(project, TrajectoryFilters(q="quokka")) == {old.pk, new.pk, by_task.pk}


def test_an_unindexed_trajectory_has_its_own_text_read_not_the_projects(project: Project) -> None:
    """The text of a trajectory the index has not reached yet is read for that trajectory
    alone: hashed, the check computed the document of every step of the project whenever
    one trajectory was unindexed (100 s at 9M steps, #37)."""
    for n in range(30):
        trajectory_with_steps(project, [f"indexed step {n}", "a quokka"], task="indexed")
    trajectory_search_index(project_id=project.pk)
    late = trajectory_with_steps(project, ["a late quokka"], task="late")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE trajectories_step")
        cursor.execute("ANALYZE trajectories_trajectory")
    found = trajectories_filtered(project, TrajectoryFilters(q="quokka"))
    assert late.pk in set(found.values_list("id", flat=True))
    assert found.count() == 31
    plan = found.order_by("-id")[:50].explain()
    lines = plan.splitlines()
    reading_steps = [
        line.strip()
        for number, line in enumerate(lines)
        if line.strip().startswith("SubPlan")
        and "trajectories_step " in " ".join(lines[number + 1 : number + 3]) + " "
    ]
    assert reading_steps, plan
    assert all(f"hashed {name}" not in plan for name in reading_steps), plan


def analysed(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %s", [table])
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_large_indexing_analyses_the_search_tables(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written a chunk of trajectories per transaction, the documents never trip the
    analyse on commit; an indexing of many analyses them at its end, else the planner
    reads the whole word index per trajectory until autovacuum comes round."""
    from trajectories.services import search

    before = analysed("trajectories_stepsearch")
    trajectory_with_steps(project, ["one small step"], task="t")
    trajectory_search_index(project_id=project.pk)
    assert analysed("trajectories_stepsearch") == before

    monkeypatch.setattr(search, "SEARCH_ANALYZE_AFTER", 2)
    trajectory_with_steps(project, ["a step", "and another"], task="u")
    trajectory_search_index(project_id=project.pk)
    assert wait_until(lambda: analysed("trajectories_stepsearch") > before, timeout=10)


def tool_calls(run: dict[str, Any]) -> set[str]:
    return {
        call["function"]["name"]
        for message in run["traj"]
        for call in message.get("tool_calls") or ()
    }


def test_tool_and_kind_filters_on_the_real_file(tau: Project) -> None:
    runs = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    booking = sum("book_reservation" in tool_calls(run) for run in runs)
    assert 0 < booking < len(runs)
    assert len(ids(tau, TrajectoryFilters(tool="book_reservation"))) == booking
    # Tool and kind hold for one step: tool results carry the tool's name too.
    calls = ids(tau, TrajectoryFilters(tool="book_reservation", kind="tool_call"))
    assert len(calls) == booking
    assert ids(tau, TrajectoryFilters(tool="book_reservation", kind="thought")) == set()
    # A trailing * takes the tools whose names start so.
    updating = sum(
        any(name.startswith("update_reservation") for name in tool_calls(run)) for run in runs
    )
    assert 0 < updating < len(runs)
    assert len(ids(tau, TrajectoryFilters(tool="update_reservation*"))) == updating
    assert ids(tau, TrajectoryFilters(tool="update_reservation")) == set()


def test_metadata_filters_on_the_real_file(tau: Project) -> None:
    runs = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    trial_zero = sum(run["trial"] == 0 for run in runs)
    assert len(ids(tau, TrajectoryFilters(meta="metadata.trial = 0"))) == trial_zero
    # Some runs have a null cost: never in a range.
    assert any(run["info"]["user_cost"] is None for run in runs)

    def costly(run: dict[str, Any]) -> bool:
        cost = run["info"]["user_cost"]
        return isinstance(cost, float) and cost >= 0.003

    assert 0 < sum(map(costly, runs)) < len(runs)
    found = ids(tau, TrajectoryFilters(meta="metadata.info.user_cost >= 0.003"))
    assert len(found) == sum(map(costly, runs))
    both = ids(tau, TrajectoryFilters(meta="metadata.info.user_cost >= 0.003, trial != 0"))
    assert len(both) == sum(costly(run) and run["trial"] != 0 for run in runs)
    # Text is never in a numeric range, and a missing key never matches.
    assert ids(tau, TrajectoryFilters(meta="metadata.info.source >= 0")) == set()
    assert ids(tau, TrajectoryFilters(meta="metadata.no_such_key != 1")) == set()


@pytest.mark.django_db
def test_a_metadata_equality_means_the_same_asked_through_the_index(project: Project) -> None:
    """An equality is also asked as containment (the trajectory table's GIN index answers
    it): JSON equality still decides, so 3 equals 3.0, a value inside an array is not
    equal to it, and a whole-number key still indexes into an array."""
    made = {
        name: trajectory_with_steps(project, ["s"], external_id=name, metadata=metadata)
        for name, metadata in {
            "int": {"level": 3, "run": {"name": "a"}, "tags": ["x", "y"]},
            "float": {"level": 3.0, "run": {"name": "b"}, "tags": ["y"]},
            "array": {"level": [3], "run": {"name": ["a"]}, "tags": "x"},
            "none": {},
        }.items()
    }

    def named(meta: str) -> set[str]:
        filters = TrajectoryFilters(meta=meta)
        return {t.external_id for t in made.values() if t.pk in ids(project, filters)}

    assert named("metadata.level = 3") == {"int", "float"}
    assert named("metadata.run.name = a") == {"int"}
    assert named("metadata.tags.0 = x") == {"int"}
    assert named("metadata.tags = x") == {"array"}
    assert named("metadata.level != 3") == {"array"}
    with CaptureQueriesContext(connection) as queries:
        named("metadata.run.name = a")
    assert any('"metadata" @>' in query["sql"] for query in queries.captured_queries)


def test_agent_filter_on_who_and_when_through_the_mapped_importer(project: Project) -> None:
    for name in ("Algorithm-Generated/1.json", "Hand-Crafted/24.json"):
        trajectory_import(
            project=project,
            source_format="mapped",
            path=WHO_AND_WHEN_DIR / name,
            mapping=WHO_AND_WHEN_LABELABLE,
        )
    [ag2] = ids(project, TrajectoryFilters(agent="Excel_Expert"))
    assert Trajectory.objects.get(pk=ag2).metadata["mistake_agent"] == "Excel_Expert"
    assert ids(project, TrajectoryFilters(meta="metadata.mistake_agent = Excel_Expert")) == {ag2}
    assert ids(project, TrajectoryFilters(agent="Computer_terminal", kind="message")) == {ag2}
    assert ids(project, TrajectoryFilters(agent="Nobody")) == set()


def test_error_step_filter(project: Project) -> None:
    failed = trajectory_with_steps(project, ["call", "boom"])
    Step.objects.filter(trajectory=failed, index=1).update(metadata={"error": "timeout"})
    fine = trajectory_with_steps(project, ["call", "ok"])
    assert ids(project, TrajectoryFilters(error_steps="yes")) == {failed.pk}
    assert ids(project, TrajectoryFilters(error_steps="no")) == {fine.pk}


FULL = TrajectoryFilters(
    outcome="failure",
    q='"flying to boston" -insurance',
    tool="book_reservation",
    agent="Excel_Expert",
    kind="tool_call",
    error_steps="yes",
    meta="metadata.level = 3, metadata.cost >= 0.5",
)


def test_new_filters_round_trip_through_a_saved_selection(project: Project) -> None:
    definition = trajectory_filters_definition(FULL)
    assert trajectory_filters_from(json.loads(json.dumps(definition))) == FULL
    selection = selection_save(project=project, name="hard-ones", filters=FULL, user=None)
    selection.refresh_from_db()
    assert trajectory_filters_from(selection.definition) == FULL


def test_a_queue_takes_the_trajectories_a_search_and_tool_filter_find(tau: Project) -> None:
    filters = TrajectoryFilters(q="boston", tool="book_reservation")
    expected = with_word(tau, "boston") & ids(tau, TrajectoryFilters(tool="book_reservation"))
    assert expected
    queue = queue_create(project=tau, name="boston bookings", created_by=None, filters=filters)
    assert set(queue.items.values_list("trajectory_id", flat=True)) == expected


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"metadata": "metadata.level == 3"}, "metadata"),
        ({"metadata": "level >= high"}, "compares numbers"),
        ({"step_kind": "dance"}, "step_kind"),
        ({"error_step": True}, "error_step"),
        ({"search": "x" * 600}, "search"),
    ],
)
def test_a_bad_stored_filter_is_named(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        trajectory_filters_from(definition)


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user


def test_the_list_page_searches_and_filters(tau: Project, researcher: User) -> None:
    client = Client()
    client.force_login(researcher)
    url = reverse("trajectory-list", args=[tau.slug])
    response = client.get(url, {"q": "boston", "tool": "book_reservation"})
    assert response.status_code == 200
    expected = with_word(tau, "boston") & ids(tau, TrajectoryFilters(tool="book_reservation"))
    assert set(row_ids(response.content.decode())) == expected
    # The saved-selection link carries the search.
    assert "q=boston" in response.content.decode()


def test_a_malformed_metadata_filter_is_a_form_error_naming_the_field(
    tau: Project, researcher: User
) -> None:
    client = Client()
    client.force_login(researcher)
    url = reverse("trajectory-list", args=[tau.slug])
    response = client.get(url, {"meta": "metadata.level == 3"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "<p>Metadata: &#x27;metadata.level == 3&#x27;: use one operator" in html
    # Nothing is listed beside it (#40: the rest read as if it had been applied).
    assert row_ids(html) == []


def test_the_api_takes_the_filters(tau: Project, researcher: User) -> None:
    client = Client()
    client.force_login(researcher)
    url = "/api/v1/trajectories/"
    response = client.get(url, {"project": tau.slug, "q": "boston", "tool": "book_reservation"})
    assert response.status_code == 200, response.content
    expected = with_word(tau, "boston") & ids(tau, TrajectoryFilters(tool="book_reservation"))
    assert {row["id"] for row in response.json()["results"]} == expected
    bad = client.get(url, {"project": tau.slug, "meta": "metadata.cost >= cheap"})
    assert bad.status_code == 400
    assert "compares numbers" in bad.json()["meta"][0]
    assert client.get(url, {"project": tau.slug, "kind": "dance"}).status_code == 400
    assert client.get(url, {"q": "boston"}).json() == {
        "project": ["Filters need a project (?project=SLUG)."]
    }


# The list's columns


def test_columns_show_progress_first_error_score_and_cost(project: Project) -> None:
    trajectory = trajectory_with_steps(
        project, ["a", "b", "c", "d"], metadata={"cost": 0.25}, task="t"
    )
    steps = list(trajectory.steps.order_by("index"))
    alice = User.objects.create(username="alice")
    bob = User.objects.create(username="bob")
    schema = LabelSchema.objects.get(project=project, is_active=True)
    for step, value in zip(steps[:3], (1, -1, -1), strict=True):
        for annotator in (alice, bob):
            StepLabel.objects.create(step=step, annotator=annotator, schema=schema, value=value)
    scorer = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL)
    old_run = ScoringRun.objects.create(project=project, scorer=scorer)
    new_run = ScoringRun.objects.create(project=project, scorer=scorer)
    other = Scorer.objects.create(project=project, name="other", kind=prm.EXTERNAL)
    StepScore.objects.create(step=steps[0], scorer=other, run=old_run, value=0.01)
    for step, score in zip(steps, (0.9, 0.4, 0.7, 0.8), strict=True):
        StepScore.objects.create(step=step, scorer=scorer, run=new_run, value=score)
    # Credits: the latest attribution run's lowest (token saliency credits no steps).
    for method, credits in (
        ("returns", (-0.9, 0.0)),
        ("gae", (0.3, -0.2)),
        ("token-saliency", (-5.0, 0.0)),
    ):
        run = AttributionRun.objects.create(project=project, method=method, key=method)
        for step, credit in zip(steps, credits, strict=False):
            StepCredit.objects.create(step=step, run=run, value=credit)
    summed = trajectory_with_steps(project, ["x", "y"], task="u")
    for step, cost in zip(summed.steps.order_by("index"), (0.5, 0.25), strict=True):
        Step.objects.filter(pk=step.pk).update(metadata={"cost": cost})

    rows, _ = trajectory_list_page(project, TrajectoryFilters())
    cells = {row.pk: {c.name: text for c, text in row.list_cells} for row in rows}  # type: ignore[attr-defined]
    assert cells[trajectory.pk] == {
        "cost": "0.25",
        "policy": "—",
        "advantage": "—",
        "label_progress": "3/4",
        "first_error": "step 1",
        "latest_score": "0.400",
        "latest_credit": "-0.200",
    }
    assert cells[summed.pk] == {
        "cost": "0.75",
        "policy": "—",
        "advantage": "—",
        "label_progress": "0/2",
        "first_error": "—",
        "latest_score": "—",
        "latest_credit": "—",
    }


def test_the_list_query_count_does_not_grow_with_rows(project: Project) -> None:
    trajectory_with_steps(project, ["one"])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            trajectory_list_page(project, FULL)
            trajectory_list_page(project, TrajectoryFilters())
        return len(captured)

    few = queries()
    for number in range(30):
        trajectory_with_steps(project, [f"step {number}", "more"], metadata={"cost": number})
    # The searched page asks PostgreSQL for its estimates first (search_probe_pays),
    # and each page reads the first label schema (its first-error column's).
    assert queries() == few == 5


def test_blind_and_hidden_score_projects_hide_those_columns_from_annotators(
    project: Project, researcher: User, annotator: User
) -> None:
    trajectory_with_steps(project, ["a"])
    url = reverse("trajectory-list", args=[project.slug])

    def headers(user: User) -> list[str]:
        client = Client()
        client.force_login(user)
        html = client.get(url).content.decode()
        return re.findall(r'<td class="[^"]*" data-column="([a-z_]+)"', html)

    every = [
        "cost",
        "policy",
        "advantage",
        "label_progress",
        "first_error",
        "latest_score",
        "latest_credit",
    ]
    assert headers(annotator) == every
    project.settings = {"blind_labeling": True, "hide_model_scores": True}
    project.save()
    assert headers(annotator) == ["cost", "policy", "advantage"]
    assert headers(researcher) == every


def test_the_list_page_query_count_does_not_grow_with_labelled_scored_rows(
    project: Project, researcher: User
) -> None:
    client = Client()
    client.force_login(researcher)
    url = reverse("trajectory-list", args=[project.slug])
    params = {"q": "step", "meta": "metadata.cost >= 0"}
    trajectory_with_steps(project, ["step one"], metadata={"cost": 1})

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url, params).status_code == 200
        return len(captured)

    few = queries()
    schema = LabelSchema.objects.get(project=project, is_active=True)
    scorer = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL)
    run = ScoringRun.objects.create(project=project, scorer=scorer)
    for number in range(20):
        trajectory = trajectory_with_steps(
            project, [f"step {number}", "step more"], metadata={"cost": number}
        )
        for step in trajectory.steps.all():
            StepLabel.objects.create(step=step, annotator=researcher, schema=schema, value=-1)
            StepScore.objects.create(step=step, scorer=scorer, run=run, value=0.5)
    html_rows = row_ids(client.get(url, params).content.decode())
    assert len(html_rows) == 21
    assert queries() == few


def test_a_common_word_is_probed_per_trajectory_and_a_rare_one_hashed(project: Project) -> None:
    """The list page chooses how to test the steps from PostgreSQL's estimates: per
    trajectory, newest first, for a word in many steps (a first page is full after a few
    trajectories), hashed for a rare one. Both forms find the same page."""
    records = [
        {
            "id": f"t{n}",
            "task": "count",
            "steps": [
                {"content": ("falcon " if s % 2 == 0 else "") + f"plain step {s}"}
                for s in range(10)
            ]
            + ([{"content": "a quokka appears"}] if n == 7 else []),
        }
        for n in range(600)
    ]
    trajectory_records_import(project=project, records=records)
    trajectory_search_index(project_id=project.pk)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE trajectories_stepsearch")
        cursor.execute("ANALYZE trajectories_trajectorysearch")

    assert search_probe_pays("falcon", 50)
    assert not search_probe_pays("quokka", 50)

    for word in ("falcon", "quokka"):
        filters = TrajectoryFilters(q=word)
        hashed = trajectories_filtered(project, filters).order_by("-id")
        probed = trajectories_filtered(project, filters, search_probe=True).order_by("-id")
        # One probe more than the hashed form: the step documents' (the unindexed
        # trajectories' text is probed in both).
        assert str(probed.query).count("OFFSET 0") == str(hashed.query).count("OFFSET 0") + 1
        expected = sorted(with_word(project, word), reverse=True)[:50]
        assert list(probed.values_list("id", flat=True)[:50]) == expected
        assert list(hashed.values_list("id", flat=True)[:50]) == expected
        page, _ = trajectory_list_page(project, filters)
        assert [row.pk for row in page] == expected
    # The probed step test is never hashed: PostgreSQL runs it trajectory by trajectory.
    plan = (
        trajectories_filtered(project, TrajectoryFilters(q="falcon"), search_probe=True)
        .order_by("-id")[:50]
        .explain()
    )
    lines = plan.splitlines()
    step_subplans = [
        line.strip()
        for number, line in enumerate(lines)
        if line.strip().startswith("SubPlan")
        and "trajectories_stepsearch" in " ".join(lines[number + 1 : number + 3])
    ]
    assert step_subplans, plan
    assert all(f"hashed {name}" not in plan for name in step_subplans), plan
