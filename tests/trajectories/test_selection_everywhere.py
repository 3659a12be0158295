"""One selection language everywhere: every job kind, given every filter, chooses exactly
the trajectories the list shows for the same filter, and every API entry point refuses a
name that is no filter with a 400 naming it.

A silently dropped filter costs most on a GPU queue (a scoring run with ``q`` once
scored a whole project), so each case first checks that the list's answer is a proper,
non-empty part of the project: a consumer that dropped the filter would choose them all.
The project is built once for the module; each test calls the service that selects its
job's trajectories (nothing is queued: nothing commits)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client

from discovery.mode_services import failure_mode_run_start, run_trajectories
from discovery.models import FailureMode, FailureModeMember, FailureModeRun
from discovery.services import embeddings_build
from exports.services import export_plan_build, selection_save
from exports.services.reading import ordered_ids
from labeling.models import LabelSchema, QueueItem, StepLabel
from labeling.services import queue_create
from rollouts.models import Policy, RolloutJob
from rollouts.services import jobs as rollout_jobs
from scoring import services as scoring
from scoring.models import AttributionRun, Scorer, ScoringRun, StepCredit, StepScore
from scoring.prm import EXTERNAL, TOKEN_CLASSIFICATION
from scoring.services import attribution as attribution_services
from scoring.services import scores as score_services
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.trajectories.test_views import row_ids
from trajectories.models import ImportBatch, Membership, Step, Trajectory
from trajectories.selection import (
    ALIASES,
    FILTERS,
    TrajectoryFilters,
    selection_parse,
    selection_query,
)
from trajectories.services import project_create

# Each case is a list query string; "{run}" is the attribution run's id.
CASES: dict[str, dict[str, str]] = {
    "q": {"q": "quokka"},
    "outcome": {"outcome": "failure"},
    "model": {"model": "m1"},
    "task": {"task": "t1"},
    "min_steps": {"min_steps": "4"},
    "max_steps": {"max_steps": "2"},
    "tool": {"tool": "search"},
    "agent": {"agent": "critic"},
    "kind": {"kind": "tool_call"},
    "error_steps": {"error_steps": "yes"},
    "meta": {"meta": "metadata.level >= 2"},
    "label_status": {"label_status": "partial"},
    "min_agreement": {"min_agreement": "1"},
    "first_error": {"first_error": "yes"},
    "label_schema": {"first_error": "yes", "label_schema": "step quality"},
    "human_model": {"human_model": "disagree", "model_scorer": "prm"},
    "model_threshold": {
        "human_model": "disagree",
        "model_scorer": "prm",
        "model_threshold": "0.95",
    },
    "credit_run": {"credit_run": "{run}"},
    "credit_above": {"credit_run": "{run}", "credit_above": "0.4"},
    "credit_below": {"credit_run": "{run}", "credit_below": "-0.65"},
    "policy_version": {"policy_version": "3..5"},
    "min_training_step": {"min_training_step": "5"},
    "max_training_step": {"max_training_step": "3"},
    "min_advantage": {"min_advantage": "0.4"},
    "max_advantage": {"max_advantage": "0"},
    "advantage_disagrees": {"advantage_disagrees": "yes"},
    "old names": {"task_key": "t2", "model_name": "m2"},
    "old training names": {"policy": "global_step_9", "min_train_step": "1"},
    "origin": {"origin": "rollouts"},
    "combined": {"first_error": "yes", "outcome": "failure", "q": "answer"},
    # Semantic search ranks every embedded trajectory; another filter narrows it.
    "similar": {"similar": "looking up an animal", "outcome": "success"},
    "similar_step": {"similar_step": "{step}", "model": "m2"},
    # The members of a failure mode (of a run made below, by hand).
    "failure_mode": {"failure_mode": "{mode}"},
}


def test_the_cases_cover_every_filter_and_old_name() -> None:
    named = {name for case in CASES.values() for name in case}
    assert set(FILTERS) <= named
    assert set(ALIASES) & named


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """Five trajectories, labels by two people and an import, a model's scores and an
    attribution run's credits (as tests/exports/test_selections.py's, plus step fields).

    Built inside a transaction that is rolled back after the module's tests, which run
    in savepoints of it: nothing is committed, so nothing is left for later tests."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
    try:
        with django_db_blocker.unblock():
            project = project_create(slug="everywhere", name="Everywhere")
            owner = UserFactory.create(username="everywhere-owner")
            MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
            alice = UserFactory.create(username="everywhere-alice")
            bob = UserFactory.create(username="everywhere-bob")
            truth = UserFactory.create(username="import:everywhere", is_active=False)
            plain = ["Two and two make 4.", "Then 4 * 3 = 12.", "The answer is 12."]
            specs: dict[str, dict[str, Any]] = {
                "agreed": {"success": True, "model_name": "m1", "task_key": "t1", "steps": 3},
                "split": {"success": False, "model_name": "m2", "task_key": "t1", "steps": 3},
                "bare": {"success": None, "model_name": "m1", "task_key": "t2", "steps": 5},
                "short": {"success": True, "model_name": "m2", "task_key": "t2", "steps": 2},
                "long": {"success": False, "model_name": "m1", "task_key": "t3", "steps": 6},
            }
            made: dict[str, Trajectory] = {}
            for name, spec in specs.items():
                contents = (plain * 2)[: spec.pop("steps")]
                made[name] = trajectory_with_steps(project, contents, external_id=name, **spec)
            # A rollout job's continuation of "long" (written through an internal batch).
            batch = ImportBatch.objects.create(
                project=project, file_name="rollouts", source_format="stepscope", internal=True
            )
            made["continued"] = trajectory_with_steps(
                project,
                ["Rolled on from step 2."],
                external_id="long-rollout-0",
                model_name="m3",
                task_key="t3",
                import_batch=batch,
            )
            steps = {name: list(t.steps.order_by("index")) for name, t in made.items()}
            Trajectory.objects.filter(pk=made["agreed"].pk).update(metadata={"level": 3})
            Trajectory.objects.filter(pk=made["bare"].pk).update(metadata={"level": 1})
            Step.objects.filter(pk=steps["agreed"][1].pk).update(
                content="I look up the quokka.", tool_name="search", kind="tool_call"
            )
            Step.objects.filter(pk=steps["bare"][2].pk).update(agent="critic")
            Step.objects.filter(pk=steps["split"][0].pk).update(metadata={"error": "boom"})
            # RL training facts: the policy and step that made three rollouts, and
            # advantages (agreed's last step, labelled -1 by both, got a positive one).
            for name, version, step_number in (
                ("agreed", "global_step_3", 3),
                ("split", "5", 5),
                ("bare", "global_step_9", 9),
            ):
                Trajectory.objects.filter(pk=made[name].pk).update(
                    policy_version=version, training_step=step_number
                )
            for name, index, advantage in (
                ("agreed", 2, 0.5),
                ("split", 0, 0.3),
                ("bare", 0, -0.2),
            ):
                Step.objects.filter(pk=steps[name][index].pk).update(advantage=advantage)
            embeddings_build(project_id=project.pk)

            schema = LabelSchema.objects.get(project=project)

            def label(name: str, index: int, user: User, value: int) -> None:
                StepLabel.objects.create(
                    step=steps[name][index], annotator=user, schema=schema, value=value
                )

            for index, value in enumerate([1, 1, -1]):
                label("agreed", index, alice, value)
                label("agreed", index, bob, value)
            for index in range(2):
                label("short", index, truth, 1)
            label("split", 0, alice, 1)
            label("split", 0, bob, 1)
            label("split", 1, alice, 1)
            label("split", 1, bob, -1)
            prm = Scorer.objects.create(project=project, name="prm", kind=EXTERNAL, queue="default")
            for name, values in {"agreed": [0.9, 0.8, 0.2], "split": [0.1, 0.9, 0.9]}.items():
                for step, score in zip(steps[name], values, strict=True):
                    StepScore.objects.create(step=step, scorer=prm, value=score)
            run = AttributionRun.objects.create(
                project=project, method="group-relative", key="everywhere", status="done"
            )
            for name, values in {"agreed": [0.5, 0.1, -0.7], "split": [0.2, -0.6, 0.0]}.items():
                for step, credit in zip(steps[name], values, strict=True):
                    StepCredit.objects.create(step=step, run=run, value=credit)
            model = Scorer.objects.create(
                project=project,
                name="tiny-prm",
                kind=TOKEN_CLASSIFICATION,
                model_ref="tiny",
                queue="default",
            )
            judge = scoring.judge_create(
                name="judge", model_ref="tiny-judge", project=project, queue="default"
            )
            policy = Policy.objects.create(name="tiny", project=project, model_ref="tiny")
            modes_run = FailureModeRun.objects.create(
                project=project, label_source="human:majority", status="done"
            )
            mode = FailureMode.objects.create(run=modes_run, number=1, name="x", size=2, share=1)
            for name in ("split", "long"):
                FailureModeMember.objects.create(
                    mode=mode, trajectory=made[name], step=steps[name][1]
                )
        yield {
            "mode": mode,
            "project": project,
            "owner": owner,
            "run": run,
            "model": model,
            "judge": judge,
            "policy": policy,
            "ids": {t.pk for t in made.values()},
            "step": steps["agreed"][1].pk,
            # What the list shows for each case, rendered once for the module: every
            # job kind's test compares against it, and no test writes trajectories.
            "shown": {},
        }
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def query_of(world: dict[str, Any], case: str) -> dict[str, str]:
    return {
        name: value.format(run=world["run"].pk, step=world["step"], mode=world["mode"].pk)
        for name, value in CASES[case].items()
    }


