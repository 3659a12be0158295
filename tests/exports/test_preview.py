"""The export form's choices and preview: every choice says how much it holds, and the
preview's counts and first records are what the export then writes."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from evaluation.kept import summary_refresh
from evaluation.models import KeptSummary
from exports.models import Selection
from exports.selectors import CHOICES_PAGE
from labeling.models import StepLabel
from scoring.models import StepScore
from tests.evaluation.test_compare import scorer_for
from tests.exports.test_exports import PROCESSBENCH, export
from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.services import project_create, trajectory_import

pytestmark = pytest.mark.django_db

PRE = re.compile(r'<pre class="json preview-record">(.*?)</pre>', re.S)


@pytest.fixture
def processbench() -> Project:
    project = project_create(slug="pb", name="pb")
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    return project


@pytest.fixture
def researcher(processbench: Project) -> Client:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=processbench, role=Membership.Role.RESEARCHER)
    client = Client()
    client.force_login(user)
    return client


def preview(client: Client, **params: str) -> str:
    response = client.get("/p/pb/exports/preview/", params, HTTP_HX_REQUEST="true")
    assert response.status_code == 200, response.content
    return response.content.decode()


def stat(page: str, name: str) -> int:
    found = re.search(rf'stat-value">(\d+)</span><span class="stat-label">{name}<', page)
    assert found, f"no {name} in the preview"
    return int(found.group(1))


def shown_records(page: str) -> list[dict[str, object]]:
    return [json.loads(html.unescape(text)) for text in PRE.findall(page)]


def test_the_form_offers_the_sources_with_how_many_steps_each_labels(
    processbench: Project, researcher: Client
) -> None:
    imported = StepLabel.objects.filter(annotator__username="import:processbench").count()
    assert imported
    page = researcher.get("/p/pb/exports/").content.decode()
    assert f"imported: processbench · {imported:,} steps" in page
    assert "humans: majority · 0 steps" in page
    # Nobody has labelled yet: the form opens on the import's labels.
    assert '<option value="import:processbench" selected>' in page
    assert f"all trajectories · {processbench.trajectories.count():,}" in page
    # The preview is asked for on load and on every change of the form.
    assert 'hx-get="/p/pb/exports/preview/" hx-trigger="load, change"' in page


def test_the_preview_counts_the_selection_and_shows_the_exports_first_records(
    processbench: Project, researcher: Client, tmp_path: Path
) -> None:
    params = {"format": "trl-stepwise", "labels": "import:processbench", "neutral": "drop"}
    page = preview(researcher, **params)
    steps = Step.objects.filter(trajectory__project=processbench)
    assert stat(page, "trajectories") == Trajectory.objects.filter(project=processbench).count()
    assert stat(page, "steps") == steps.count()
    assert stat(page, "labelable steps") == steps.filter(labelable=True).count()
    labelled = StepLabel.objects.filter(
        annotator__username="import:processbench", step__labelable=True
    )
    assert stat(page, "labelled by the source") == labelled.count()
    bad = labelled.filter(value=-1).count()
    assert f'<td>bad (-1)</td><td class="num">{bad}</td>' in page

    export("--project", "pb", "--out", str(tmp_path), *(f"--{k}={v}" for k, v in params.items()))
    written = [
        json.loads(line)
        for line in (tmp_path / "trl-stepwise.jsonl").read_text().split("\n")
        if line
    ]
    shown = shown_records(page)
    assert len(shown) == 3
    assert shown == written[:3]


def test_the_preview_follows_the_selection_and_the_split(
    processbench: Project, researcher: Client, tmp_path: Path
) -> None:
    first = Trajectory.objects.filter(project=processbench).order_by("task_key").first()
    assert first is not None
    Selection.objects.create(
        project=processbench, name="one-task", definition={"task_key": first.task_key}
    )
    page = preview(
        researcher,
        format="processbench",
        labels="import:processbench",
        neutral="keep",
        selection="one-task",
    )
    same_task = Trajectory.objects.filter(project=processbench, task_key=first.task_key)
    assert stat(page, "trajectories") == same_task.count()
    assert stat(page, "tasks") == 1

    params = {
        "format": "processbench",
        "labels": "import:processbench",
        "neutral": "keep",
        "split": "train=0.5,test=0.5",
        "seed": "3",
    }
    page = preview(researcher, **params)
    export("--project", "pb", "--out", str(tmp_path), *(f"--{k}={v}" for k, v in params.items()))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert stat(page, "tasks") == manifest["counts"]["tasks"]
    assert stat(page, "labelable steps") == manifest["counts"]["labelable_steps"]
    resolved = manifest["label_distribution"]["resolved"]
    names = {"-1": "bad (-1)", "0": "neutral (0)", "1": "good (+1)"}
    for value, count in resolved.items():
        if value != "none":
            assert f'<td>{names[value]}</td><td class="num">{count}</td>' in page
    assert stat(page, "labelled by the source") == sum(
        count for value, count in resolved.items() if value != "none"
    )
    for split in ("train", "test"):
        tasks = manifest["split"]["sizes"][split]["tasks"]
        trajectories = manifest["split"]["sizes"][split]["trajectories"]
        assert (
            f'<td>{split}</td><td class="num">{tasks}</td><td class="num">{trajectories}</td>'
            in page
        )


def test_what_the_export_would_refuse_is_said_in_the_preview(
    processbench: Project, researcher: Client
) -> None:
    page = preview(researcher, format="kto", labels="import:processbench", neutral="keep")
    assert "kto writes labels as booleans" in page
    page = preview(researcher, format="kto", labels="model:nobody", neutral="drop")
    assert "no scorer named &#x27;nobody&#x27;" in page
    page = preview(researcher, format="kto", labels="human:nobody", neutral="drop")
    assert "no user named &#x27;nobody&#x27; (label source human:nobody)" in page
    page = preview(researcher, format="kto", labels="import:processbench")
    assert "neutral: This field is required." in page


def test_annotators_get_no_preview(processbench: Project) -> None:
    annotator = User.objects.create_user("ann")
    MembershipFactory.create(user=annotator, project=processbench, role=Membership.Role.ANNOTATOR)
    client = Client()
    client.force_login(annotator)
    params = {"format": "kto", "labels": "import:processbench", "neutral": "drop"}
    assert client.get("/p/pb/exports/preview/", params).status_code == 403


def _labels_by(project: Project, name: str, count: int) -> User:
    """A member ``name`` whose submitted labels cover the project's first ``count`` steps."""
    user = UserFactory.create(username=name)
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    schema = project.label_schemas.get(is_active=True)
    steps = Step.objects.filter(trajectory__project=project).order_by("pk")[:count]
    StepLabel.objects.bulk_create(
        StepLabel(step=step, annotator=user, schema=schema, value=1, status="submitted")
        for step in steps
    )
    return user


