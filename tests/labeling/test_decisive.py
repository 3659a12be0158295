"""The decisive-failure label (which agent, at which step, decided that a run failed):
imported from the real Who&When logs end to end, the agents a trajectory offers, and
setting it through the service, the page's panel and the API, with errors naming the
field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from labeling.decisive_sources import decisive_source_parse, decisive_source_sql
from labeling.models import TrajectoryLabel
from labeling.services import LabelingError, NotAllowed, agent_steps, decisive_failure_set
from tests.labeling.conftest import state
from tests.trajectories.test_formats_mapped import (
    WHO_AND_WHEN_COUNTS,
    WHO_AND_WHEN_DIR,
    WHO_AND_WHEN_LABELABLE,
)
from trajectories.agents import agent_name, trajectory_agents
from trajectories.formats.mapped import MappingError, load_mapping
from trajectories.models import ImportBatch, Project, Trajectory
from trajectories.services import trajectory_import
from trajectories.services.imports import ImportRejected

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
WHO_AND_WHEN_DECISIVE = {
    **WHO_AND_WHEN_LABELABLE,
    "decisive": {"agent": "mistake_agent", "step": "mistake_step", "reason": "mistake_reason"},
}


def who_and_when(project: Project, name: str) -> Trajectory:
    trajectory_import(
        project=project,
        source_format="mapped",
        path=WHO_AND_WHEN_DIR / name,
        mapping=WHO_AND_WHEN_DECISIVE,
    )
    raw = json.loads((WHO_AND_WHEN_DIR / name).read_text(encoding="utf-8"))
    return Trajectory.objects.get(project=project, external_id=raw["question_ID"])


def imported_verdict(trajectory: Trajectory) -> TrajectoryLabel:
    return TrajectoryLabel.objects.get(trajectory=trajectory, annotator__username="import:mapped")


# --- Import ------------------------------------------------------------------------------


def test_every_real_who_and_when_file_imports_its_decisive_failure(project: Project) -> None:
    for name in WHO_AND_WHEN_COUNTS:
        trajectory = who_and_when(project, name)
        raw = json.loads((WHO_AND_WHEN_DIR / name).read_text(encoding="utf-8"))
        verdict = imported_verdict(trajectory)
        assert verdict.decisive_agent == raw["mistake_agent"]
        assert verdict.decisive_step == int(raw["mistake_step"]) == WHO_AND_WHEN_COUNTS[name][2]
        assert verdict.decisive_reason == raw["mistake_reason"]
        # The same verdict carries the first error the mapping reads from mistake_step.
        assert verdict.first_error_index == verdict.decisive_step
        assert verdict.status == TrajectoryLabel.Status.SUBMITTED
    assert TrajectoryLabel.objects.filter(annotator__username="import:mapped").count() == 5
    # And it reads back as the import's decisive-failure source.
    sql, params = decisive_source_sql(project, decisive_source_parse("import:mapped"))

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = {(agent, step) for _, agent, step in cursor.fetchall()}
    assert rows == {
        ("WebSurfer", 12),
        ("Orchestrator", 1),
        ("Excel_Expert", 0),
        ("Lyrics_Expert", 0),
        ("Mesopotamian_Number_Systems_Expert", 1),
    }


def test_a_decisive_agent_not_in_the_trajectory_rejects_the_import(
    project: Project, tmp_path: Path
) -> None:
    raw = json.loads((WHO_AND_WHEN_DIR / "Algorithm-Generated/1.json").read_text(encoding="utf-8"))
    # Computer_terminal speaks in it, but as an input (its output), so it decides nothing.
    for agent in ("Nobody_Expert", "Computer_terminal"):
        path = tmp_path / f"{agent}.json"
        path.write_text(json.dumps({**raw, "mistake_agent": agent}), encoding="utf-8")
        with pytest.raises(ImportRejected):
            trajectory_import(
                project=project, source_format="mapped", path=path, mapping=WHO_AND_WHEN_DECISIVE
            )
        batch = ImportBatch.objects.filter(file_name=path.name).latest("pk")
        [error] = batch.errors
        assert error["field"] == "mistake_agent"
        assert agent in error["message"] and "Excel_Expert" in error["message"]
    assert not Trajectory.objects.filter(project=project).exists()
    assert not TrajectoryLabel.objects.exists()


def test_decisive_mapping_errors_name_the_key() -> None:
    with pytest.raises(MappingError, match=r"'decisive.who': unknown"):
        load_mapping({**WHO_AND_WHEN_LABELABLE, "decisive": {"who": "mistake_agent"}})
    with pytest.raises(MappingError, match=r"'decisive': needs 'agent' or 'step'"):
        load_mapping({**WHO_AND_WHEN_LABELABLE, "decisive": {"reason": "mistake_reason"}})
    with pytest.raises(MappingError, match=r"'decisive.step': expected a dotted path"):
        load_mapping({**WHO_AND_WHEN_LABELABLE, "decisive": {"step": 3}})


def test_agents_of_magentic_one_and_ag2_logs(project: Project) -> None:
    magentic = who_and_when(project, "Hand-Crafted/1.json")
    ag2 = who_and_when(project, "Algorithm-Generated/1.json")
    # Magentic-One names the speaker in role; its qualifiers are one agent.
    assert agent_name("Orchestrator (-> WebSurfer)") == "Orchestrator"
    assert agent_steps(magentic.pk).agents == ["Orchestrator", "WebSurfer"]
    assert agent_steps(magentic.pk).by_step[12] == "WebSurfer"
    assert 0 not in agent_steps(magentic.pk).by_step  # the human's question
    # AG2 names agents; the terminal's output is an input.
    assert agent_steps(ag2.pk).agents == [
        "Excel_Expert",
        "BusinessLogic_Expert",
        "DataVerification_Expert",
    ]
    assert trajectory_agents([("", "assistant", True), ("", "user", False)]) == ["assistant"]


# --- The service ---------------------------------------------------------------------------


def test_set_change_and_clear(project: Project, researcher: User) -> None:
    trajectory = who_and_when(project, "Hand-Crafted/1.json")
    verdict = decisive_failure_set(state=state(researcher, trajectory), step=12, reason="clicks")
    # The agent left out is the step's.
    assert (verdict.decisive_agent, verdict.decisive_step) == ("WebSurfer", 12)
    assert verdict.decisive_reason == "clicks"
    assert verdict.status == TrajectoryLabel.Status.DRAFT
    verdict = decisive_failure_set(
        state=state(researcher, trajectory), agent="Orchestrator (thought)", step=9
    )
    assert (verdict.decisive_agent, verdict.decisive_step) == ("Orchestrator", 9)
    verdict = decisive_failure_set(state=state(researcher, trajectory))
    assert (verdict.decisive_agent, verdict.decisive_step, verdict.decisive_reason) == (
        "",
        None,
        "",
    )
    # The import's own label is untouched.
    assert imported_verdict(trajectory).decisive_step == 12


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            {"step": 29},
            "step",
            "Decisive step 29 is not in this trajectory (its steps are 0 to 28)",
        ),
        (
            {"agent": "Excel_Expert"},
            "agent",
            "'Excel_Expert' is not one of this trajectory's agents (Orchestrator, WebSurfer)",
        ),
        ({"reason": "why"}, "agent", "name the agent or the step"),
    ],
)
def test_bad_input_names_the_field(
    project: Project, researcher: User, change: dict[str, Any], field: str, words: str
) -> None:
    trajectory = who_and_when(project, "Hand-Crafted/1.json")
    with pytest.raises(LabelingError) as raised:
        decisive_failure_set(state=state(researcher, trajectory), **change)
    assert raised.value.field == field and words in raised.value.message
    assert not TrajectoryLabel.objects.filter(annotator=researcher).exists()


def test_an_annotator_needs_a_lease(project: Project, annotator: User) -> None:
    trajectory = who_and_when(project, "Algorithm-Generated/21.json")
    with pytest.raises(NotAllowed):
        decisive_failure_set(state=state(annotator, trajectory), step=0)


def test_only_submitted_verdicts_count_as_a_source(project: Project, researcher: User) -> None:
    trajectory = who_and_when(project, "Algorithm-Generated/21.json")
    decisive_failure_set(state=state(researcher, trajectory), step=2)
    sql, params = decisive_source_sql(project, decisive_source_parse("human:researcher"))

    def rows() -> list[Any]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    assert rows() == []
    TrajectoryLabel.objects.filter(annotator=researcher).update(status="submitted")
    assert rows() == [(trajectory.pk, "Lyrics_Expert", 2)]
    with pytest.raises(ValueError, match="use human:<username>, import:<source> or model"):
        decisive_source_parse("human:majority")


# --- The page's panel and the API --------------------------------------------------------


def test_panel_lists_agents_and_saves_through_htmx(
    client: Client, project: Project, researcher: User
) -> None:
    trajectory = who_and_when(project, "Algorithm-Generated/1.json")
    client.force_login(researcher)
    url = reverse("decisive-failure", args=[trajectory.pk])
    panel = client.get(url, headers=HTMX).content.decode()
    assert '<option value="Excel_Expert">Excel_Expert</option>' in panel
    assert "Computer_terminal" not in panel
    assert 'max="5"' in panel and "<html" not in panel
    page = client.get(url).content.decode()
    assert "<html" in page and 'id="decisive-form"' in page

    saved = client.post(url, {"agent": "", "step": "2", "reason": "<b>wrong</b>"}, headers=HTMX)
    assert saved.status_code == 200
    html = saved.content.decode()
    assert "Saved: BusinessLogic_Expert at step" in html
    assert "&lt;b&gt;wrong&lt;/b&gt;" in html  # escaped
    mine = TrajectoryLabel.objects.get(annotator=researcher)
    assert (mine.decisive_agent, mine.decisive_step) == ("BusinessLogic_Expert", 2)

    refused = client.post(url, {"agent": "Nobody", "step": "2"}, headers=HTMX)
    assert refused.status_code == 400 and refused["HX-Retarget"] == "#flash"
    assert "Decisive agent &#x27;Nobody&#x27; is not one" in refused.content.decode()
    plain = client.post(url, {"step": "99"})
    assert plain.status_code == 302
    assert TrajectoryLabel.objects.get(annotator=researcher).decisive_step == 2
    # The trajectory page loads the panel after it shows, and lists the key.
    detail = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    assert f'hx-get="{url}"' in detail and "<kbd>d</kbd>" in detail


def test_api_sets_it_and_names_the_bad_field(
    client: Client, project: Project, researcher: User, outsider: User
) -> None:
    trajectory = who_and_when(project, "Hand-Crafted/24.json")
    url = reverse("api-trajectory-decisive", args=[trajectory.pk])
    client.force_login(researcher)
    response = client.post(
        url, {"agent": "Orchestrator", "step": 1, "reason": "bad translation"}, "application/json"
    )
    assert response.status_code == 200, response.content
    data = response.json()
    assert (data["decisive_agent"], data["decisive_step"]) == ("Orchestrator", 1)
    assert data["decisive_reason"] == "bad translation"
    assert data["annotator"] == "researcher" and data["status"] == "draft"

    bad_step = client.post(url, {"step": 5}, "application/json")
    assert bad_step.status_code == 400 and "step" in bad_step.json()
    bad_agent = client.post(url, {"agent": "WebSurfer"}, "application/json")
    assert bad_agent.status_code == 400
    assert "not one of this trajectory's agents (Orchestrator)" in bad_agent.json()["agent"]
    unknown = client.post(url, {"who": "x"}, "application/json")
    assert unknown.status_code == 400 and "who" in unknown.json()
    negative = client.post(url, {"step": -1}, "application/json")
    assert negative.status_code == 400 and "step" in negative.json()
    # The submit answer carries it too.
    submitted = client.post(
        reverse("api-trajectory-submit", args=[trajectory.pk]),
        {"finish_reason": "give_up"},
        "application/json",
    )
    assert submitted.json()["decisive_agent"] == "Orchestrator"

    client.force_login(outsider)
    assert client.post(url, {"step": 1}, "application/json").status_code == 404
