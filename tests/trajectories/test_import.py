"""The import service and `import_trajectories` command on the real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from labeling.models import StepLabel
from tests.conftest import REALDATA
from tests.factories import MembershipFactory, UserFactory
from trajectories import synthetic
from trajectories.models import ImportBatch, Membership, Project, Step, Trajectory, TrajectorySource
from trajectories.selectors import membership_role, project_get_for_user
from trajectories.services import ImportRejected, project_create, trajectory_import

PROCESSBENCH = REALDATA / "processbench" / "gsm8k.json"
TAU_BENCH = REALDATA / "tau_bench" / "gpt-4o-airline.json"

pytestmark = pytest.mark.django_db


def run_import(*args: str) -> tuple[dict, str]:
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("import_trajectories", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        assert exit_.code == 1
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    return summary, err.getvalue()


def test_processbench_real_file_counts_and_imported_labels() -> None:
    summary, _ = run_import(
        "--project", "pb", "--create", "--format", "processbench", str(PROCESSBENCH)
    )
    assert summary["created"] == 400
    assert summary["steps"] == 2082
    assert summary["rejected"] == 0
    project = Project.objects.get(slug="pb")
    assert Trajectory.objects.filter(project=project).count() == 400
    assert Step.objects.filter(trajectory__project=project).count() == 2082

    raw = json.loads(PROCESSBENCH.read_text())
    with_error = [r for r in raw if r["label"] >= 0]
    assert len(with_error) == 207
    bad_labels = StepLabel.objects.filter(step__trajectory__project=project, value=-1)
    assert bad_labels.count() == 207
    assert {label.annotator.username for label in bad_labels.select_related("annotator")} == {
        "import:processbench"
    }
    # The bad label sits exactly at the source's first-error index; steps before are +1
    # and steps after it carry no label.
    record = with_error[0]
    trajectory = Trajectory.objects.get(project=project, external_id=record["id"])
    labels = dict(
        StepLabel.objects.filter(step__trajectory=trajectory).values_list("step__index", "value")
    )
    first_error = record["label"]
    assert labels == {**{i: 1 for i in range(first_error)}, first_error: -1}
    assert trajectory.task == record["problem"]
    steps = list(trajectory.steps.order_by("index").values_list("content", flat=True))
    assert steps == record["steps"]


def test_processbench_annotator_cannot_log_in() -> None:
    run_import("--project", "pb", "--create", "--format", "processbench", str(PROCESSBENCH))
    annotator = StepLabel.objects.select_related("annotator").earliest("id").annotator
    assert not annotator.is_active
    assert not annotator.has_usable_password()


def test_tau_bench_real_file_counts() -> None:
    summary, _ = run_import(
        "--project", "tau", "--create", "--format", "openai-messages", str(TAU_BENCH)
    )
    assert summary["created"] == 200
    assert summary["steps"] == 5308
    project = Project.objects.get(slug="tau")
    trajectories = Trajectory.objects.filter(project=project)
    assert trajectories.filter(outcome_reward=1.0).count() == 84
    assert trajectories.filter(success=True).count() == 84
    steps = Step.objects.filter(trajectory__project=project)
    assert steps.filter(role="assistant").count() == 2454
    assert steps.filter(labelable=True).count() == 2454
    assert not steps.filter(role__in=["system", "user", "tool"], labelable=True).exists()
    assert steps.filter(kind="tool_result").count() == 1164
    # The source's own ids are kept: task_id and trial.
    assert trajectories.filter(task_key="0").count() == 4


def test_reimport_changes_nothing() -> None:
    first, _ = run_import(
        "--project", "pb", "--create", "--format", "processbench", str(PROCESSBENCH)
    )
    second, _ = run_import("--project", "pb", "--format", "processbench", str(PROCESSBENCH))
    assert first["created"] == 400
    assert second == {**second, "created": 0, "unchanged": 400, "steps": 0, "rejected": 0}
    assert Trajectory.objects.count() == 400
    assert StepLabel.objects.count() == first_label_count()


def first_label_count() -> int:
    raw = json.loads(PROCESSBENCH.read_text())
    return sum(len(r["steps"]) if r["label"] < 0 else r["label"] + 1 for r in raw)


def test_malformed_record_writes_nothing_and_names_record_and_field(tmp_path: Path) -> None:
    raw = json.loads(PROCESSBENCH.read_text())[:5]
    raw[3]["steps"] = "not a list"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))

    summary, err = run_import("--project", "pb", "--create", "--format", "processbench", str(bad))
    assert summary["created"] == 0
    assert summary["rejected"] == 1
    assert "record 3" in err and "steps" in err
    assert Trajectory.objects.count() == 0
    assert Step.objects.count() == 0
    assert StepLabel.objects.count() == 0
    batch = ImportBatch.objects.get()
    assert batch.status == ImportBatch.Status.FAILED
    assert batch.errors[0]["location"] == "record 3"


def test_malformed_line_in_jsonl_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    synthetic.write_jsonl(path, synthetic.rollouts(tasks=2, seed=1))
    lines = path.read_text().splitlines()
    broken = json.loads(lines[4])
    del broken["steps"][1]["content"]
    lines[4] = json.dumps(broken)
    path.write_text("\n".join(lines) + "\n")
    project = project_create(slug="s", name="s")

    with pytest.raises(ImportRejected) as rejected:
        trajectory_import(project=project, source_format="stepscope", path=path)
    assert rejected.value.batch.errors[0]["location"] == "line 5"
    assert rejected.value.batch.errors[0]["field"] == "steps.1.content"
    assert not Trajectory.objects.exists()


def test_skip_invalid_writes_the_good_records(tmp_path: Path) -> None:
    raw = json.loads(PROCESSBENCH.read_text())[:5]
    raw[2]["label"] = 99
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    project = project_create(slug="pb", name="pb")

    batch = trajectory_import(
        project=project, source_format="processbench", path=bad, skip_invalid=True
    )
    assert (batch.created_count, batch.rejected_count) == (4, 1)
    assert Trajectory.objects.count() == 4


def test_not_json_file_is_rejected_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "garbage.json"
    path.write_text("{ this is not json")
    summary, err = run_import("--project", "pb", "--create", "--format", "processbench", str(path))
    assert summary["rejected"] == 1
    assert "garbage.json" in err
    assert Trajectory.objects.count() == 0


def test_unknown_format_and_missing_project_are_command_errors() -> None:
    with pytest.raises(CommandError, match="unknown format"):
        call_command("import_trajectories", "--project", "x", "--create", "--format", "nope", "f")
    with pytest.raises(CommandError, match="--create"):
        call_command("import_trajectories", "--project", "x", "--format", "stepscope", "f")


def test_create_with_an_owner_makes_a_project_they_can_open(tmp_path: Path) -> None:
    owner = UserFactory.create(username="lead")
    summary, err = run_import(
        "--project", "pb", "--create", "--owner", "lead", "--format", "processbench",
        str(PROCESSBENCH),
    )  # fmt: skip
    project = Project.objects.get(slug="pb")
    assert summary["created"] == 400 and "warning" not in summary and err == ""
    assert summary["owner"] == "lead"
    assert membership_role(owner, project) == Membership.Role.ADMIN
    assert project_get_for_user(owner, "pb") == project

    # On a project that exists, the owner joins it as an admin (or becomes one).
    other = UserFactory.create(username="second")
    MembershipFactory.create(user=other, project=project, role=Membership.Role.ANNOTATOR)
    run_import(
        "--project", "pb", "--owner", "second", "--format", "processbench", str(PROCESSBENCH)
    )
    assert membership_role(other, project) == Membership.Role.ADMIN


def test_create_without_an_owner_says_nobody_can_open_the_project() -> None:
    summary, err = run_import(
        "--project", "pb", "--create", "--format", "processbench", str(PROCESSBENCH)
    )
    assert summary["created"] == 400
    assert "nobody can open project 'pb'" in summary["warning"]
    assert "--owner USERNAME" in summary["warning"]
    assert summary["warning"] in err
    # An inactive member cannot open it either.
    ghost = UserFactory.create(username="ghost", is_active=False)
    MembershipFactory.create(
        user=ghost, project=Project.objects.get(slug="pb"), role=Membership.Role.ADMIN
    )
    again, _ = run_import("--project", "pb", "--format", "processbench", str(PROCESSBENCH))
    assert "nobody can open project 'pb'" in again["warning"]


def test_an_unknown_owner_is_refused_before_anything_is_made() -> None:
    with pytest.raises(CommandError, match="no active user 'nobody'"):
        run_import(
            "--project", "pb", "--create", "--owner", "nobody", "--format", "processbench",
            str(PROCESSBENCH),
        )  # fmt: skip
    assert not Project.objects.filter(slug="pb").exists()


def test_prefix_hashes_are_shared_by_rollouts_with_a_common_prefix(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    synthetic.write_jsonl(path, synthetic.rollouts(tasks=3, seed=3))
    project = project_create(slug="s", name="s")
    trajectory_import(project=project, source_format="stepscope", path=path)

    for task_key in Trajectory.objects.values_list("task_key", flat=True).distinct():
        rollouts = list(Trajectory.objects.filter(task_key=task_key))
        first_steps = {r.steps.get(index=0).prefix_hash for r in rollouts}
        contents = {r.steps.get(index=0).content for r in rollouts}
        # Same first step content <=> same prefix hash.
        assert len(first_steps) == len(contents)
    other_task = Trajectory.objects.exclude(task_key=rollouts[0].task_key).earliest("id")
    assert other_task.steps.get(index=0).prefix_hash not in first_steps


def test_raw_source_is_kept_apart(tmp_path: Path) -> None:
    run_import("--project", "pb", "--create", "--format", "processbench", str(PROCESSBENCH))
    trajectory = Trajectory.objects.get(external_id="gsm8k-0")
    source = TrajectorySource.objects.get(trajectory=trajectory)
    assert source.raw is not None and source.raw["id"] == "gsm8k-0"
    assert source.location == "record 0"


def test_awkward_text_survives_copy_exactly(tmp_path: Path) -> None:
    awkward = "tab\there\nnew line\r\nback\\slash \\N not null, émoji 🙂 and \\t literal"
    record = {
        "id": "awk",
        "task": awkward,
        "metadata": {"note": awkward},
        "steps": [
            {"role": "assistant", "content": awkward, "tool_args": {"q": awkward}},
            {"role": "user", "content": ""},
        ],
    }
    path = tmp_path / "awkward.jsonl"
    path.write_text(json.dumps(record) + "\n")
    project = project_create(slug="s", name="s")
    trajectory_import(project=project, source_format="stepscope", path=path)

    trajectory = Trajectory.objects.get(external_id="awk")
    assert trajectory.task == awkward
    assert trajectory.metadata == {"note": awkward}
    first, second = trajectory.steps.order_by("index")
    assert first.content == awkward
    assert first.tool_args == {"q": awkward}
    assert second.content == ""
    assert second.labelable is False


def test_prm800k_alternatives_are_linked_to_the_chosen_path() -> None:
    phase2 = REALDATA / "prm800k_sample" / "phase2_train_sample.jsonl"
    summary, _ = run_import("--project", "prm", "--create", "--format", "prm800k", str(phase2))
    assert summary["rejected"] == 0
    children = Trajectory.objects.filter(project__slug="prm", parent__isnull=False)
    assert children.exists()
    for child in children.select_related("parent"):
        assert child.parent is not None and child.branch_index is not None
        # A continuation shares its parent's steps before the branch point, so it shares
        # their prefix hashes too, and differs at the branch step.
        shared = child.branch_index
        own = list(child.steps.order_by("index").values_list("prefix_hash", flat=True))
        parent = list(child.parent.steps.order_by("index").values_list("prefix_hash", flat=True))
        assert own[:shared] == parent[:shared]
        assert len(own) == shared + 1
        # The parent either took another completion there or stopped (found_error).
        assert len(parent) == shared or own[shared] != parent[shared]
    # Every rating is an imported label, counted once (README: +1: 69, -1: 21, 0: 17).
    values = list(
        StepLabel.objects.filter(step__trajectory__project__slug="prm").values_list(
            "value", flat=True
        )
    )
    assert (values.count(1), values.count(-1), values.count(0)) == (69, 21, 17)


def test_mapped_import_of_a_directory_of_one_record_files(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    for n in range(3):
        record = {
            "question_ID": f"q{n}",
            "question": f"What is {n} + {n}?",
            "is_correct": n != 1,
            "history": [
                {"role": "user", "content": f"What is {n} + {n}?", "name": "asker"},
                {"role": "assistant", "content": f"{n} + {n} = {2 * n}", "name": "solver"},
            ],
            "mistake_step": "1" if n == 1 else None,
        }
        (folder / f"{n}.json").write_text(json.dumps(record))
    mapping = tmp_path / "mapping.json"
    mapping.write_text(
        json.dumps(
            {
                "id": "question_ID",
                "task": "question",
                "task_key": "question_ID",
                "outcome": "is_correct",
                "steps": "history",
                "step": {"content": "content", "role": "role", "agent": "name"},
                "first_error_index": "mistake_step",
            }
        )
    )
    summary, err = run_import(
        "--project", "m", "--create", "--format", "mapped", "--mapping", str(mapping), str(folder)
    )
    assert summary["created"] == 3, err
    assert len(summary["batch"]) == 3
    wrong = Trajectory.objects.get(external_id="q1")
    assert wrong.success is False
    assert list(wrong.steps.values_list("agent", flat=True)) == ["asker", "solver"]
    assert StepLabel.objects.get(step__trajectory=wrong, step__index=1).value == -1


def test_mapped_format_without_a_mapping_is_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="mapping"):
        call_command("import_trajectories", "--project", "x", "--create", "--format", "mapped", "f")


@pytest.mark.parametrize(
    ("content", "field"),
    [("nul \x00 byte", "steps.1.content"), ("lone \ud800 surrogate", "steps.1.content")],
)
def test_text_postgres_cannot_store_is_a_record_error(
    tmp_path: Path, content: str, field: str
) -> None:
    good = {"id": "good", "task": "t", "steps": [{"content": "fine"}]}
    bad = {"id": "bad", "task": "t", "steps": [{"content": "fine"}, {"content": content}]}
    path = tmp_path / "damaged.jsonl"
    path.write_text(
        json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8", errors="surrogatepass"
    )
    project = project_create(slug="s", name="s")
    with pytest.raises(ImportRejected) as rejected:
        trajectory_import(project=project, source_format="stepscope", path=path)
    assert rejected.value.batch.errors[0]["location"] == "line 2"
    assert not Trajectory.objects.exists()

    batch = trajectory_import(
        project=project, source_format="stepscope", path=path, skip_invalid=True
    )
    assert (batch.created_count, batch.rejected_count) == (1, 1)
    assert batch.errors[0]["field"] == field
