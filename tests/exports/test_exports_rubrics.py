"""Rubric results and episode verdicts in exports (``--rubric human:<user>``): per
criterion with its evidence, the score as ``rubric_reward``, the episode verdicts, in
trl-stepwise and prm800k JSON lines; only trajectories the annotator submitted; the
records without the option are the same as before; a bad choice is refused before
anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError

from exports.forms import ExportForm
from labeling.models import Rubric, TrajectoryLabel
from labeling.services.rubrics import episode_verdict_set, rubric_mark_set, rubric_save
from scoring import prm
from scoring.models import Scorer
from scoring.services.rubric_marks import RubricMarkInput, judge_rubric_marks_write
from tests.exports.test_exports import export
from tests.exports.test_exports_judges import BASE, arith, lines  # noqa: F401  (fixture)
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.conftest import state
from trajectories.models import Membership, Project, Trajectory

pytestmark = pytest.mark.django_db


@pytest.fixture
def marked(arith: Project) -> User:  # noqa: F811
    user = UserFactory.create(username="rita")
    MembershipFactory.create(user=user, project=arith, role=Membership.Role.RESEARCHER)
    rubric = rubric_save(
        project=arith,
        user_id=user.pk,
        criteria=[{"text": "Multiplies first", "weight": 3}, {"text": "Adds right"}],
    )
    good, bad = (Trajectory.objects.get(external_id=name) for name in ("good", "bad"))
    for trajectory, second in ((good, "met"), (bad, "not_met")):
        mine = state(user, trajectory)
        rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=0, mark="met", evidence=[1])
        rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=1, mark=second, evidence=[2])
    episode_verdict_set(state=state(user, bad), outcome="failure", critique="12 + 2 is 14")
    # Only ``bad`` is submitted: ``good``'s marks are a draft and stay out.
    TrajectoryLabel.objects.create(trajectory=bad, annotator=user, status="submitted")
    return user


def test_trl_stepwise_and_prm800k_carry_the_rubric(tmp_path: Path, marked: User) -> None:
    out = tmp_path / "trl"
    export(*BASE, "--format", "trl-stepwise", "--rubric", "human:rita", "--out", str(out))
    by_prompt = {r["completions"][-1]: r for r in lines(out / "trl-stepwise.jsonl")}
    bad = by_prompt["12 + 2 = 15."]
    assert bad["rubric"] == [
        {
            "rubric": "rubric",
            "version": 1,
            "score": 0.75,
            "criteria": [
                {"criterion": 0, "mark": "met", "evidence": [1]},
                {"criterion": 1, "mark": "not_met", "evidence": [2]},
            ],
        }
    ]
    assert bad["rubric_reward"] == 0.75
    assert bad["episode"] == [
        {"agent": "", "outcome": "failure", "failure_mode": "", "critique": "12 + 2 is 14"}
    ]
    good = by_prompt["2 + 12 = 14."]
    assert (good["rubric"], good["rubric_reward"], good["episode"]) == ([], None, [])
    # Without the option the records are the bulk path's, as before.
    plain = tmp_path / "plain"
    export(*BASE, "--format", "trl-stepwise", "--out", str(plain))
    added = ("rubric", "rubric_reward", "episode")
    assert [
        {k: v for k, v in r.items() if k not in added} for r in lines(out / "trl-stepwise.jsonl")
    ] == lines(plain / "trl-stepwise.jsonl")

    prm = tmp_path / "prm"
    export(*BASE, "--format", "prm800k", "--rubric", "human:rita", "--out", str(prm))
    # prm800k's timestamp is the trajectory's external id.
    rewards = {r["timestamp"]: r["rubric_reward"] for r in lines(prm / "prm800k.jsonl")}
    assert rewards == {"bad": 0.75, "good": None}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "dpo", "--rubric", "human:rita"], "rubric: dpo has no record per trajectory"),
        (
            ["--format", "trl-stepwise", "--container", "parquet", "--rubric", "human:rita"],
            "rubric: written in jsonl or json records, not parquet",
        ),
        (["--format", "trl-stepwise", "--rubric", "model:x"], "'model:x' is not human:<username>"),
        (["--format", "trl-stepwise", "--rubric", "human:nobody"], "no annotator 'nobody'"),
        (["--format", "trl-stepwise", "--rubric", "judge:nobody"], "no scorer named 'nobody'"),
    ],
)
def test_bad_rubric_choices_are_refused_before_anything_is_written(
    tmp_path: Path, marked: User, extra: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        export(*BASE, *extra, "--out", str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


@pytest.fixture
def judged(arith: Project, marked: User) -> Scorer:  # noqa: F811
    """A second annotator who agrees with rita on ``bad`` (and submits it), and a judge's
    rubric run: ``good`` met on both, ``bad`` not met and n/a."""
    sam = UserFactory.create(username="sam")
    MembershipFactory.create(user=sam, project=arith, role=Membership.Role.RESEARCHER)
    rubric = Rubric.objects.get(project=arith)
    good, bad = (Trajectory.objects.get(external_id=name) for name in ("good", "bad"))
    mine = state(sam, bad)
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=0, mark="met", evidence=[1, 2])
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=1, mark="not_met", evidence=[2])
    TrajectoryLabel.objects.create(trajectory=bad, annotator=sam, status="submitted")
    judge = Scorer.objects.create(project=arith, name="judge", kind=prm.EXTERNAL)
    judge_rubric_marks_write(
        scorer=judge,
        rubric=rubric,
        marks=[
            RubricMarkInput(good.pk, 0, "met", (0,)),
            RubricMarkInput(good.pk, 1, "met"),
            RubricMarkInput(bad.pk, 0, "not_met"),
            RubricMarkInput(bad.pk, 1, "na"),
        ],
    )
    return judge


def test_a_judges_rubric_run_and_the_annotators_majority_export(
    tmp_path: Path, judged: Scorer
) -> None:
    out = tmp_path / "judge"
    export(*BASE, "--format", "trl-stepwise", "--rubric", "judge:judge", "--out", str(out))
    by_prompt = {r["completions"][-1]: r for r in lines(out / "trl-stepwise.jsonl")}
    bad, good = by_prompt["12 + 2 = 15."], by_prompt["2 + 12 = 14."]
    assert bad["rubric"] == [
        {
            "rubric": "rubric",
            "version": 1,
            "score": 0.0,
            "criteria": [
                {"criterion": 0, "mark": "not_met", "evidence": []},
                {"criterion": 1, "mark": "na", "evidence": []},
            ],
        }
    ]
    assert (good["rubric_reward"], good["rubric"][0]["criteria"][0]["evidence"]) == (1.0, [0])
    # A judge answers no episode questions.
    assert bad["episode"] == good["episode"] == []

    majority = tmp_path / "majority"
    export(
        *BASE, "--format", "prm800k", "--rubric", "rubric:human:majority", "--out", str(majority)
    )
    records = {r["timestamp"]: r for r in lines(majority / "prm800k.jsonl")}
    # bad: both met criterion 0 (step 1 cited by both, step 2 by one) and not criterion 1.
    assert records["bad"]["rubric"][0]["criteria"] == [
        {"criterion": 0, "mark": "met", "evidence": [1]},
        {"criterion": 1, "mark": "not_met", "evidence": [2]},
    ]
    assert records["bad"]["rubric_reward"] == 0.75
    # good: nobody submitted it.
    assert (records["good"]["rubric"], records["good"]["rubric_reward"]) == ([], None)


def test_the_export_form_offers_the_rubric_sources(arith: Project, judged: Scorer) -> None:  # noqa: F811
    data = {"format": "trl-stepwise", "labels": "import:stepscope", "neutral": "drop"}
    form = ExportForm({**data, "rubric": "judge:judge"}, project=arith)
    assert form.is_valid(), form.errors
    assert form.export_options() == {"rubric": "judge:judge"}
    assert [value for value, _ in form.fields["rubric"].choices] == [  # type: ignore[attr-defined]
        "",
        "human:majority",
        "human:rita",
        "human:sam",
        "judge:judge",
    ]
    assert ExportForm(data, project=arith).is_valid()
