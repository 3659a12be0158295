"""ChatDev logs, NeMo Gym and verifiers rollouts, Who&When's Magentic-One logs and OpenHands
folders through `import_trajectories` into PostgreSQL, and the import page offering every
format."""

from __future__ import annotations

import json
import re
from collections import Counter
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client

from tests.conftest import REALDATA
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_LANES
from tests.waiting import import_finished
from trajectories.formats import format_choices
from trajectories.models import ImportBatch, Project, Step, Trajectory

CHATDEV = REALDATA / "chatdev"
OPENHANDS = REALDATA / "openhands"


def run_import(source_format: str, *paths: Path, mapping: Path | None = None) -> dict[str, Any]:
    out, err = StringIO(), StringIO()
    extra = ["--mapping", str(mapping)] if mapping is not None else []
    call_command(
        "import_trajectories",
        "--project",
        "agents",
        "--create",
        "--format",
        source_format,
        *extra,
        *map(str, paths),
        stdout=out,
        stderr=err,
    )
    summary: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    assert summary["rejected"] == 0, err.getvalue()
    return summary


def batches(summary: dict[str, Any]) -> list[ImportBatch]:
    ids = summary["batch"] if isinstance(summary["batch"], list) else [summary["batch"]]
    return list(ImportBatch.objects.filter(pk__in=ids).order_by("pk"))


def steps_of(trajectory: Trajectory) -> list[Step]:
    return list(trajectory.steps.order_by("index"))


@pytest.mark.django_db
def test_chatdev_folder_imports_its_log_with_agents_and_phases() -> None:
    summary = run_import("chatdev", CHATDEV)
    assert (summary["created"], summary["steps"]) == (1, 36)
    [batch] = batches(summary)
    assert batch.file_name == "BMI Calculator_DefaultOrganization_20230918110521.log"
    trajectory = Trajectory.objects.get(source_format="chatdev")
    steps = steps_of(trajectory)
    assert sum(step.labelable for step in steps) == 12
    assert Counter(step.agent for step in steps if step.labelable) == {
        "Programmer": 5,
        "Code Reviewer": 3,
        "Chief Product Officer": 2,
        "Chief Technology Officer": 1,
        "Chief Executive Officer": 1,
    }
    assert len(trajectory.metadata["phases"]) == 12
    assert trajectory.metadata["cost"] == 0.040864
    assert steps[1].metadata["parent"] == 0 and steps[6].metadata["parent"] == 5


@pytest.mark.django_db
def test_nemo_gym_rollouts_are_stored_with_rewards_and_groups() -> None:
    summary = run_import("nemo-gym", REALDATA / "rl_nemo_gym")
    assert (summary["created"], summary["steps"]) == (15, 18 + 15 + 209)
    assert [batch.created_count for batch in batches(summary)] == [5, 5, 5]
    stored = Trajectory.objects.filter(source_format="nemo-gym")
    groups = Counter(stored.values_list("task_key", flat=True))
    assert groups["anyswe_hermes:0"] == 5 and groups["simple_agent:0"] == 5
    assert sorted(
        stored.filter(task_key="anyswe_hermes:0").values_list("outcome_reward", "success")
    ) == [
        (0.0, False),
        (0.0, False),
        (0.0, False),
        (1.0, True),
        (1.0, True),
    ]
    assert Step.objects.filter(trajectory__in=stored, labelable=True).count() == 10 + 10 + 141
    solved = stored.get(external_id="math_with_judge_hermes_agent:4:0")
    assert (solved.outcome_reward, solved.metadata["agent"]) == (
        1.0,
        "math_with_judge_hermes_agent",
    )


@pytest.mark.django_db
def test_verifiers_runs_are_stored_once_each_without_their_metadata_files() -> None:
    summary = run_import("verifiers", REALDATA / "rl_verifiers")
    assert (summary["created"], summary["steps"]) == (30, 103 + 142)
    assert [batch.file_name for batch in batches(summary)] == ["results.jsonl", "results.jsonl"]
    wordle = Trajectory.objects.filter(source_format="verifiers", task_key="wordle:0")
    assert wordle.count() == 3
    rewards = wordle.order_by("outcome_reward").values_list("outcome_reward", flat=True)
    assert list(rewards) == [1.36, 1.41, 1.4933333333]
    first = wordle.get(external_id="wordle:019a631c:0:0")
    assert first.metadata["metrics"]["format_reward_func"] == 0.8
    assert first.model_name == "gpt-5-mini"


