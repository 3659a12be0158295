"""Model against human step labels, end to end through PostgreSQL: hand-worked metrics,
ProcessBench first-error F1 on a constructed set and on the real ProcessBench sample,
outcome against process, agreement between humans, slices, the command's JSON and the
API."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from sklearn.metrics import cohen_kappa_score

from evaluation.compare import compare_query_build, compare_run, human_agreement
from labeling.models import FinalLabel, LabelSchema, StepLabel
from scoring import prm
from scoring.models import Scorer, StepScore
from tests.conftest import REALDATA
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.services import imported_annotator, trajectory_import

pytestmark = pytest.mark.django_db


def scorer_for(project: Project, name: str = "prm") -> Scorer:
    scorer, _ = Scorer.objects.get_or_create(
        project=project, name=name, defaults={"kind": prm.EXTERNAL}
    )
    return scorer


def build(
    project: Project,
    labels: list[int | None],
    scores: list[float | None],
    *,
    annotator: str = "ann",
    scorer: str = "prm",
    **fields: Any,
) -> Trajectory:
    """A trajectory whose step i carries ``labels[i]`` by ``annotator`` and
    ``scores[i]`` from ``scorer`` (None: no label, no score)."""
    trajectory = trajectory_with_steps(project, [f"step {i}" for i in range(len(labels))], **fields)
    schema = LabelSchema.objects.get(project=project, is_active=True)
    user = UserFactory.create(username=annotator)
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    for step, value, score in zip(steps, labels, scores, strict=True):
        if value is not None:
            StepLabel.objects.create(step=step, annotator=user, schema=schema, value=value)
        if score is not None:
            StepScore.objects.create(step=step, scorer=scorer_for(project, scorer), value=score)
    return trajectory


@pytest.fixture
def hand_worked(project: Project) -> Project:
    """Three trajectories, worked through by hand below (threshold 0.5):

    A labels [+1, +1, -1, 0] scores [.9, .6, .3, .2] -> model [+1, +1, -1, -1]
    B labels [+1, -1, +1]    scores [.8, .7, .4]     -> model [+1, +1, -1]
    C labels [+1, +1]        scores [.9, .55]        -> model [+1, +1]
    """
    build(project, [1, 1, -1, 0], [0.9, 0.6, 0.3, 0.2], external_id="A", model_name="m1")
    build(project, [1, -1, 1], [0.8, 0.7, 0.4], external_id="B", model_name="m2")
    build(project, [1, 1], [0.9, 0.55], external_id="C", model_name="m1")
    return project


def run(project: Project, labels: str = "human:majority", **kwargs: Any) -> Any:
    threshold = kwargs.pop("threshold", 0.5)
    slice_text = kwargs.pop("slice_text", "")
    query = compare_query_build(
        project, scorer="prm", labels=labels, threshold=threshold, slice_text=slice_text
    )
    return compare_run(query, **kwargs)


# --- Hand-worked metrics -----------------------------------------------------------------


def test_step_metrics_match_the_hand_worked_case(hand_worked: Project) -> None:
    result = run(hand_worked)
    m = result.metrics
    assert (m.steps, m.trajectories) == (9, 3)
    # Rows: humans bad / neutral / good; columns: the model's, in the same order.
    assert m.confusion.tolist() == [[1, 0, 1], [1, 0, 0], [1, 0, 5]]
    assert m.accuracy == pytest.approx(6 / 9)
    # p_o = 54/81, p_e = (2*3 + 1*0 + 6*6)/81 = 42/81.
    assert m.kappa == pytest.approx(12 / 39)
    reference = [1, 1, -1, 0, 1, -1, 1, 1, 1]
    predicted = [1, 1, -1, -1, 1, 1, -1, 1, 1]
    assert m.kappa_quadratic == pytest.approx(
        cohen_kappa_score(reference, predicted, labels=[-1, 0, 1], weights="quadratic")
    )
    # Bad steps: found A2; false alarms A3 (neutral) and B2; missed B1.
    assert (m.detection.true_positives, m.detection.false_positives) == (1, 2)
    assert m.detection.false_negatives == 1
    assert m.detection.f1 == pytest.approx(0.4)
    # Good {.9,.6,.8,.4,.9,.55} against bad {.3,.7}: 9 of 12 pairs ordered right.
    assert m.auroc == pytest.approx(0.75)
    # |observed - predicted| summed per bin: .2 + .45 + .3 + .6 + .4 + .7 + .2 over 8.
    assert m.reliability.ece == pytest.approx(2.85 / 8)
    # A found at step 2 (right), B predicted at 2 but erred at 1 (wrong), C clean (right).
    fe = m.first_error
    assert (fe.acc_erroneous, fe.acc_correct, fe.erroneous, fe.correct) == (0.5, 1.0, 2, 1)
    assert fe.f1 == pytest.approx(2 / 3)


def test_threshold_moves_the_models_labels(hand_worked: Project) -> None:
    m = run(hand_worked, threshold=0.35).metrics
    # Only A2 (.3) and A3 (.2) fall under .35 now.
    assert m.confusion.tolist() == [[1, 0, 1], [1, 0, 0], [0, 0, 6]]
    # A right at 2; B misses its error at 1 (nothing under .35); C right.
    assert (m.first_error.acc_erroneous, m.first_error.acc_correct) == (0.5, 1.0)


def test_only_labelable_scored_submitted_steps_of_the_project_count(
    hand_worked: Project,
) -> None:
    extra = build(hand_worked, [1, -1, 1], [0.9, None, 0.2], external_id="D")
    Step.objects.filter(trajectory=extra, index=2).update(labelable=False)
    # A draft label never counts.
    draft = build(hand_worked, [1], [0.1], annotator="drafter", external_id="E")
    StepLabel.objects.filter(step__trajectory=draft).update(status="draft")
    other = Project.objects.create(slug="other", name="other")
    LabelSchema.objects.create(project=other)
    build(other, [-1, -1], [0.9, 0.9], annotator="elsewhere", external_id="F")
    result = run(hand_worked)
    # Of D only step 0 has both a label and a score on a labelable step.
    assert (result.steps, result.trajectories) == (10, 4)


def test_label_sources_and_an_annotator_slice(hand_worked: Project) -> None:
    trajectory = Trajectory.objects.get(external_id="B")
    second = UserFactory.create(username="second")
    schema = LabelSchema.objects.get(project=hand_worked)
    for step in Step.objects.filter(trajectory=trajectory):
        StepLabel.objects.create(step=step, annotator=second, schema=schema, value=1)
    # Two annotators disagree on B1 (-1 against +1): the majority has no label there.
    assert run(hand_worked).steps == 8
    assert run(hand_worked, labels="human:second").steps == 3
    by_ann = run(hand_worked, slice_text="annotator=second")
    assert (by_ann.steps, str(by_ann.query.reference)) == (3, "human:second")
    with pytest.raises(ValueError, match="no scorer named 'nope'"):
        compare_query_build(hand_worked, scorer="nope")
    with pytest.raises(ValueError, match="unknown slice"):
        compare_query_build(hand_worked, scorer="prm", slice_text="colour=red")


def test_slices_and_breakdowns(hand_worked: Project) -> None:
    only_m1 = run(hand_worked, slice_text="model=m1")
    assert (only_m1.steps, only_m1.trajectories) == (6, 2)
    result = run(hand_worked, by="model")
    rows = {row.value: row for row in result.slices}
    assert (rows["m1"].steps, rows["m2"].steps) == (6, 3)
    # The breakdown row equals the slice computed on its own.
    assert rows["m1"].kappa == pytest.approx(only_m1.kappa)
    assert rows["m1"].first_error_f1 == pytest.approx(only_m1.first_error.f1)
    by_kind = run(hand_worked, by="kind")
    assert [(row.value, row.steps) for row in by_kind.slices] == [("thought", 9)]
    by_length = run(hand_worked, by="length")
    # A (4 steps) and B (3) and C (2) are all in the 1-5 bucket.
    assert [(row.name, row.steps) for row in by_length.slices] == [("1-5", 9)]
    by_annotator = run(hand_worked, by="annotator")
    assert [(row.name, row.steps) for row in by_annotator.slices] == [("ann", 9)]


def test_slice_values_are_counted_among_the_newest_trajectories(
    hand_worked: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The options and breakdown groups read a bounded number of the newest trajectories
    (three passes over all of them made every compare page slow at 10M steps, #37)."""
    from evaluation import compare

    assert [value for value, _ in compare.slice_groups(hand_worked, "model")[2]] == ["m1", "m2"]
    newest = Trajectory.objects.filter(project=hand_worked).order_by("-id")[:1].get()
    monkeypatch.setattr(compare, "SLICE_SAMPLE_TRAJECTORIES", 1)
    assert [v for v, _ in compare.slice_groups(hand_worked, "model")[2]] == [newest.model_name]