def listed(world: dict[str, Any], query: dict[str, str]) -> set[int]:
    """The list page's rows for ``query``, with every origin unless it names one (the
    page's own default leaves the rollouts' continuations out)."""
    client = Client()
    client.force_login(world["owner"])
    query = {"origin": "", **query}
    response = client.get(f"/p/{world['project'].slug}/trajectories/", query)
    assert response.status_code == 200
    assert b'class="errors"' not in response.content, response.content.decode()
    return set(row_ids(response.content.decode()))


# --- What each job kind chooses, through the service that chooses it ----------------------


def scoring_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    run = scoring.scoring_run_start(
        project=world["project"], scorer=world["model"], filters=filters
    )
    return {trajectory for trajectory, _ in score_services._selected_steps(run)}


def judge_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    run = scoring.scoring_run_start(
        project=world["project"], scorer=world["judge"], filters=filters
    )
    return {trajectory for trajectory, _ in score_services._selected_steps(run)}


def attribution_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    run = scoring.attribution_run_start(
        project=world["project"], method="group-relative", filters=filters
    )
    return set(attribution_services._trajectory_queryset(run).values_list("pk", flat=True))


def rollout_chosen(mode: str) -> Callable[[dict[str, Any], TrajectoryFilters], set[int]]:
    def chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
        job = rollout_jobs.rollout_job_start(
            project=world["project"], policy=world["policy"], k=1, mode=mode, filters=filters
        )
        return set(rollout_jobs._selected_trajectories(job).values_list("pk", flat=True))

    return chosen


