"""Step scores, credits and Monte Carlo values read through the API, one trajectory at a
time, under the trajectory page's rule for hidden model scores; scores computed elsewhere
pushed as ``manage.py import_scores`` stores them."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.urls import reverse

from labeling.models import Queue
from labeling.services import queue_create, trajectory_submit
from rollouts.models import Policy, StepMC
from scoring import prm
from scoring.models import AttributionRun, Scorer, ScoringRun, StepCredit, StepScore
from tests.factories import UserFactory, trajectory_with_steps
from tests.labeling.conftest import leased_state
from tests.labeling.test_api import token_client
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters


def two_trajectories(project: Project) -> tuple[Trajectory, Trajectory]:
    return (
        trajectory_with_steps(project, ["a", "b", "c"], external_id="first"),
        trajectory_with_steps(project, ["d", "e"], external_id="second"),
    )


def steps(trajectory: Trajectory) -> list[Step]:
    return list(Step.objects.filter(trajectory=trajectory).order_by("index"))


def credited_run(project: Project, owner: User, *trajectories: Trajectory) -> AttributionRun:
    run = AttributionRun.objects.create(
        project=project,
        method=AttributionRun.Method.PRM_DELTA,
        key="k" * 64,
        status=AttributionRun.Status.DONE,
        created_by=owner,
    )
    for trajectory in trajectories:
        for step in steps(trajectory):
            StepCredit.objects.create(step=step, run=run, value=step.index / 10)
    return run


def test_run_credits_narrowed_to_one_trajectory_are_only_its_own(
    project: Project, owner: User
) -> None:
    first, second = two_trajectories(project)
    run = credited_run(project, owner, first, second)
    client = token_client(owner)
    url = reverse("attribution-run-credits", args=[run.pk])
    rows = client.get(url, {"trajectory": second.pk}).json()["results"]
    assert sorted((r["trajectory"], r["index"]) for r in rows) == [(second.pk, 0), (second.pk, 1)]
    one = client.get(url, {"step": steps(first)[2].pk}).json()["results"]
    assert [(r["trajectory"], r["index"]) for r in one] == [(first.pk, 2)]
    assert len(client.get(url).json()["results"]) == 5
    bad = client.get(url, {"trajectory": "second"})
    assert bad.status_code == 400 and bad.json() == {"trajectory": "expected an id, got 'second'"}


def test_trajectory_scores_credits_and_mc_values(project: Project, owner: User) -> None:
    first, second = two_trajectories(project)
    scorer = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL)
    other = Scorer.objects.create(project=project, name="judge", kind=prm.EXTERNAL)
    for trajectory in (first, second):
        for step in steps(trajectory):
            StepScore.objects.create(step=step, scorer=scorer, value=0.1 * (step.index + 1))
    StepScore.objects.create(step=steps(first)[0], scorer=other, value=0.9)
    run = credited_run(project, owner, first, second)
    policy = Policy.objects.create(project=project, name="pol", model_ref="tiny")
    StepMC.objects.create(
        step=steps(first)[1], policy=policy, k=4, successes=1, soft=0.25, hard=True
    )
    StepMC.objects.create(step=steps(second)[0], policy=policy, k=4, successes=4, soft=1, hard=True)
    client = token_client(owner)

    scores = client.get(reverse("trajectory-scores", args=[first.pk])).json()
    assert [(r["index"], r["scorer_name"], round(r["value"], 2)) for r in scores] == [
        (0, "prm", 0.1),
        (0, "judge", 0.9),
        (1, "prm", 0.2),
        (2, "prm", 0.3),
    ]
    only = client.get(reverse("trajectory-scores", args=[first.pk]), {"scorer": "judge"}).json()
    assert [r["value"] for r in only] == [0.9]
    unknown = client.get(reverse("trajectory-scores", args=[first.pk]), {"scorer": "nope"})
    assert unknown.status_code == 400 and "scorer" in unknown.json()

    credits = client.get(reverse("trajectory-credits", args=[second.pk])).json()
    assert [(r["index"], r["run"], r["method"], r["value"]) for r in credits] == [
        (0, run.pk, "prm-delta", 0.0),
        (1, run.pk, "prm-delta", 0.1),
    ]
    assert client.get(reverse("trajectory-credits", args=[second.pk]), {"run": 999999}).json() == []

    mc = client.get(reverse("trajectory-mc", args=[first.pk])).json()
    assert [(r["index"], r["policy_name"], r["k"], r["successes"], r["soft"]) for r in mc] == [
        (1, "pol", 4, 1, 0.25)
    ]


def test_hidden_scores_wait_for_the_annotators_submit(
    project: Project, owner: User, annotator: User, outsider: User
) -> None:
    project.settings = {"hide_model_scores": True}
    project.save(update_fields=["settings"])
    (trajectory, _) = two_trajectories(project)
    queue: Queue = queue_create(
        project=project, name="q", created_by=owner, filters=TrajectoryFilters(), overlap=1
    )
    client = token_client(annotator)
    names = ("trajectory-scores", "trajectory-credits", "trajectory-mc")
    for name in names:
        response = client.get(reverse(name, args=[trajectory.pk]))
        assert response.status_code == 403, name
        assert "hides model scores" in response.json()["detail"]
        assert token_client(owner).get(reverse(name, args=[trajectory.pk])).status_code == 200
        assert token_client(outsider).get(reverse(name, args=[trajectory.pk])).status_code == 404
    state = leased_state(annotator, queue)
    assert state.trajectory.pk == trajectory.pk
    trajectory_submit(state=state, finish_reason="give_up")
    for name in names:
        assert client.get(reverse(name, args=[trajectory.pk])).status_code == 200, name


def test_scores_import_stores_them_all_or_names_each_bad_record(
    project: Project, owner: User, annotator: User
) -> None:
    first, _ = two_trajectories(project)
    client = token_client(owner)
    url = reverse("scores-import")
    records = [
        {"trajectory": "first", "step": 0, "value": 0.9},
        {"trajectory": "first", "step": 7, "value": 0.5},
        {"trajectory": "nobody", "step": 0, "value": 0.5},
        {"trajectory": "second", "step": 1, "value": 1.5},
        {"trajectory": "second", "step": 1},
    ]
    refused = client.post(
        url,
        {"project": "demo", "scorer": "ext", "scores": records},
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert refused.json() == {
        "scores": {
            "1": "trajectory 'first' has no step 7",
            "2": "no trajectory 'nobody' in this project",
            "3": "'value' must be a number from 0 to 1",
            "4": "'value' is missing",
        }
    }
    assert not StepScore.objects.exists()
    assert not ScoringRun.objects.exists() and not Scorer.objects.exists()

    good = [{"trajectory": "first", "step": i, "value": i / 4} for i in range(3)]
    stored = client.post(
        url, {"project": "demo", "scorer": "ext", "scores": good}, content_type="application/json"
    )
    assert stored.status_code == 201, stored.json()
    assert stored.json()["stored"] == 3 and stored.json()["scorer"] == "ext"
    scores = client.get(reverse("trajectory-scores", args=[first.pk]), {"scorer": "ext"}).json()
    assert [r["value"] for r in scores] == [0.0, 0.25, 0.5]

    skipped = client.post(
        url,
        {"project": "demo", "scorer": "ext", "scores": records, "skip_invalid": True},
        content_type="application/json",
    )
    assert skipped.status_code == 201 and skipped.json()["stored"] == 1
    assert set(skipped.json()["rejected"]) == {"1", "2", "3", "4"}

    refused_role = token_client(annotator).post(
        url, {"project": "demo", "scorer": "ext", "scores": good}, content_type="application/json"
    )
    assert refused_role.status_code == 403
    unknown = client.post(
        url,
        {"project": "demo", "scorer": "ext", "scores": good, "extra": 1},
        content_type="application/json",
    )
    assert unknown.status_code == 400 and unknown.json() == {"extra": ["Unknown field."]}
    outsider = UserFactory.create(username="stranger")
    elsewhere = token_client(outsider).post(
        url, {"project": "demo", "scorer": "ext", "scores": good}, content_type="application/json"
    )
    assert elsewhere.status_code == 404
