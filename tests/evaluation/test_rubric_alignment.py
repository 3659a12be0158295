"""Rubric alignment: the annotators' majority against an LLM judge's marks per criterion
(agreement, kappa, confusion, evidence overlap) worked out by hand, through the API
(unknown parameters and sources refused, named) and on the compare page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from evaluation.rubric_alignment import AlignmentRefused, rubric_compare
from labeling.services.rubrics import rubric_save
from tests.labeling.test_rubric_sources import rubric_world
from trajectories.models import Project

pytestmark = pytest.mark.django_db


def test_the_majority_against_the_judge_by_hand(project: Project) -> None:
    rubric_world(project)
    result = rubric_compare(project, a="rubric:human:majority", b="rubric:judge:judge")
    assert result.trajectories == 3
    first, second = result.criteria
    # Criterion 0: t1 met/met (evidence [2] and [2,3]: 1/2), t3 na/not_met (no evidence).
    assert (first.pairs, first.agreement, first.evidence_pairs) == (2, 0.5, 1)
    assert first.evidence_jaccard == 0.5
    assert first.confusion == ((1, 0, 0), (0, 0, 0), (0, 1, 0))
    # Observed 1/2, chance (1*1 + 0*1 + 1*0) / 4 = 1/4: kappa (1/2 - 1/4) / (3/4).
    assert first.kappa == pytest.approx(1 / 3)
    # Criterion 1: t1 not_met/met, t2 met/met: observed 1/2, chance (1*2)/4 = 1/2.
    assert (second.pairs, second.agreement, second.kappa) == (2, 0.5, 0.0)
    assert (second.evidence_pairs, second.evidence_jaccard) == (2, 1.0)
    with pytest.raises(AlignmentRefused, match="b: a and b are the same source"):
        rubric_compare(project, a="human:ann1", b="rubric:human:ann1")
    with pytest.raises(AlignmentRefused, match="rubric: no rubric named 'x'"):
        rubric_compare(project, a="human:ann1", b="judge:judge", rubric="x")


def test_api(client: Client, project: Project, annotator: User, outsider: User) -> None:
    rubric_world(project)
    client.force_login(annotator)
    url = reverse("api-rubric-alignment", args=[project.slug])
    data = client.get(url, {"a": "rubric:human:majority", "b": "rubric:judge:judge"}).json()
    assert (data["rubric"], data["version"], data["trajectories"]) == ("rubric", 1, 3)
    assert data["a"] == "rubric:human:majority" and data["b"] == "rubric:judge:judge"
    first = data["criteria"][0]
    assert first["text"] == "Checks the answer" and first["weight"] == 2.0
    assert first["agreement"] == 0.5 and first["kappa"] == pytest.approx(1 / 3)
    assert first["confusion"] == {
        "marks": ["met", "not_met", "na"],
        "counts": [[1, 0, 0], [0, 0, 0], [0, 1, 0]],
    }
    assert first["evidence_jaccard"] == 0.5 and first["evidence_pairs"] == 1
    ok = {"a": "rubric:human:ann1", "b": "rubric:judge:judge"}
    unknown = client.get(url, {**ok, "c": "x", "threshold": "1"})
    assert unknown.status_code == 400 and set(unknown.json()) == {"c", "threshold"}
    bad = client.get(url, {**ok, "a": "rubric:model:x"})
    assert bad.status_code == 400 and "unknown rubric source" in bad.json()["a"]
    missing = client.get(url, {**ok, "b": "rubric:judge:nobody"})
    assert missing.status_code == 400 and "no scorer named 'nobody'" in missing.json()["b"]
    assert client.get(url, {"a": "rubric:human:ann1"}).status_code == 400
    client.force_login(outsider)
    assert client.get(url, ok).status_code == 404


def test_the_page_shows_each_criterion_and_is_linked(
    client: Client, project: Project, annotator: User
) -> None:
    client.force_login(annotator)
    url = reverse("compare-rubrics", args=[project.slug])
    assert 'id="rubrics-none"' in client.get(url).content.decode()
    rubric_world(project)
    html = client.get(url).content.decode()
    # Left out: the majority against the judge.
    assert '<option value="rubric:human:majority" selected>' in html
    assert '<option value="rubric:judge:judge" selected>' in html
    assert "3 trajectories marked by both" in html
    row = html.split('id="rubric-criterion-0"')[1].split("</tr>\n    \n")[0]
    assert "Checks the answer" in row and "50%" in row and "0.33" in row
    bad = client.get(url, {"b": "rubric:judge:nobody"}).content.decode()
    assert "no scorer named" in bad and 'id="rubric-alignment"' not in bad
    assert url in client.get(reverse("compare-decisive", args=[project.slug])).content.decode()
    assert url in client.get(reverse("project-home", args=[project.slug])).content.decode()


def test_an_earlier_rubric_version_stays_comparable(
    client: Client, project: Project, annotator: User
) -> None:
    world = rubric_world(project)
    # A second version of the rubric: nobody has marked it yet.
    rubric_save(project=project, user_id=None, criteria=[{"text": "A new criterion"}])
    current = rubric_compare(project, a="rubric:human:majority", b="rubric:judge:judge")
    assert (current.rubric.version, current.trajectories) == (2, 0)
    earlier = rubric_compare(project, a="rubric:human:majority", b="rubric:judge:judge", version=1)
    assert (earlier.rubric.pk, earlier.trajectories) == (world.rubric.pk, 3)
    assert earlier.criteria[0].kappa == pytest.approx(1 / 3)
    with pytest.raises(AlignmentRefused, match="version: rubric 'rubric' has no version 7"):
        rubric_compare(project, a="rubric:human:majority", b="rubric:judge:judge", version=7)
    client.force_login(annotator)
    api = reverse("api-rubric-alignment", args=[project.slug])
    ok = {"a": "rubric:human:majority", "b": "rubric:judge:judge"}
    data = client.get(api, {**ok, "version": "1"}).json()
    assert (data["version"], data["trajectories"]) == (1, 3)
    assert client.get(api, {**ok, "version": "0"}).status_code == 400
    assert "no version 7" in client.get(api, {**ok, "version": "7"}).json()["version"]
    # The page: the current version has no two sources; it links the earlier one, which
    # offers a version choice and compares its marks.
    page = reverse("compare-rubrics", args=[project.slug])
    html = client.get(page).content.decode()
    assert 'id="rubrics-one-source"' in html and "version=1" in html
    older = client.get(page, {"rubric": "rubric", "version": "1"}).content.decode()
    assert '<option value="1" selected>v1</option>' in older
    assert "3 trajectories marked by both" in older and "rubric v1" in older
