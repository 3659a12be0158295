"""Notes to taxonomy: the critiques of episode verdicts grouped by meaning (the failure
modes' clustering, run as a job), a re-run keeping numbers and tags, the failure-modes
page's notes section, and a group made an error tag of a label schema by an admin (a new
schema version, whose tag the episode verdicts' taxonomy then offers)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from discovery.models import NoteGroup, NoteRun
from discovery.note_services import note_group_tag, note_run_start, notes_execute
from labeling.models import EpisodeVerdict, LabelSchema
from labeling.services import LabelingError
from labeling.services.rubrics import failure_modes
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Project

pytestmark = pytest.mark.django_db

NOTES = {
    "tool": [
        "The agent ignored the error the search tool returned",
        "Tool call failed with an error and the agent carried on as if it worked",
        "It never read the booking tool's error message",
    ],
    "math": [
        "Arithmetic slip: 12 times 3 computed as 38",
        "The sum of the prices is wrong, 45 not 54",
        "Multiplied the unit price by the wrong quantity",
    ],
    "refuse": [
        "Refused to help although the request was allowed",
        "Said it cannot assist with the change and gave up",
        "Declined the user's request for no reason",
    ],
}


def noted(project: Project, name: str, critique: str, annotator: User) -> EpisodeVerdict:
    trajectory = trajectory_with_steps(project, ["A step."], external_id=name, success=False)
    return EpisodeVerdict.objects.create(
        trajectory=trajectory, annotator=annotator, outcome="failure", critique=critique
    )


@pytest.fixture
def notes(project: Project) -> dict[str, list[EpisodeVerdict]]:
    annotator = UserFactory.create(username="coder")
    made = {
        theme: [noted(project, f"{theme}{i}", text, annotator) for i, text in enumerate(texts)]
        for theme, texts in NOTES.items()
    }
    # A verdict without a note is not grouped.
    trajectory = trajectory_with_steps(project, ["x"], external_id="silent")
    EpisodeVerdict.objects.create(trajectory=trajectory, annotator=annotator, outcome="failure")
    return made


def grouped(project: Project) -> NoteRun:
    return notes_execute(run_id=note_run_start(project=project, user=None).pk)


def themes(run: NoteRun, notes: dict[str, list[EpisodeVerdict]]) -> list[list[str]]:
    theme_of = {v.pk: theme for theme, verdicts in notes.items() for v in verdicts}
    return sorted(sorted({theme_of[pk] for pk in group.members}) for group in run.groups.all())


def test_notes_are_grouped_by_meaning(
    project: Project, notes: dict[str, list[EpisodeVerdict]]
) -> None:
    run = grouped(project)
    assert run.status == "done", run.error
    assert (run.total, run.done, run.k) == (9, 9, 3)
    assert themes(run, notes) == [["math"], ["refuse"], ["tool"]]
    for group in run.groups.all():
        assert group.size == 3 and group.share == pytest.approx(1 / 3)
        assert len(group.examples) == 3 and set(group.examples) == set(group.members)
        assert group.name and group.words and not group.tag


def test_a_rerun_keeps_numbers_and_the_tags_made(
    project: Project, notes: dict[str, list[EpisodeVerdict]]
) -> None:
    first = grouped(project)
    schema = LabelSchema.objects.get(project=project, is_active=True)
    tool = next(g for g in first.groups.all() if notes["tool"][0].pk in g.members)
    note_group_tag(group=tool, schema=schema, tag="ignored tool error")
    noted(project, "tool9", "The agent ignored the weather tool's error", UserFactory.create())
    again = grouped(project)
    assert again.total == 10
    assert {g.number for g in again.groups.all()} == {g.number for g in first.groups.all()}
    kept = again.groups.get(number=tool.number)
    assert kept.kept and kept.tag == "ignored tool error" and kept.size == 4


def test_a_group_becomes_an_error_tag_in_a_new_schema_version(
    project: Project, notes: dict[str, list[EpisodeVerdict]]
) -> None:
    run = grouped(project)
    group = run.groups.first()
    assert group is not None
    schema = LabelSchema.objects.get(project=project, is_active=True)
    before = list(schema.error_tags)
    assert "gave up" not in failure_modes(project)
    saved = note_group_tag(group=group, schema=schema, tag="  gave   up ")
    assert saved.version == schema.version + 1 and saved.is_active
    assert saved.error_tags == [*before, "gave up"]
    schema.refresh_from_db()
    assert not schema.is_active and schema.error_tags == before  # the old version stays
    group.refresh_from_db()
    assert group.tag == "gave up"
    # The episode verdicts' taxonomy offers it now.
    assert "gave up" in failure_modes(project)
    with pytest.raises(LabelingError, match="already"):
        note_group_tag(group=group, schema=saved, tag="gave up")
    with pytest.raises(LabelingError, match="active schema"):
        note_group_tag(group=group, schema=schema, tag="other")
    with pytest.raises(LabelingError, match="name"):
        note_group_tag(group=group, schema=saved, tag="   ")


def test_no_notes_is_an_empty_run(project: Project) -> None:
    run = grouped(project)
    assert (run.status, run.total, run.k) == ("done", 0, 0)
    assert not NoteGroup.objects.exists()


def test_the_page_groups_notes_and_an_admin_makes_a_tag(
    project: Project, notes: dict[str, list[EpisodeVerdict]], owner: User, client: Client
) -> None:
    page = reverse("failure-modes", args=["demo"])
    client.force_login(owner)
    html = client.get(page).content.decode()
    assert 'id="notes"' in html and "9 notes written" in html
    started = client.post(reverse("notes-start", args=["demo"]))
    assert started.status_code == 302 and started["Location"] == page + "#notes"
    run = NoteRun.objects.get()
    notes_execute(run_id=run.pk)
    html = client.get(page).content.decode()
    assert len(re.findall(r'class="failure-mode note-group"', html)) == 3
    assert "33% of notes" in html
    for group in run.groups.all():
        assert f'id="note-group-{group.pk}"' in html
        shown = EpisodeVerdict.objects.get(pk=group.examples[0]).critique
        assert shown in html.replace("&#x27;", "'")
    assert html.count("Make an error tag") == 3

    tagged = run.groups.first()
    assert tagged is not None
    schema = LabelSchema.objects.get(project=project, is_active=True)
    url = reverse("note-group-tag", args=[tagged.pk])
    answer = client.post(url, {"tag": "tool error ignored", "schema": schema.name})
    assert answer["Location"] == page + "#notes"
    active = LabelSchema.objects.get(project=project, is_active=True)
    assert active.version == schema.version + 1 and "tool error ignored" in active.error_tags
    html = client.get(page).content.decode()
    assert "tool error ignored" in html and html.count("Make an error tag") == 2
    # Refused: a bad schema, an unknown parameter; nothing new is saved.
    for form in ({"tag": "x", "schema": "nope"}, {"tag": "x", "schema": active.name, "y": "1"}):
        client.post(url, form)
    assert LabelSchema.objects.filter(project=project).count() == 2


def test_only_admins_tag_and_only_managers_group(
    project: Project, notes: dict[str, list[EpisodeVerdict]], client: Client
) -> None:
    run = grouped(project)
    group = run.groups.first()
    assert group is not None
    url = reverse("note-group-tag", args=[group.pk])
    schema = LabelSchema.objects.get(project=project, is_active=True)
    researcher = UserFactory.create(username="res")
    MembershipFactory.create(user=researcher, project=project, role="researcher")
    client.force_login(researcher)
    html = client.get(reverse("failure-modes", args=["demo"])).content.decode()
    assert "Group notes" in html and "Make an error tag" not in html
    assert client.post(url, {"tag": "x", "schema": schema.name}).status_code == 403
    annotator = UserFactory.create(username="reader")
    MembershipFactory.create(user=annotator, project=project, role="annotator")
    client.force_login(annotator)
    html = client.get(reverse("failure-modes", args=["demo"])).content.decode()
    assert "Group notes" not in html and 'id="note-group-' in html
    assert client.post(reverse("notes-start", args=["demo"])).status_code == 403
    assert LabelSchema.objects.filter(project=project).count() == 1
