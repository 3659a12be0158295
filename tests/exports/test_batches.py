"""Versioned batches: each finished export into a batch is its next version, and two
versions diff by what each kept (trajectories and labels added, removed, changed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from exports.models import BatchVersion, ExportBatch, ExportJob
from exports.selectors import batch_diff, batch_ref_parse
from exports.services import export_job_run, export_plan_build, export_start
from labeling.models import StepLabel
from tests.factories import trajectory_with_steps
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


def label(trajectory: Trajectory, index: int, value: int, user: User) -> None:
    step = trajectory.steps.get(index=index)
    schema = trajectory.project.label_schemas.get(is_active=True)
    StepLabel.objects.update_or_create(
        step=step,
        annotator=user,
        schema=schema,
        defaults={"value": value, "status": StepLabel.Status.SUBMITTED},
    )


def export_into(project: Project, user: User, batch: str = "rl-batch") -> ExportJob:
    plan = export_plan_build(
        project=project, format="trl-stepwise", labels=f"human:{user.username}", neutral="positive"
    )
    job = export_start(plan=plan, user=user, batch=batch)
    return export_job_run(job_id=job.pk)  # the worker's task body, in this process


def test_two_versions_diff_by_trajectories_and_labels(project: Project, owner: User) -> None:
    kept, relabelled, grown, gone = (
        trajectory_with_steps(project, ["a", "b", "c"], external_id=name)
        for name in ("kept", "relabelled", "grown", "gone")
    )
    label(kept, 0, 1, owner)
    label(relabelled, 0, 1, owner)
    label(relabelled, 1, 1, owner)
    label(grown, 0, -1, owner)
    label(gone, 0, 1, owner)

    first = export_into(project, owner)
    assert first.status == ExportJob.Status.DONE, first.error
    v1 = BatchVersion.objects.get(export=first)
    assert (v1.number, v1.trajectories, v1.labels) == (1, 4, 5)

    # Between the versions: one trajectory goes, one comes, one grows a step (its
    # content hash, as a live trace's, stays), and three labels change on a kept one.
    gone.delete()
    added = trajectory_with_steps(project, ["x", "y"], external_id="added")
    label(added, 1, -1, owner)
    Step.objects.create(trajectory=grown, index=3, kind="thought", content="d", prefix_hash="p3")
    Trajectory.objects.filter(pk=grown.pk).update(step_count=4)
    label(relabelled, 1, -1, owner)  # changed
    label(relabelled, 2, 0, owner)  # added
    StepLabel.objects.filter(step__trajectory=relabelled, step__index=0).delete()  # removed

    second = export_into(project, owner)
    v2 = BatchVersion.objects.get(export=second)
    assert (v2.number, v2.trajectories, v2.labels) == (2, 4, 5)

    diff = batch_diff(v1, v2)
    assert diff.counts == {
        "trajectories": {"added": 1, "removed": 1, "changed": 1},
        "labels": {"added": 1, "removed": 1, "changed": 1},
    }
    assert {(c.external_id, c.change) for c in diff.trajectories} == {
        ("added", "added"),
        ("gone", "removed"),
        ("grown", "changed"),
    }
    assert [(c.external_id, c.index, c.before, c.after, c.change) for c in diff.labels] == [
        ("relabelled", 0, 1, None, "removed"),
        ("relabelled", 1, 1, -1, "changed"),
        ("relabelled", 2, None, 0, "added"),
    ]
    # Backwards, each change turns round.
    back = batch_diff(v2, v1)
    assert back.counts["trajectories"] == {"added": 1, "removed": 1, "changed": 1}
    assert [(c.index, c.change) for c in back.labels] == [
        (0, "added"),
        (1, "changed"),
        (2, "removed"),
    ]
    # A version against itself: nothing.
    assert batch_diff(v2, v2).counts == {
        "trajectories": {"added": 0, "removed": 0, "changed": 0},
        "labels": {"added": 0, "removed": 0, "changed": 0},
    }
    # The lists are cut at ``limit``; the counts are not.
    cut = batch_diff(v1, v2, limit=1)
    assert len(cut.labels) == 3 and len(cut.trajectories) == 3
    nothing_listed = batch_diff(v1, v2, limit=0)
    assert nothing_listed.counts == diff.counts and not nothing_listed.labels


def test_a_failed_or_cancelled_export_leaves_no_version(
    project: Project, owner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b"], external_id="t")
    label(trajectory, 0, 1, owner)

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError("No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr("exports.services.exports.write_manifest", full_disk)
        failed = export_into(project, owner)
    assert failed.status == ExportJob.Status.FAILED and "No space" in failed.error
    batch = ExportBatch.objects.get(project=project, name="rl-batch")
    assert not batch.versions.exists()

    plan = export_plan_build(
        project=project, format="trl-stepwise", labels="human:owner", neutral="positive"
    )
    cancelled = export_start(plan=plan, user=owner, batch="rl-batch")
    ExportJob.objects.filter(pk=cancelled.pk).update(status=ExportJob.Status.CANCELLED)
    assert export_job_run(job_id=cancelled.pk).status == ExportJob.Status.CANCELLED
    assert not batch.versions.exists()

    # The next export that finishes is version 1: numbers have no gaps.
    done = export_into(project, owner)
    assert list(batch.versions.values_list("number", "export_id")) == [(1, done.pk)]


def test_batch_names_and_references(project: Project, owner: User) -> None:
    plan = export_plan_build(
        project=project, format="trl-stepwise", labels="human:owner", neutral="positive"
    )
    with pytest.raises(ValueError, match="'rl batch@7' is not a batch name"):
        export_start(plan=plan, user=owner, batch="rl batch@7")
    assert not ExportJob.objects.exists() and not ExportBatch.objects.exists()
    assert batch_ref_parse("rl-batch@7") == ("rl-batch", 7)
    assert batch_ref_parse("rl-batch") == ("rl-batch", None)
    assert batch_ref_parse("rl-batch@latest") == ("rl-batch", None)
    for bad in ("@3", "rl@x", "rl@-1"):
        with pytest.raises(ValueError, match="is not a batch"):
            batch_ref_parse(bad)