def _queries(client: Client, url: str, params: dict[str, str] | None = None) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return [query["sql"] for query in queries.captured_queries]


PREVIEWED = {"format": "trl-stepwise", "labels": "import:processbench", "neutral": "drop"}


def test_the_preview_counts_what_is_chosen_not_every_source(
    processbench: Project, researcher: Client
) -> None:
    """The form's choices are not counted on each change of the form: with five more
    label sources the preview asks the database no more than with none."""
    before = _queries(researcher, "/p/pb/exports/preview/", PREVIEWED)
    for n in range(5):
        _labels_by(processbench, f"annotator{n}", 3 + n)
    after = _queries(researcher, "/p/pb/exports/preview/", PREVIEWED)
    assert len(after) == len(before), after
    assert not [sql for sql in after if "SELECT count(*) FROM (SELECT" in sql]
    # What it counts is the chosen source's labels over the selection, still right.
    page = preview(researcher, **PREVIEWED)
    labelled = StepLabel.objects.filter(
        annotator__username="import:processbench", step__labelable=True
    ).count()
    assert stat(page, "labelled by the source") == labelled


def test_the_page_counts_once_then_again_when_the_labels_change(
    processbench: Project, researcher: Client
) -> None:
    """The export page keeps its counts until a label of the project changes: a second
    load counts nothing, a label written (or deleted) is counted on the next."""
    other = project_create(slug="other", name="other")
    first = _queries(researcher, "/p/pb/exports/")
    again = _queries(researcher, "/p/pb/exports/")
    counting = [sql for sql in first if "count(" in sql.lower()]
    assert counting and len(again) < len(first)
    assert not [sql for sql in again if "labeling_steplabel l" in sql or "stepscore" in sql]

    # A label in another project leaves the counts as they were.
    _labels_by(other, "elsewhere", 1)
    assert len(_queries(researcher, "/p/pb/exports/")) == len(again)

    # A member's labels here: a new source, counted, and the majority moves with them.
    _labels_by(processbench, "annotator9", 4)
    page = researcher.get("/p/pb/exports/").content.decode()
    assert "annotator annotator9 · 4 steps" in page
    assert "humans: majority · 4 steps" in page

    # One of the import's labels deleted: one step fewer on the next load.
    imported = StepLabel.objects.filter(annotator__username="import:processbench")
    total = imported.count()
    imported.filter(pk=imported.order_by("pk").values("pk")[:1]).delete()
    page = researcher.get("/p/pb/exports/").content.decode()
    assert f"imported: processbench · {total - 1:,} steps" in page

    # Trajectories deleted take their steps' labels and scores with them.
    trajectory = processbench.trajectories.order_by("pk").first()
    assert trajectory is not None
    trajectory.delete()
    page = researcher.get("/p/pb/exports/").content.decode()
    assert f"all trajectories · {processbench.trajectories.count():,}" in page
    assert f"imported: processbench · {imported.count():,} steps" in page