# --- ProcessBench first-error F1 ---------------------------------------------------------


def processbench_file(path: Path, items: list[tuple[int, int]]) -> Path:
    """ProcessBench items with ``steps`` steps and first error ``label`` (-1: none)."""
    records = [
        {
            "id": f"pb-{i}",
            "generator": "constructed",
            "problem": f"Problem {i}",
            "steps": [f"Step {j} of {i}." for j in range(steps)],
            "final_answer_correct": label < 0,
            "label": label,
        }
        for i, (steps, label) in enumerate(items)
    ]
    path.write_text(json.dumps(records))
    return path


def score_steps(project: Project, scores: dict[str, list[float]]) -> None:
    scorer = scorer_for(project)
    for trajectory in Trajectory.objects.filter(project=project):
        for step in Step.objects.filter(trajectory=trajectory).order_by("index"):
            value = scores[trajectory.external_id][step.index]
            StepScore.objects.create(step=step, scorer=scorer, value=value)


def test_processbench_f1_on_a_constructed_set_with_a_known_answer(
    project: Project, tmp_path: Path
) -> None:
    path = processbench_file(tmp_path / "pb.json", [(4, 2), (3, 1), (2, -1), (2, -1), (2, -1)])
    trajectory_import(project=project, source_format="processbench", path=path)
    score_steps(
        project,
        {
            "pb-0": [0.9, 0.8, 0.2, 0.1],  # first under .5 at 2: right
            "pb-1": [0.3, 0.9, 0.9],  # flags step 0, the error is at 1: wrong
            "pb-2": [0.9, 0.9],  # nothing flagged: right
            "pb-3": [0.9, 0.4],  # flags a correct solution: wrong
            "pb-4": [0.6, 0.7],  # right
        },
    )
    result = run(project, labels="import:processbench")
    fe = result.first_error
    assert (fe.erroneous, fe.correct, fe.trajectories) == (2, 3, 5)
    assert (fe.acc_erroneous, fe.acc_correct) == (0.5, pytest.approx(2 / 3))
    assert fe.f1 == pytest.approx(4 / 7)
    # The sweep: pb-0 is right for t in (.2, .8], pb-1 never, the correct ones for t up
    # to their lowest score (.9, .4, .6). Best: t in (.2, .4], F1 = 2/3, lowest t .21.
    best = result.metrics.sweep.best
    assert (best.threshold, best.acc_erroneous, best.acc_correct) == (0.21, 0.5, 1.0)
    assert best.f1 == pytest.approx(2 / 3)


