"""How every job kind fails: through ``job_fail``, with one text (the exception's type and
message, one cut length), only while the job is active, and never by hand elsewhere."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db.models import Field

from exports.models import ExportJob
from rollouts.models import DemoPolicyTraining
from stepscope.jobs.active import job_models
from stepscope.jobs.lifecycle import ERROR_KEPT, job_cancel, job_error_text, job_fail
from stepscope.jobs.models import Job
from trajectories.models import ImportBatch, Project, ProjectDeletion

REPO_ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = REPO_ROOT / "stepscope" / "jobs" / "lifecycle.py"
APPS = (
    "accounts",
    "demo",
    "evaluation",
    "exports",
    "home",
    "labeling",
    "metrics",
    "rollouts",
    "scoring",
    "stepscope",
    "trajectories",
)

# A job of each kind that needs nothing but its project.
KINDS: dict[str, Callable[[Project], Job]] = {
    "export": lambda project: ExportJob.objects.create(
        project=project, format="stepscope", label_source="human:majority", neutral="drop"
    ),
    "import": lambda project: ImportBatch.objects.create(
        project=project, file_name="a.jsonl", source_format="stepscope"
    ),
    "project deletion": lambda project: ProjectDeletion.objects.create(
        project=project, slug=project.slug, name=project.name
    ),
    "demo policy training": lambda project: DemoPolicyTraining.objects.create(
        project=project, rollout_tasks=2
    ),
}


def test_the_error_text_is_the_type_and_message_cut_once() -> None:
    assert job_error_text(OSError("disk full")) == "OSError: disk full"
    assert job_error_text("the endpoint refused the key") == "the endpoint refused the key"
    long = job_error_text(ValueError("x" * (2 * ERROR_KEPT)))
    assert len(long) == ERROR_KEPT and long.startswith("ValueError: xxx")


@pytest.mark.django_db
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_fails_the_same_way_and_only_while_active(project: Project, kind: str) -> None:
    job = KINDS[kind](project)
    assert kind == job.KIND and job.status in Job.ACTIVE
    assert job_fail(type(job), pk=job.pk, error=RuntimeError("y" * 5000))
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and job.finished_at is not None
    assert job.error == f"RuntimeError: {'y' * 5000}"[:ERROR_KEPT]
    # A job that has ended stays as it ended: a second failure changes nothing.
    assert not job_fail(type(job), pk=job.pk, error="later")
    job.refresh_from_db()
    assert job.error.startswith("RuntimeError: ")

    cancelled = job_cancel(KINDS[kind](project))
    assert not job_fail(type(cancelled), pk=cancelled.pk, error="too late")
    cancelled.refresh_from_db()
    assert (cancelled.status, cancelled.error) == (Job.Status.CANCELLED, "")


@pytest.mark.django_db
def test_a_failure_writes_what_the_job_had_done_with_it(project: Project) -> None:
    deletion = ProjectDeletion.objects.create(project=project, slug="demo", name="Demo")
    job_fail(ProjectDeletion, pk=deletion.pk, error="stopped", removed={"trajectories": 3})
    deletion.refresh_from_db()
    assert (deletion.status, deletion.error) == ("failed", "stopped")
    assert deletion.removed == {"trajectories": 3}


@pytest.mark.django_db
def test_every_kind_stands_on_the_one_base() -> None:
    """Each concrete job model has the base's fields, with the base's definitions."""
    shared = {field.name: field for field in Job._meta.fields}
    assert {"error", "started_at", "finished_at", "status"} <= shared.keys()
    kinds = job_models()
    assert {ExportJob, ImportBatch, ProjectDeletion, DemoPolicyTraining} <= set(kinds)
    for model in kinds:
        for name, field in shared.items():
            own = model._meta.get_field(name)
            assert isinstance(own, Field)
            assert own.deconstruct()[1:] == field.deconstruct()[1:] or name == "status", (
                f"{model.__name__}.{name} is declared again, not taken from Job"
            )


def _hand_written_failures(path: Path) -> list[str]:
    """Places in ``path`` that set a status to ``...FAILED`` themselves: a keyword
    ``status=X.FAILED`` in a call, or ``x.status = X.FAILED``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        values: list[ast.expr] = []
        if not isinstance(node, ast.Call | ast.Assign):
            continue
        if isinstance(node, ast.Call):
            values = [k.value for k in node.keywords if k.arg == "status"]
        elif any(isinstance(t, ast.Attribute) and t.attr == "status" for t in node.targets):
            values = [node.value]
        if any(isinstance(v, ast.Attribute) and v.attr == "FAILED" for v in values):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def test_no_job_is_failed_by_hand_outside_job_fail() -> None:
    modules = [
        path
        for app in APPS
        for path in (REPO_ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and path != LIFECYCLE
    ]
    assert len(modules) > 100
    found = [place for path in modules for place in _hand_written_failures(path)]
    assert not found, f"fail a job with stepscope.jobs.lifecycle.job_fail: {found}"
    # The check sees what it looks for.
    assert _hand_written_failures(LIFECYCLE)
