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

from labeling.models import TrajectoryLabel
from labeling.services.rubrics import episode_verdict_set, rubric_mark_set, rubric_save
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
    ],
)
def test_bad_rubric_choices_are_refused_before_anything_is_written(
    tmp_path: Path, marked: User, extra: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        export(*BASE, *extra, "--out", str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()
