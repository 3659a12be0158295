"""The live assembler appends what simply follows a trajectory's steps, a piece at a time,
and gives the very trajectory the ``otel`` file importer gives for the whole trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.trajectories import otlp_bodies as bodies
from trajectories.formats import otel, otlp
from trajectories.hashing import prefix_hashes
from trajectories.models import LiveTrace, Project, Trajectory
from trajectories.services import assembly
from trajectories.services.assembly import live_traces_assemble
from trajectories.services.live import live_spans_accept

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_queue(settings: Any) -> None:
    settings.STEPSCOPE_OTLP_ASSEMBLE_DELAY_MS = 0


def stage(project: Project, spans: list[dict[str, Any]]) -> None:
    decoded = otlp.decode_json(bodies.json_body(spans), max_attribute=100_000)
    accepted = live_spans_accept(project_id=project.pk, spans=decoded.spans)
    assert accepted.stored == len(spans)


def versions(trajectory: Trajectory) -> dict[int, tuple[int, str]]:
    """Each step's row id and the transaction that last wrote it (xmin)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT index, id, xmin::text FROM trajectories_step WHERE trajectory_id = %s",
            [trajectory.pk],
        )
        return {index: (step_id, xmin) for index, step_id, xmin in cursor.fetchall()}


def as_file_import(project: Project, spans: list[dict[str, Any]], tmp_path: Path) -> None:
    """The trajectory equals what the ``otel`` importer makes of all the spans at once."""
    file = tmp_path / "trace.json"
    file.write_bytes(bodies.json_body(spans))
    (whole,) = list(otel.parse(file))
    assert isinstance(whole, otel.ParsedTrajectory)
    trajectory = Trajectory.objects.get(project=project)
    assert (trajectory.task, trajectory.model_name, trajectory.metadata) == (
        whole.task,
        whole.model_name,
        whole.metadata,
    )
    assert trajectory.step_count == len(whole.steps)
    got = [
        (s.kind, s.role, s.agent, s.content, s.labelable, s.tool_args, s.metadata, s.prefix_hash)
        for s in trajectory.steps.order_by("index")
    ]
    expected = [
        (s.kind, s.role, s.agent, s.content, s.labelable, s.tool_args, s.metadata, h)
        for s, h in zip(whole.steps, prefix_hashes(whole.task, whole.steps), strict=True)
    ]
    assert got == expected


def test_spans_in_time_order_are_appended_leaving_earlier_steps_unwritten(
    project: Project, tmp_path: Path
) -> None:
    spans = bodies.agent_spans(0)
    stage(project, spans[:1])
    live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)
    root = trajectory.steps.get()
    assert root.labelable  # an agent with output and no model call below it (yet)

    stage(project, spans[1:3])
    live_traces_assemble()
    root.refresh_from_db()
    assert not root.labelable  # a model call came below it
    before = versions(trajectory)

    stage(project, spans[3:])
    live_traces_assemble()
    after = versions(trajectory)
    assert len(after) == 6
    assert {index: after[index] for index in before} == before  # not one earlier row written
    as_file_import(project, spans, tmp_path)
    live = LiveTrace.objects.get(project=project)
    assert live.assembled_count == live.span_count == 6
    assert live.state is not None and live.state["summary"]["spans"] == 6


def test_a_large_trace_is_assembled_in_pieces(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More spans staged than a piece holds: the assembler reads and appends them a
    piece at a time in one task (here pieces of 7 spans for a trace of 60)."""
    monkeypatch.setattr(assembly, "PIECE_SPANS", 7)
    template = bodies.agent_spans(0)
    spans = []
    for n in range(60):
        span = dict(template[n % 6] if n else template[0])
        span.update(n=n, span_id=f"{n + 1:016x}", parent="" if n == 0 else f"{1:016x}")
        spans.append(span)
    stage(project, spans)
    read: list[int] = []
    real = assembly._pieces_read

    def counting(traces: list[Any]) -> None:
        real(traces)
        read.append(sum(len(trace.spans) for trace in traces))

    monkeypatch.setattr(assembly, "_pieces_read", counting)
    assert live_traces_assemble() == 1
    assert max(read) == 7 and sum(read) == 60
    as_file_import(project, spans, tmp_path)


def test_a_root_after_its_children_rebuilds_keeping_rows(project: Project, tmp_path: Path) -> None:
    spans = bodies.agent_spans(0)
    stage(project, spans[1:])
    live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)
    ids = {s.metadata["span_id"]: s.pk for s in trajectory.steps.all()}
    stage(project, spans[:1])
    live_traces_assemble()
    as_file_import(project, spans, tmp_path)
    again = {s.metadata["span_id"]: s.pk for s in trajectory.steps.all()}
    assert {span_id: again[span_id] for span_id in ids} == ids


def test_a_large_trace_is_built_again_a_piece_at_a_time(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace larger than a piece whose children arrive out of time order, then its
    root (as an SDK exports them: a span when it ends) is built again from its spans'
    skeletons, its steps made a piece at a time: here pieces of 7 spans for 60. The
    result is the file import's, and the steps keep their rows."""
    monkeypatch.setattr(assembly, "PIECE_SPANS", 7)
    template = bodies.agent_spans(0)
    spans = []
    for n in range(60):
        span = dict(template[n % 6] if n else template[0])
        # Every fifth span hangs from the span before it, not from the root.
        parent = "" if n == 0 else f"{n:016x}" if n % 5 == 0 else f"{1:016x}"
        span.update(n=n, span_id=f"{n + 1:016x}", parent=parent)
        spans.append(span)
    read: list[int] = []
    real = assembly._spans_read

    def counting(staged_ids: list[int]) -> dict[int, Any]:
        read.append(len(staged_ids))
        return real(staged_ids)

    monkeypatch.setattr(assembly, "_spans_read", counting)
    monkeypatch.setattr(assembly, "_rebuilt", lambda traces: [] if not traces else 1 / 0)
    stage(project, spans[30:] + spans[1:30])
    live_traces_assemble()
    assert read and max(read) == 7
    trajectory = Trajectory.objects.get(project=project)
    ids = {s.metadata["span_id"]: s.pk for s in trajectory.steps.all()}
    stage(project, spans[:1])
    live_traces_assemble()
    as_file_import(project, spans, tmp_path)
    again = {s.metadata["span_id"]: s.pk for s in trajectory.steps.all()}
    assert {span_id: again[span_id] for span_id in ids} == ids
    live = LiveTrace.objects.get(project=project)
    assert live.state is not None
    assert live.state["last_hash"] == trajectory.steps.order_by("-index")[0].prefix_hash


def test_a_deleted_trajectory_comes_back_whole(project: Project, tmp_path: Path) -> None:
    spans = bodies.agent_spans(0)
    stage(project, spans[:3])
    live_traces_assemble()
    Trajectory.objects.filter(project=project).delete()
    stage(project, spans[3:])
    live_traces_assemble()
    as_file_import(project, spans, tmp_path)