def test_processbench_f1_on_the_real_sample_matches_a_direct_count(project: Project) -> None:
    path = REALDATA / "processbench" / "gsm8k.json"
    trajectory_import(project=project, source_format="processbench", path=path)
    items = {str(item["id"]): item for item in json.loads(path.read_text())}
    rng = np.random.default_rng(7)
    scores: dict[str, list[float]] = {}
    for external_id, item in items.items():
        # A noisy scorer: low at the first error, high before it, anything after.
        values = rng.uniform(0.3, 1.0, len(item["steps"]))
        if item["label"] >= 0:
            values[item["label"]] = rng.uniform(0.0, 0.6)
        scores[external_id] = [round(float(v), 4) for v in values]
    score_steps(project, scores)

    threshold = 0.45
    result = run(project, labels="import:processbench", threshold=threshold)
    # ProcessBench's own count, over the labelled steps (none after the first error).
    right_err = right_cor = n_err = n_cor = 0
    for external_id, item in items.items():
        label = item["label"]
        judged = scores[external_id][: label + 1] if label >= 0 else scores[external_id]
        predicted = next((i for i, s in enumerate(judged) if s < threshold), -1)
        if label >= 0:
            n_err += 1
            right_err += predicted == label
        else:
            n_cor += 1
            right_cor += predicted == -1
    acc_err, acc_cor = right_err / n_err, right_cor / n_cor
    fe = result.first_error
    assert (fe.erroneous, fe.correct) == (n_err, n_cor) == (207, 193)
    assert fe.acc_erroneous == pytest.approx(acc_err)
    assert fe.acc_correct == pytest.approx(acc_cor)
    assert fe.f1 == pytest.approx(2 * acc_err * acc_cor / (acc_err + acc_cor))