def queue_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    queue = queue_create(
        project=world["project"], name="everywhere", created_by=None, filters=filters
    )
    return set(QueueItem.objects.filter(queue=queue).values_list("trajectory_id", flat=True))


def export_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    project = world["project"]
    selection_save(project=project, name="picked", filters=filters, user=None)
    plan = export_plan_build(
        project=project,
        format="stepscope",
        labels="human:majority",
        neutral="drop",
        selection="picked",
    )
    return set(ordered_ids(plan))


def saved_selection_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    """A saved selection opened as the list: its stored definition, as a query string."""
    saved = selection_save(project=world["project"], name="opened", filters=filters, user=None)
    saved.refresh_from_db()
    return listed(world, selection_query(selection_parse(saved.definition)))


def api_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    client = Client()
    client.force_login(world["owner"])
    query = {"project": world["project"].slug, **selection_query(filters)}
    response = client.get("/api/v1/trajectories/", query)
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def failure_modes_chosen(world: dict[str, Any], filters: TrajectoryFilters) -> set[int]:
    run = failure_mode_run_start(project=world["project"], user=None, filters=filters)
    return set(run_trajectories(run).values_list("pk", flat=True))


KINDS: dict[str, Callable[[dict[str, Any], TrajectoryFilters], set[int]]] = {
    "failure modes": failure_modes_chosen,
    "scoring": scoring_chosen,
    "judge": judge_chosen,
    "attribution": attribution_chosen,
    "rollout": rollout_chosen(RolloutJob.Mode.ALL),
    "first-error search": rollout_chosen(RolloutJob.Mode.SEARCH),
    "queue": queue_chosen,
    "export": export_chosen,
    "saved selection": saved_selection_chosen,
    "api list": api_chosen,
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_job_kind_chooses_what_the_list_shows(
    world: dict[str, Any], kind: str, case: str
) -> None:
    query = query_of(world, case)
    if case not in world["shown"]:
        world["shown"][case] = listed(world, query)
    shown = world["shown"][case]
    assert shown and shown < world["ids"], f"{case} should pick some, not all: {shown}"
    assert KINDS[kind](world, selection_parse(query)) == shown


# --- Unknown names, refused at every API entry point --------------------------------------


@pytest.mark.django_db
def test_the_list_api_refuses_a_name_that_is_no_filter(world: dict[str, Any]) -> None:
    client = Client()
    client.force_login(world["owner"])
    query = {"project": world["project"].slug, "task_key": "t1", "bogus": "1"}
    response = client.get("/api/v1/trajectories/", query)
    assert response.status_code == 400
    assert "unknown filter" in response.json()["bogus"][0]
    paging = client.get(
        "/api/v1/trajectories/", {"project": world["project"].slug, "format": "json"}
    )
    assert paging.status_code == 200


JOB_POSTS: dict[str, dict[str, Any]] = {
    "/api/v1/scoring-runs/": {"scorer": "tiny-prm"},
    "/api/v1/attribution-runs/": {"method": "group-relative"},
    "/api/v1/rollouts/": {"policy": "tiny", "k": 1, "steps": "all"},
}


@pytest.mark.django_db
@pytest.mark.parametrize("url", list(JOB_POSTS))
@pytest.mark.parametrize(
    ("filters", "name", "message"),
    [
        ({"q": "x", "bogus": 1}, "bogus", "unknown filter"),
        ({"outcome": "failed"}, "outcome", "not one of success"),
        ({"credit_run": 999999}, "credit_run", "no attribution run 999999"),
    ],
)
def test_every_job_api_refuses_a_bad_filter_naming_it(
    world: dict[str, Any], url: str, filters: dict[str, Any], name: str, message: str
) -> None:
    client = Client()
    client.force_login(world["owner"])
    body = {"project": world["project"].slug, **JOB_POSTS[url], "filters": filters}
    response = client.post(url, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert message in response.json()["filters"][name][0]


# --- The commands take the same filters: --filter NAME=VALUE ------------------------------


COMMANDS: dict[str, tuple[list[str], Any]] = {
    "score": (["--scorer", "tiny-prm"], ScoringRun),
    "attribute": (["--method", "group-relative"], AttributionRun),
    "rollout": (["--policy", "tiny", "--k", "1"], RolloutJob),
}


@pytest.mark.django_db
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_takes_the_filters_and_names_a_bad_one(
    world: dict[str, Any], command: str
) -> None:
    arguments, model = COMMANDS[command]
    project = ["--project", world["project"].slug]
    filters = ["--filter", "task_key=t1", "--filter", "q=quokka"]
    call_command(command, *project, *arguments, *filters, stdout=StringIO())
    job = model.objects.filter(project=world["project"]).latest("pk")
    assert job.selection["filters"] == {"q": "quokka", "task": "t1"}
    with pytest.raises(CommandError, match="bogus: unknown filter"):
        call_command(command, *project, *arguments, "--filter", "bogus=1", stdout=StringIO())
    with pytest.raises(CommandError, match="NAME=VALUE"):
        call_command(command, *project, *arguments, "--filter", "task", stdout=StringIO())
