"""Saved selections: the filters they hold, the page that saves, lists and deletes them,
and exports that use them by name."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from exports.models import ExportJob, Selection
from labeling.models import LabelSchema, StepLabel
from scoring import prm
from scoring.models import AttributionRun, Scorer, StepCredit, StepScore
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project, Trajectory
from trajectories.selection import TrajectoryFilters
from trajectories.selection import selection_parse as trajectory_filters_from
from trajectories.selectors import trajectories_filtered

STEPS = ["2 + 2 = 4.", "4 * 3 = 12.", "The answer is 12."]


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user


@pytest.fixture
def labelled(project: Project) -> dict[str, Any]:
    """Four trajectories of three steps:

    - ``agreed``: alice and bob label every step alike (+1, +1, -1); the scorer agrees.
    - ``split``: both label step 0 (+1); on step 1 alice says +1, bob -1; step 2 has no
      label. The scorer says step 0 is bad.
    - ``bare``: no labels.
    - ``imported``: +1 on every step from ``import:truth`` (not a person).

    An attribution run credits ``agreed`` (0.5, 0.1, -0.7) and ``split`` (0.2, -0.6, 0).
    """
    schema = LabelSchema.objects.get(project=project)
    alice, bob = UserFactory.create(username="alice"), UserFactory.create(username="bob")
    truth = UserFactory.create(username="import:truth", is_active=False)
    made = {
        name: trajectory_with_steps(project, STEPS, external_id=name, success=name != "split")
        for name in ("agreed", "split", "bare", "imported")
    }
    steps = {name: list(t.steps.order_by("index")) for name, t in made.items()}

    def label(name: str, index: int, user: User, value: int) -> None:
        step = steps[name][index]
        StepLabel.objects.create(step=step, annotator=user, schema=schema, value=value)

    for index, value in enumerate([1, 1, -1]):
        label("agreed", index, alice, value)
        label("agreed", index, bob, value)
        label("imported", index, truth, 1)
    label("split", 0, alice, 1)
    label("split", 0, bob, 1)
    label("split", 1, alice, 1)
    label("split", 1, bob, -1)

    scorer = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL, queue="default")
    scores = {"agreed": [0.9, 0.8, 0.2], "split": [0.1, 0.9, 0.9]}
    for name, values in scores.items():
        for step, score in zip(steps[name], values, strict=True):
            StepScore.objects.create(step=step, scorer=scorer, value=score)

    run = AttributionRun.objects.create(
        project=project, method="group-relative", key="k", status=AttributionRun.Status.DONE
    )
    credits = {"agreed": [0.5, 0.1, -0.7], "split": [0.2, -0.6, 0.0]}
    for name, values in credits.items():
        for step, credit in zip(steps[name], values, strict=True):
            StepCredit.objects.create(step=step, run=run, value=credit)
    return {"trajectories": made, "run": run}


def chosen(project: Project, **filters: Any) -> set[str]:
    queryset = trajectories_filtered(project, trajectory_filters_from(filters))
    return set(queryset.values_list("external_id", flat=True))


@pytest.mark.django_db
def test_selection_filters_pick_the_expected_trajectories(
    project: Project, labelled: dict[str, Any]
) -> None:
    run = labelled["run"].pk
    assert chosen(project) == {"agreed", "split", "bare", "imported"}
    assert chosen(project, label_status="complete") == {"agreed", "imported"}
    assert chosen(project, label_status="partial") == {"split"}
    assert chosen(project, label_status="unlabelled") == {"bare"}
    # Imported labels are not annotators: only people's overlapping labels count.
    assert chosen(project, min_agreement=1.0) == {"agreed"}
    assert chosen(project, min_agreement=0.5) == {"agreed", "split"}
    assert chosen(project, min_agreement=0.0) == {"agreed", "split"}
    assert chosen(project, human_model="agree", model_scorer="prm") == {"agreed"}
    assert chosen(project, human_model="disagree", model_scorer="prm") == {"split"}
    # At a threshold of 0.95 the scorer calls every step bad: "agreed" now differs too.
    strict = {"human_model": "disagree", "model_scorer": "prm", "model_threshold": 0.95}
    assert chosen(project, **strict) == {"agreed", "split"}
    assert chosen(project, first_error="yes") == {"agreed", "split"}
    assert chosen(project, first_error="no") == {"bare", "imported"}
    assert chosen(project, credit_run=run) == {"agreed", "split"}
    assert chosen(project, credit_run=run, credit_above=0.4) == {"agreed"}
    assert chosen(project, credit_run=run, credit_below=-0.5) == {"agreed", "split"}
    assert chosen(project, credit_run=run, credit_below=-0.65) == {"agreed"}
    # Filters combine with the trajectory list's.
    assert chosen(project, first_error="yes", outcome="failure") == {"split"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"colour": "red"}, "colour: unknown filter"),
        ({"label_status": "done"}, "label_status: 'done' is not one of unlabelled"),
        ({"min_agreement": "high"}, "min_agreement: expected a number, not 'high'"),
        ({"min_agreement": 1.5}, "min_agreement: 1.5 is above 1"),
        ({"min_steps": True}, "min_steps: expected a whole number, not True"),
        ({"human_model": "agree"}, "human_model: needs model_scorer"),
        ({"credit_above": 0.3}, "credit_above: needs credit_run"),
    ],
)
def test_bad_definitions_name_the_filter(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        trajectory_filters_from(definition)


def csrf_client(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def token(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return str(client.cookies["csrftoken"].value)


@pytest.mark.django_db
def test_a_researcher_saves_lists_exports_and_deletes_a_selection(
    project: Project, researcher: User, labelled: dict[str, Any]
) -> None:
    client = csrf_client(researcher)
    page = f"/p/{project.slug}/selections/"
    # The trajectory list's "Save as selection" link carries its filters along.
    listing = client.get(f"/p/{project.slug}/trajectories/?outcome=success&max_steps=5")
    # (with the origin the list showed by default: its imported trajectories)
    link = f'href="{page}?outcome=success&amp;max_steps=5&amp;origin=imported"'
    assert link in listing.content.decode()
    form = client.get(f"{page}?outcome=success&max_steps=5").context["form"]
    assert (form["outcome"].value(), form["max_steps"].value()) == ("success", "5")

    posted = {
        "name": "errors-ok",
        "outcome": "success",
        "first_error": "yes",
        "model_threshold": "0.5",
    }
    assert client.post(page, posted).status_code == 403  # no CSRF token
    assert not Selection.objects.exists()
    response = client.post(page, {**posted, "csrfmiddlewaretoken": token(client, page)})
    assert response.status_code == 302, response.content.decode()[-2000:]
    saved = Selection.objects.get(project=project, name="errors-ok")
    assert saved.definition == {"outcome": "success", "first_error": "yes"}
    assert saved.created_by == researcher
    shown = client.get(page).content.decode()
    assert "errors-ok" in shown and "first_error=yes" in shown

    again = client.post(page, {**posted, "csrfmiddlewaretoken": token(client, page)})
    assert again.status_code == 400
    assert "a selection named &#x27;errors-ok&#x27; exists" in again.content.decode()

    exports = f"/p/{project.slug}/exports/"
    assert '<option value="errors-ok">' in client.get(exports).content.decode()
    started = client.post(
        exports,
        {
            "format": "kto",
            "labels": "human:majority",
            "neutral": "drop",
            "selection": "errors-ok",
            "csrfmiddlewaretoken": token(client, exports),
        },
    )
    assert started.status_code == 302, started.content.decode()[-2000:]
    job = ExportJob.objects.get()
    assert (job.selection_name, job.selection) == ("errors-ok", saved.definition)
    assert job.total == 1  # "agreed": successful, with a step labelled -1

    delete = f"/selections/{saved.pk}/delete/"
    assert client.post(delete).status_code == 403  # no CSRF token
    assert client.post(delete, {"csrfmiddlewaretoken": token(client, page)}).status_code == 302
    assert not Selection.objects.exists()


@pytest.mark.django_db
def test_bad_selection_forms_are_refused_with_the_field(
    client: Client, project: Project, researcher: User
) -> None:
    client.force_login(researcher)
    page = f"/p/{project.slug}/selections/"
    response = client.post(page, {"name": "x", "human_model": "agree"})
    assert response.status_code == 400
    assert "needs model_scorer (the scorer to compare with)" in response.content.decode()
    response = client.post(page, {"name": "x", "human_model": "agree", "model_scorer": "nope"})
    assert response.status_code == 400
    assert "no scorer named &#x27;nope&#x27;" in response.content.decode()
    response = client.post(page, {"name": "x", "credit_run": "999999"})
    assert "no attribution run 999999" in response.content.decode()
    assert client.post(page, {"name": "not a slug"}).status_code == 400
    assert not Selection.objects.exists()


@pytest.mark.django_db
def test_annotators_cannot_change_selections_and_outsiders_see_nothing(
    client: Client, project: Project, annotator: User, outsider: User
) -> None:
    saved = Selection.objects.create(project=project, name="kept", definition={})
    page = f"/p/{project.slug}/selections/"
    client.force_login(annotator)
    assert client.get(page).status_code == 200
    assert client.post(page, {"name": "mine"}).status_code == 403
    assert client.post(f"/selections/{saved.pk}/delete/").status_code == 403
    client.force_login(outsider)
    assert client.get(page).status_code == 404
    assert client.post(page, {"name": "mine"}).status_code == 404
    assert client.post(f"/selections/{saved.pk}/delete/").status_code == 404
    assert list(Selection.objects.values_list("name", flat=True)) == ["kept"]


@pytest.mark.django_db
def test_export_command_freezes_a_selection_with_the_new_filters(
    tmp_path: Path, project: Project, labelled: dict[str, Any]
) -> None:
    definition = {"human_model": "disagree", "model_scorer": "prm"}
    Selection.objects.create(project=project, name="disputed", definition=definition)
    out = StringIO()
    call_command(
        "export",
        "--project",
        project.slug,
        "--format",
        "trl-stepwise",
        "--labels",
        "human:majority",
        "--neutral",
        "drop",
        "--selection",
        "disputed",
        "--out",
        str(tmp_path),
        stdout=out,
    )
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert summary["trajectories"] == 1
    (record,) = [json.loads(line) for line in (tmp_path / "trl-stepwise.jsonl").open()]
    split = Trajectory.objects.get(external_id="split")
    # Step 1 is a tie (no majority), so the record ends after step 0.
    assert record == {"prompt": split.task, "completions": STEPS[:1], "labels": [True]}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["selection"] == {"name": "disputed", "definition": definition}


@pytest.mark.django_db
def test_default_filters_match_every_trajectory(project: Project) -> None:
    trajectory_with_steps(project, STEPS)
    assert trajectories_filtered(project, TrajectoryFilters()).count() == 1