# --- Outcome against process and between humans ------------------------------------------


def test_outcome_against_process(project: Project) -> None:
    # Labels are not needed: scored steps of every trajectory count.
    build(project, [None, None], [0.9, 0.8], success=True)  # min .8 mean .85 last .8
    build(project, [None, None, None], [0.7, 0.2, 0.9], success=True)  # .2 .6 .9
    build(project, [None, None], [0.6, 0.3], success=False)  # .3 .45 .3
    build(project, [None], [0.1], outcome_reward=0.0)  # failure by reward: .1 .1 .1
    build(project, [None], [0.5])  # unknown outcome: left out of the AUROC
    build(project, [1], [0.5])  # a labelled step, so the comparison has a step
    outcome = run(project, labels="human:ann").outcome
    assert (outcome.successes, outcome.failures) == (2, 2)
    # Successes {.8, .2} vs failures {.3, .1} by min: 3 of 4 pairs; mean and last: 4 of 4.
    assert outcome.auroc["min"] == pytest.approx(0.75)
    assert outcome.auroc["mean"] == pytest.approx(1.0)
    assert outcome.auroc["last"] == pytest.approx(1.0)
    by_position = {p.name: p for p in outcome.by_position}
    assert by_position["0"].steps == 6
    assert by_position["0"].mean == pytest.approx((0.9 + 0.7 + 0.6 + 0.1 + 0.5 + 0.5) / 6)
    assert by_position["0"].mean_success == pytest.approx(0.8)
    assert by_position["0"].mean_failure == pytest.approx(0.35)
    assert by_position["2"].steps == 1
    (bucket,) = outcome.by_length
    assert (bucket.name, bucket.steps) == ("1-5", 10)