def test_a_label_write_recounts_the_labels_not_the_scores(
    processbench: Project, researcher: Client
) -> None:
    """Counting each scorer's scores was 20 s of the page's 25 at 10M steps (#37): they
    change with the project's jobs, not its labels, so a label write recounts only the
    label sources."""
    scorer = scorer_for(processbench)
    steps = Step.objects.filter(trajectory__project=processbench)[:3]
    StepScore.objects.bulk_create(StepScore(step=step, scorer=scorer, value=0.5) for step in steps)
    assert "prm · 3 steps scored" in researcher.get("/p/pb/exports/").content.decode()
    # One of the import's labels changed: a label write, the project's jobs as they were.
    imported = StepLabel.objects.filter(annotator__username="import:processbench")
    first = imported.order_by("pk").first()
    assert first is not None
    imported.filter(pk=first.pk).update(value=-first.value if first.value else 1)
    after = _queries(researcher, "/p/pb/exports/")
    assert [sql for sql in after if "labeling_steplabel" in sql]
    assert not [sql for sql in after if "scoring_stepscore" in sql], after
    assert "prm · 3 steps scored" in researcher.get("/p/pb/exports/").content.decode()


def test_the_same_source_in_another_project_is_not_counted(
    processbench: Project, researcher: Client
) -> None:
    """The label source is read unscoped (the selection's steps keep the rest out): the
    same import's labels in a second project add nothing to this one's counts."""
    params = {"format": "trl-stepwise", "labels": "import:processbench", "neutral": "drop"}
    alone = stat(preview(researcher, **params), "labelled by the source")
    other = project_create(slug="pb-copy", name="pb copy")
    trajectory_import(project=other, source_format="processbench", path=PROCESSBENCH)
    assert StepLabel.objects.filter(step__trajectory__project=other).count() == alone
    assert stat(preview(researcher, **params), "labelled by the source") == alone


def test_a_large_projects_counts_are_kept_and_a_label_write_counts_nothing_in_the_page(
    processbench: Project, researcher: Client, settings: Any
) -> None:
    """Counting each label source after every label write took ~5 s of the page at 10M
    steps (#37). Past STEPSCOPE_SUMMARY_INLINE_STEPS the counts are a kept summary in the
    database (every web process reads the same row), made by a worker; after a label
    write the page shows them with their age and counts nothing itself. A source typed in
    is still taken, and the service still checks it."""
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    first = researcher.get("/p/pb/exports/").content.decode()
    assert "a worker is counting the label sources" in first
    assert "imported: processbench ·" not in first
    typed = {"format": "trl-stepwise", "neutral": "drop"}
    unknown = researcher.post("/p/pb/exports/", {**typed, "labels": "human:nobody"})
    assert unknown.status_code == 400 and "nobody" in unknown.content.decode()
    made = researcher.post("/p/pb/exports/", {**typed, "labels": "import:processbench"})
    assert made.status_code == 302

    row = KeptSummary.objects.get(project=processbench, page=CHOICES_PAGE)
    assert summary_refresh(project_id=processbench.pk, page=CHOICES_PAGE, params=row.params)
    imported = StepLabel.objects.filter(annotator__username="import:processbench").count()
    counted = researcher.get("/p/pb/exports/").content.decode()
    assert f"imported: processbench · {imported:,} steps" in counted
    assert "export-counts-note" not in counted

    _labels_by(processbench, "annotator9", 4)
    after = _queries(researcher, "/p/pb/exports/")
    assert not [sql for sql in after if "labeling_steplabel l" in sql], after
    page = researcher.get("/p/pb/exports/").content.decode()
    assert "a worker is counting them again" in page
    assert "The counts were made just now." in page  # not "0 minutes ago"
    assert f"imported: processbench · {imported:,} steps" in page
    assert "annotator9" not in page
    assert summary_refresh(project_id=processbench.pk, page=CHOICES_PAGE, params=row.params)
    assert "annotator annotator9 · 4 steps" in researcher.get("/p/pb/exports/").content.decode()
