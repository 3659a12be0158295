"""What a training loop asks of the client beyond pushing data, against a live server
(and, where a job must run, the suite's Celery worker): projects, scorers, judge,
attribution, rollout and training runs, scores, credits and Monte Carlo values read
back, and versioned batches pinned as ``name@n``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from stepscope_client import BatchFiles, Client, StepscopeError

from accounts.services import api_token_create
from exports.models import ExportJob
from rollouts.models import Policy, RolloutJob, StepMC
from scoring.models import Scorer, ScoringRun
from scoring.services import judges
from trajectories.models import Membership, Project, Trajectory

pytestmark = pytest.mark.django_db(transaction=True)


def records(names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "id": name,
            "task": f"Task {name}",
            "steps": [{"content": f"{name}: first"}, {"content": f"{name}: second"}],
        }
        for name in names
    ]


@pytest.fixture
def stepscope(live_server: Any, token: str) -> Iterator[Client]:
    with Client(live_server.url, token) as stepscope:
        yield stepscope


def test_a_project_is_made_and_listed(stepscope: Client, owner: User) -> None:
    made = stepscope.create_project("loop", "Training loop", guidelines="# Rules")
    assert (made["slug"], made["name"]) == ("loop", "Training loop")
    assert Membership.objects.get(project__slug="loop", user=owner).role == "admin"
    assert "loop" in {p["slug"] for p in stepscope.projects()}
    with pytest.raises(StepscopeError) as taken:
        stepscope.create_project("loop")
    assert taken.value.status == 400 and "slug" in taken.value.errors


def test_scores_become_credits_that_are_read_back(
    stepscope: Client, project: Project, celery_worker: object
) -> None:
    stepscope.push_trajectories(project.slug, records(["a", "b"]))
    values = {("a", 0): 0.9, ("a", 1): 0.3, ("b", 0): 0.6, ("b", 1): 0.8}
    stepscope.push_scores(
        project.slug,
        "ext",
        [{"trajectory": t, "step": i, "value": v} for (t, i), v in values.items()],
    )
    a = stepscope.trajectory_id(project.slug, "a")
    assert [(s["index"], s["value"]) for s in stepscope.scores(a, scorer="ext")] == [
        (0, 0.9),
        (1, 0.3),
    ]

    run = stepscope.start_attribution(project.slug, "prm-delta", scorer="ext")
    assert run.kind == "attribution-runs"
    done = stepscope.wait(run, poll=0.05, timeout=120)

    credits = stepscope.credits(a, run=done.id)
    # V_t - V_(t-1), from V = 1 before the first step.
    assert [(c["index"], round(c["value"], 6)) for c in credits] == [(0, -0.1), (1, -0.6)]
    every = list(stepscope.run_credits(done.id))
    assert len(every) == 4 and {c["trajectory"] for c in every} == {
        a,
        stepscope.trajectory_id(project.slug, "b"),
    }
    assert [c["value"] for c in stepscope.run_credits(done.id, trajectory=a)] == [
        c["value"] for c in credits
    ]
    with pytest.raises(StepscopeError) as refused:
        stepscope.start_attribution(project.slug, "prm-delta", scorer="nobody")
    assert refused.value.status == 400


def test_judge_rollout_and_training_runs_are_started(
    stepscope: Client, project: Project, owner: User
) -> None:
    stepscope.push_trajectories(project.slug, records(["a"]))
    a = stepscope.trajectory_id(project.slug, "a")

    judge = stepscope.create_scorer(
        project.slug,
        "judge",
        "llm-judge",
        model_ref="m",
        parameters={"backend": "remote", "base_url": "http://127.0.0.1:9/v1"},
        prompt={"system": "Be strict.", "template": "{task}\n{history}\n{step}\nVerdict?"},
        # Nothing listens there: the point is the run being started, not judged.
        queue="nobody-listens",
    )
    assert judge["kind"] == "llm-judge" and judge["name"] == "judge"
    judges.judge_prompt_create(scorer=Scorer.objects.get(pk=judge["id"]), note="v2", user=owner)
    run = stepscope.start_judge(project.slug, "judge", prompt_version=1, only_unscored=True)
    assert run.kind == "scoring-runs" and run.data["prompt_version"] == 1
    assert ScoringRun.objects.filter(pk=run.id, prompt__version=1).exists()
    assert "judge" in {s["name"] for s in stepscope.scorers(project.slug)}

    policy = Policy.objects.create(
        project=project, name="sampler", model_ref="tiny", queue="nobody-listens"
    )
    rollouts = stepscope.start_rollouts(project.slug, "sampler", 4, trajectories=[a])
    job = RolloutJob.objects.get(pk=rollouts.id)
    assert rollouts.kind == "rollouts" and (job.policy_id, job.k) == (policy.pk, 4)
    with pytest.raises(StepscopeError) as unknown:
        stepscope.start_rollouts(project.slug, "nobody", 4)
    assert unknown.value.status == 400 and "policy" in unknown.value.errors

    training = stepscope.train_head(project.slug, "head", holdout=0.25)
    trained = ScoringRun.objects.get(pk=training.id)
    assert training.kind == "scoring-runs" and trained.kind == ScoringRun.Kind.TRAIN
    assert trained.parameters["holdout"] == 0.25

    # Monte Carlo values (as a finished rollout job leaves them) read back per step.
    step = Trajectory.objects.get(pk=a).steps.get(index=1)
    StepMC.objects.create(step=step, policy=policy, k=4, successes=3, soft=0.75, hard=True)
    values = stepscope.mc_values(a, policy="sampler")
    assert [(v["index"], v["k"], v["successes"], v["soft"]) for v in values] == [(1, 4, 3, 0.75)]


def test_a_batch_version_is_pinned_and_fetched(
    stepscope: Client,
    project: Project,
    live_server: Any,
    outsider: User,
    tmp_path: Path,
    celery_worker: object,
) -> None:
    stepscope.push_trajectories(project.slug, records(["a", "b"]))
    a = stepscope.trajectory_id(project.slug, "a")
    stepscope.push_labels(
        [{"trajectory": a, "index": 0, "value": 1}, {"trajectory": a, "index": 1, "value": -1}],
        submit=True,
    )
    export = {"labels": "human:owner", "neutral": "positive", "batch": "rl-batch"}
    first = stepscope.wait(stepscope.start_export(project.slug, "trl-stepwise", **export))
    assert (first.data["batch"], first.data["batch_version"]) == ("rl-batch", 1)

    stepscope.push_trajectories(project.slug, records(["c"]))
    stepscope.wait(stepscope.start_export(project.slug, "trl-stepwise", **export))

    newest = stepscope.fetch_batch(project.slug, "rl-batch", tmp_path / "newest")
    assert isinstance(newest, BatchFiles) and (newest.ref, newest.version) == ("rl-batch@2", 2)
    pinned = stepscope.fetch_batch(project.slug, "rl-batch@1", tmp_path / "pinned")
    assert (pinned.version, pinned.export) == (1, first.id)
    assert [p.name for p in pinned.paths] == ["trl-stepwise.jsonl", "manifest.json"]
    manifest = json.loads((tmp_path / "pinned" / "manifest.json").read_text())
    assert manifest == pinned.manifest == first.data["manifest"]
    rows = (tmp_path / "pinned" / "trl-stepwise.jsonl").read_text().splitlines()
    # Only the labelled trajectory makes a record; the versions hold every one selected.
    assert len(rows) == 1 and json.loads(rows[0])["labels"] == [True, False]
    versions = stepscope.batch(project.slug, "rl-batch")["versions"]
    assert [(v["ref"], v["trajectories"], v["labels"]) for v in versions] == [
        ("rl-batch@2", 3, 2),
        ("rl-batch@1", 2, 2),
    ]
    assert stepscope.batches(project.slug)[0]["name"] == "rl-batch"
    diff = stepscope.batch_diff(project.slug, "rl-batch")
    assert diff["counts"]["trajectories"] == {"added": 1, "removed": 0, "changed": 0}
    assert [c["external_id"] for c in diff["trajectories"]] == ["c"]

    with pytest.raises(StepscopeError) as missing:
        stepscope.batch_version(project.slug, "rl-batch@3")
    assert missing.value.status == 404 and "no version 3" in str(missing.value)
    with pytest.raises(ValueError, match="is not a batch version"):
        stepscope.batch_version(project.slug, "rl-batch@seven")
    _, secret = api_token_create(user=outsider, name="stranger")
    with Client(live_server.url, secret) as stranger, pytest.raises(StepscopeError) as hidden:
        stranger.fetch_batch(project.slug, "rl-batch@1", tmp_path / "stranger")
    assert hidden.value.status == 404

    # A file that no longer matches its sha256 is refused and not kept.
    job = ExportJob.objects.get(pk=first.id)
    (Path(job.out_dir) / "trl-stepwise.jsonl").write_text("{}\n")
    with pytest.raises(StepscopeError, match="sha256"):
        stepscope.fetch_batch(project.slug, "rl-batch@1", tmp_path / "tampered")
    assert not (tmp_path / "tampered" / "trl-stepwise.jsonl").exists()
    assert hashlib.sha256(b"{}\n").hexdigest() not in json.dumps(first.data["files"])