def test_between_humans(project: Project) -> None:
    schema = LabelSchema.objects.get(project=project)
    trajectory = trajectory_with_steps(project, [f"s{i}" for i in range(4)])
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    ratings: dict[str, list[int | None]] = {
        "x": [1, 1, -1, 0],
        "y": [1, -1, -1, None],
        "z": [None, 1, None, None],
    }
    for name, values in ratings.items():
        user = UserFactory.create(username=name)
        for step, value in zip(steps, values, strict=True):
            if value is not None:
                StepLabel.objects.create(step=step, annotator=user, schema=schema, value=value)
    StepLabel.objects.create(
        step=steps[3], annotator=imported_annotator("src"), schema=schema, value=1
    )
    reviewer = UserFactory.create(username="rev")
    for step, value in zip(steps[:2], [1, 1], strict=True):
        FinalLabel.objects.create(step=step, schema=schema, value=value, adjudicator=reviewer)
    humans = human_agreement(project)
    assert humans.annotators == ["x", "y", "z"]
    assert humans.labels == 8  # the imported label is not an annotator's
    assert humans.overlap_steps == 3
    # Pairs on steps 0-2: x/y agree on 0 and 2, x/z disagree... : 3 agreeing of 5 pairs.
    assert humans.percent_agreement == pytest.approx(3 / 5)
    pairs = {(p.first, p.second): p for p in humans.pairs}
    assert pairs[("x", "y")].steps == 3
    assert pairs[("x", "y")].agreement == pytest.approx(2 / 3)
    assert pairs[("x", "y")].kappa == pytest.approx(
        cohen_kappa_score([1, 1, -1], [1, -1, -1], labels=[-1, 0, 1])
    )
    import krippendorff  # a dev dependency: the reference implementation to check against

    matrix = np.array(
        [[1, 1, -1], [1, -1, -1], [np.nan, 1, np.nan]], dtype=float
    )  # the steps two or more labelled
    assert humans.alpha == pytest.approx(
        krippendorff.alpha(
            reliability_data=matrix,
            level_of_measurement="ordinal",
            value_domain=[-1, 0, 1],
        )
    )
    adjudicated = {a.annotator: a for a in humans.with_adjudicated}
    assert (adjudicated["x"].steps, adjudicated["x"].agreement) == (2, 1.0)
    assert (adjudicated["y"].steps, adjudicated["y"].agreement) == (2, 0.5)


# --- The command and the API -------------------------------------------------------------


def test_command_prints_one_json_object_last(hand_worked: Project) -> None:
    out = io.StringIO()
    call_command(
        "compare",
        "--project",
        "demo",
        "--scorer",
        "prm",
        "--labels",
        "human:ann",
        "--json",
        stdout=out,
    )
    data = json.loads(out.getvalue().strip().splitlines()[-1])
    assert data["steps"] == 9
    assert data["kappa"] == pytest.approx(12 / 39)
    assert data["auroc"] == pytest.approx(0.75)
    assert set(data["first_error"]) >= {
        "threshold",
        "acc_erroneous",
        "acc_correct",
        "f1",
        "trajectories",
    }
    assert data["first_error"]["threshold"] == 0.5
    assert data["first_error"]["trajectories"] == 3
    assert data["first_error"]["f1"] == pytest.approx(2 / 3)
    assert data["confusion"] == [[1, 0, 1], [1, 0, 0], [1, 0, 5]]
    assert data["calibration"]["ece"] == pytest.approx(2.85 / 8)
    assert len(data["first_error_sweep"]["thresholds"]) == 101
    assert data["outcome"]["trajectories"] == 3


def test_command_report_ends_with_a_json_summary(hand_worked: Project) -> None:
    out = io.StringIO()
    call_command("compare", "--project", "demo", "--scorer", "prm", "--by", "model", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert "kappa 0.308" in out.getvalue()
    summary = json.loads(lines[-1])
    assert (summary["steps"], summary["labels"]) == (9, "human:majority")
    assert summary["first_error"]["f1"] == pytest.approx(2 / 3)


def test_command_names_a_bad_source(hand_worked: Project) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="unknown label source"):
        call_command("compare", "--project", "demo", "--scorer", "prm", "--labels", "people")


def test_api_returns_the_same_json_as_the_command(
    hand_worked: Project, owner: User, client: Client
) -> None:
    out = io.StringIO()
    call_command("compare", "--project", "demo", "--scorer", "prm", "--json", stdout=out)
    expected = json.loads(out.getvalue().strip().splitlines()[-1])
    client.force_login(owner)
    response = client.get(reverse("api-compare"), {"project": "demo", "scorer": "prm"})
    assert response.status_code == 200, response.content
    data = response.json()
    for payload in (data, expected):
        payload.pop("seconds")
    assert data == expected
    with_humans = client.get(
        reverse("api-compare"), {"project": "demo", "scorer": "prm", "humans": "true"}
    ).json()
    assert with_humans["humans"]["annotators"] == ["ann"]
    bad = client.get(reverse("api-compare"), {"project": "demo", "scorer": "nope"})
    assert bad.status_code == 400
    assert "no scorer named" in bad.json()["detail"]