@pytest.mark.django_db
def test_who_and_when_hand_crafted_logs_get_agent_lanes(tmp_path: Path) -> None:
    mapping = tmp_path / "who-and-when.json"
    mapping.write_text(json.dumps(WHO_AND_WHEN_LANES), encoding="utf-8")
    summary = run_import(
        "mapped", REALDATA / "multiagent_who_and_when" / "Hand-Crafted", mapping=mapping
    )
    assert (summary["created"], summary["steps"]) == (2, 29 + 5)
    trajectory = Trajectory.objects.get(
        external_id="6e3be83d1949fa52cba03fb1ce4b5b3bf7e37a83fd7d67694b10b2e439d90cf8"
    )
    steps = steps_of(trajectory)
    assert Counter(step.agent for step in steps) == {"Orchestrator": 21, "WebSurfer": 7, "human": 1}
    assert steps[12].agent == trajectory.metadata["mistake_agent"] == "WebSurfer"
    assert sum(step.labelable for step in steps) == 28


@pytest.mark.django_db
def test_openhands_folder_is_one_batch_per_conversation_and_no_empty_batch() -> None:
    summary = run_import("openhands", OPENHANDS)
    imported = batches(summary)
    # Four V0 files and the V1 conversation, whose eight event files make no batch of
    # their own (an earlier command made one empty batch for each).
    assert [batch.file_name for batch in imported] == [
        "basic.json",
        "basic_gui_mode.json",
        "basic_interactions.json",
        "cd94562403b9487ebdd4018e3f531dfd",
        "wrong_initial_state.json",
    ]
    assert [batch.created_count for batch in imported] == [1, 1, 1, 1, 1]
    assert ImportBatch.objects.count() == 5
    conversation = imported[3]
    assert conversation.step_count == 8
    folder = OPENHANDS / "v1_sdk_conversation" / "cd94562403b9487ebdd4018e3f531dfd"
    assert conversation.file_size == sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def select_options(html: str, name: str) -> list[str]:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select is not None, html
    return re.findall(r'<option value="([^"]*)"', select.group(1))


@pytest.mark.django_db
def test_import_page_offers_every_registered_format(
    client: Client, project: Project, researcher: User
) -> None:
    client.force_login(researcher)
    page = client.get(f"/p/{project.slug}/imports/new/").content.decode()
    offered = select_options(page, "source_format")
    assert offered == [name for name, _ in format_choices()]
    assert offered[0] == "stepscope" and offered[-1] == "mapped"
    for name in (
        "chatdev",
        "nemo-gym",
        "verifiers",
        "otel",
        "langfuse",
        "langsmith",
        "agent-session",
        "openhands",
    ):
        assert name in offered
    # An app's internal format (rollout continuations) is not offered.
    assert "rollout" not in offered


@pytest.fixture
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_chatdev_log_uploaded_on_the_page_imports_on_a_worker(
    client: Client,
    project: Project,
    researcher: User,
    celery_worker: object,
    media_in_tmp: None,
) -> None:
    client.force_login(researcher)
    log = next(CHATDEV.glob("*.log"))
    upload = SimpleUploadedFile(log.name, log.read_bytes())
    response = client.post(
        f"/p/{project.slug}/imports/new/", {"source_format": "chatdev", "file": upload}
    )
    assert response.status_code == 302
    batch = import_finished(int(response["Location"].rstrip("/").split("/")[-1]))
    assert batch.status == ImportBatch.Status.DONE, batch.errors
    assert (batch.created_count, batch.step_count) == (1, 36)


@pytest.mark.django_db
def test_a_folder_with_nothing_the_format_reads_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text("{}", encoding="utf-8")
    with pytest.raises(CommandError, match="nothing in it that --format chatdev reads"):
        run_import("chatdev", tmp_path)
    assert ImportBatch.objects.count() == 0