def test_api_outsider_gets_404(hand_worked: Project, outsider: User, client: Client) -> None:
    client.force_login(outsider)
    response = client.get(reverse("api-compare"), {"project": "demo", "scorer": "prm"})
    assert response.status_code == 404
    client.logout()
    anonymous = client.get(reverse("api-compare"), {"project": "demo", "scorer": "prm"})
    assert anonymous.status_code in (401, 403)


def test_annotator_of_a_blind_project_may_not_compare(
    hand_worked: Project, annotator: User, client: Client
) -> None:
    client.force_login(annotator)
    params = {"project": "demo", "scorer": "prm"}
    assert client.get(reverse("api-compare"), params).status_code == 200
    hand_worked.settings = {"blind_labeling": True}
    hand_worked.save()
    assert client.get(reverse("api-compare"), params).status_code == 403
    assert client.get(reverse("compare", args=["demo"])).status_code == 403


def test_nan_metrics_are_null_in_json(project: Project) -> None:
    # Every step good: no bad steps, so AUROC and the first-error F1 are undefined.
    build(project, [1, 1], [0.9, 0.8])
    data = run(project).as_json()
    assert data["auroc"] is None
    assert data["first_error"]["acc_erroneous"] is None
    assert data["first_error"]["f1"] is None
    json.dumps(data, allow_nan=False)
    assert math.isnan(run(project).auroc)


def test_an_empty_comparison_is_well_formed(project: Project) -> None:
    scorer_for(project)
    data = run(project).as_json()
    assert (data["steps"], data["first_error"]["trajectories"]) == (0, 0)
    json.dumps(data, allow_nan=False)


def test_researcher_membership_is_enough(hand_worked: Project, client: Client) -> None:
    researcher = UserFactory.create(username="res")
    MembershipFactory.create(user=researcher, project=hand_worked, role=Membership.Role.RESEARCHER)
    hand_worked.settings = {"blind_labeling": True}
    hand_worked.save()
    client.force_login(researcher)
    assert client.get(reverse("compare", args=["demo"])).status_code == 200


def test_majority_is_the_strict_plurality_on_random_labels(project: Project) -> None:
    """The majority source (a ``mode()`` in both orders) against a direct count."""
    from collections import Counter

    from django.db import connection

    from labeling.sources import label_source_parse, label_source_sql

    schema = LabelSchema.objects.get(project=project)
    trajectory = trajectory_with_steps(project, [f"s{i}" for i in range(300)])
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    users = [UserFactory.create(username=f"voter{i}") for i in range(5)]
    rng = np.random.default_rng(3)
    expected: dict[int, int] = {}
    labels: list[StepLabel] = []
    for step in steps:
        voters = rng.choice(5, size=int(rng.integers(1, 6)), replace=False)
        values = [int(v) for v in rng.choice([-1, 0, 1], size=voters.size)]
        labels += [
            StepLabel(step=step, annotator=users[v], schema=schema, value=value)
            for v, value in zip(voters, values, strict=True)
        ]
        counts = Counter(values).most_common()
        if len(counts) == 1 or counts[0][1] > counts[1][1]:
            expected[step.pk] = counts[0][0]
    # One statement: the trigger recounts every step's votes together, as a bulk
    # import of labels does (300 statements of a few rows each took most of a minute).
    StepLabel.objects.bulk_create(labels)
    sql, params = label_source_sql(project, label_source_parse("human:majority"))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert dict(cursor.fetchall()) == expected
    assert 0 < len(expected) < len(steps)  # both ties and winners occurred
