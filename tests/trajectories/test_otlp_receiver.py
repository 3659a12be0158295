"""The OTLP/HTTP receiver (``POST /v1/traces``) and the assembler, driven with bodies as
the specification writes them (JSON) and as the SDK sends them (protobuf): what a trace
becomes, traces that arrive in pieces, and every kind of bad input with its status and
message. The assembler is called directly here; tests/trajectories/test_otlp_clients.py
runs it in a real worker behind real exporters."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from django.test import Client
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from accounts.services import api_token_create, api_token_revoke
from labeling.models import LabelSchema, StepLabel
from tests.factories import MembershipFactory, UserFactory
from tests.trajectories import otlp_bodies as bodies
from trajectories import receiver
from trajectories.formats import otel, otlp
from trajectories.models import (
    LiveAssembly,
    LiveTrace,
    Membership,
    Project,
    StagedSpan,
    Step,
    StepSearch,
    Trajectory,
    TrajectorySearch,
)
from trajectories.selectors import live_trace_state
from trajectories.services.assembly import live_traces_assemble
from trajectories.services.live import assembly_request, live_sweep
from trajectories.services.search import trajectory_search_index

pytestmark = pytest.mark.django_db

JSON = "application/json"
PROTOBUF = "application/x-protobuf"


@pytest.fixture(autouse=True)
def _fresh_checks(settings: Any) -> None:
    # The receiver looks at the backlog once a second per process; each test starts anew.
    receiver._Checks.backlog_at = receiver._Checks.swept_at = 0.0
    receiver._Checks.backlog = 0
    settings.STEPSCOPE_OTLP_ASSEMBLE_DELAY_MS = 0


@pytest.fixture
def token(researcher: User) -> str:
    return api_token_create(user=researcher, name="exporter")[1]


def post(
    body: bytes,
    token: str | None,
    *,
    content_type: str = JSON,
    project: str | None = None,
    scheme: str = "Bearer",
    **headers: str,
) -> Any:
    extra: dict[str, Any] = dict(headers)
    if token is not None:
        extra["HTTP_AUTHORIZATION"] = f"{scheme} {token}"
    if project is not None:
        extra["HTTP_X_STEPSCOPE_PROJECT"] = project
    return Client().post("/v1/traces", body, content_type=content_type, **extra)


def message(response: Any) -> str:
    if response["Content-Type"] == PROTOBUF:
        return otlp.status_decode(response.content)[1]
    return str(json.loads(response.content)["message"])


def steps_of(trajectory: Trajectory) -> list[Step]:
    return list(trajectory.steps.order_by("index"))


def test_a_json_trace_becomes_the_trajectory_the_file_import_gives(
    project: Project, token: str, tmp_path: Path
) -> None:
    body = bodies.json_body(bodies.agent_spans(0), project=project.slug)
    response = post(body, token)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == JSON
    assert json.loads(response.content) == {}
    assert StagedSpan.objects.filter(project=project).count() == 6
    assert Trajectory.objects.filter(project=project).count() == 0  # nothing assembled yet

    assert live_traces_assemble() == 1
    trajectory = Trajectory.objects.get(project=project)
    file = tmp_path / "trace.json"
    file.write_bytes(body)
    (from_file,) = list(otel.parse(file))
    assert isinstance(from_file, otel.ParsedTrajectory)
    assert trajectory.external_id == bodies.trace_id(0) == from_file.external_id
    assert trajectory.task == from_file.task == "What is 6 x 7?"
    assert trajectory.model_name == "gpt-test"
    assert trajectory.metadata == from_file.metadata
    assert trajectory.metadata["service_name"] == "agent-service"
    got = [
        (s.kind, s.role, s.content, s.labelable, s.tool_name, s.tool_args, s.metadata)
        for s in steps_of(trajectory)
    ]
    expected = [
        (s.kind, s.role, s.content, s.labelable, s.tool_name, s.tool_args, s.metadata)
        for s in from_file.steps
    ]
    assert got == expected
    kinds = [(s.kind, s.labelable) for s in steps_of(trajectory)]
    assert kinds == [
        ("action", False),  # the agent root: its model calls are what is labelled
        ("tool_call", True),
        ("tool_result", False),
        ("tool_call", True),
        ("tool_result", False),
        ("message", True),
    ]
    failed = steps_of(trajectory)[2]
    assert failed.metadata["error"] == "ZeroDivisionError: division by zero"
    assert trajectory.step_count == 6


def test_protobuf_and_json_give_the_same_steps(project: Project, token: str) -> None:
    spans = bodies.agent_spans(0)
    assert post(bodies.json_body(spans), token, project=project.slug).status_code == 200
    other = Project.objects.create(slug="other", name="Other")
    MembershipFactory.create(
        user=Membership.objects.get(project=project).user,
        project=other,
        role=Membership.Role.RESEARCHER,
    )
    response = post(bodies.protobuf_body(spans, project="other"), token, content_type=PROTOBUF)
    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF
    assert response.content == b""  # an ExportTraceServiceResponse with nothing rejected
    live_traces_assemble()

    def shape(p: Project) -> list[tuple[Any, ...]]:
        trajectory = Trajectory.objects.get(project=p)
        return [(s.kind, s.content, s.labelable, s.metadata) for s in steps_of(trajectory)]

    assert shape(project) == shape(other)


def test_token_scheme_and_gzip_are_accepted(project: Project, token: str) -> None:
    body = gzip.compress(bodies.json_body(bodies.agent_spans(0)))
    response = post(body, token, scheme="Token", project=project.slug, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.content
    assert StagedSpan.objects.count() == 6


def test_a_retried_request_changes_nothing(project: Project, token: str) -> None:
    body = bodies.protobuf_body(bodies.agent_spans(0), project=project.slug)
    for _ in range(3):
        assert post(body, token, content_type=PROTOBUF).status_code == 200
        live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)
    assert trajectory.step_count == 6
    assert Step.objects.filter(trajectory=trajectory).count() == 6
    live = LiveTrace.objects.get(project=project)
    assert (live.span_count, live.assembled_count) == (6, 6)


def test_a_trace_in_pieces_out_of_order_and_late_is_one_trajectory_keeping_labels(
    project: Project, token: str, researcher: User
) -> None:
    spans = bodies.agent_spans(0)
    # The model calls come first, without their root; then the tools; the root last.
    for piece in ([spans[5], spans[1]], [spans[2], spans[4], spans[3]]):
        assert post(bodies.json_body(piece), token, project=project.slug).status_code == 200
        live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)
    assert live_trace_state(trajectory.pk) == "receiving"  # no root span yet
    by_span = {s.metadata["span_id"]: s for s in steps_of(trajectory)}
    assert len(by_span) == 5
    labelled = by_span[spans[5]["span_id"]]
    schema = LabelSchema.objects.filter(project=project).first()
    assert schema is not None
    StepLabel.objects.create(step=labelled, annotator=researcher, schema=schema, value=1)

    assert post(bodies.json_body([spans[0]]), token, project=project.slug).status_code == 200
    live_traces_assemble()
    assert Trajectory.objects.filter(project=project).count() == 1
    steps = steps_of(trajectory)
    assert [s.metadata["span_id"] for s in steps] == [span["span_id"] for span in spans]
    moved = next(s for s in steps if s.metadata["span_id"] == spans[5]["span_id"])
    # The same row, now at the end under its root, with its label.
    assert moved.pk == labelled.pk
    assert (moved.index, moved.metadata["parent"]) == (5, 0)
    assert StepLabel.objects.get(step=moved).value == 1
    trajectory.refresh_from_db()
    assert trajectory.step_count == 6
    assert trajectory.task == "What is 6 x 7?"


def test_a_trace_is_finished_after_its_root_and_the_quiet_time(
    project: Project, token: str, settings: Any
) -> None:
    post(bodies.json_body(bodies.agent_spans(0)), token, project=project.slug)
    live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)
    assert live_trace_state(trajectory.pk) == "receiving"
    settings.STEPSCOPE_OTLP_QUIET_SECONDS = 0
    assert live_trace_state(trajectory.pk) == "finished"


# Bad input: each with the status the OTLP specification and our API give, and a message.


def test_a_missing_or_bad_token_is_401(project: Project, token: str, researcher: User) -> None:
    body = bodies.json_body(bodies.agent_spans(0))
    missing = post(body, None, project=project.slug)
    assert missing.status_code == 401
    assert "Authorization: Bearer" in message(missing)
    wrong = post(body, "ssk_not-a-token", project=project.slug)
    assert wrong.status_code == 401
    assert "Invalid token" in message(wrong)
    odd = post(body, token, scheme="Basic", project=project.slug)
    assert odd.status_code == 401
    revoked_token, secret = api_token_create(user=researcher, name="old")
    api_token_revoke(user=researcher, key=revoked_token.token_key)
    revoked = post(body, secret, project=project.slug, content_type=PROTOBUF)
    assert revoked.status_code == 401
    assert revoked["Content-Type"] == PROTOBUF
    assert "revoked" in message(revoked)
    assert StagedSpan.objects.count() == 0


def test_unknown_project_or_outsider_is_404_and_annotator_403(project: Project, token: str) -> None:
    body = bodies.json_body(bodies.agent_spans(0))
    unknown = post(body, token, project="no-such-project")
    assert unknown.status_code == 404
    assert "no-such-project" in message(unknown)
    outsider = UserFactory.create(username="outsider")
    outsider_token = api_token_create(user=outsider, name="x")[1]
    assert post(body, outsider_token, project=project.slug).status_code == 404
    annotator = UserFactory.create(username="annotator")
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    refused = post(body, api_token_create(user=annotator, name="x")[1], project=project.slug)
    assert refused.status_code == 403
    assert "researchers and admins" in message(refused)
    unnamed = post(body, token)
    assert unnamed.status_code == 400
    assert "x-stepscope-project" in message(unnamed)
    assert StagedSpan.objects.count() == 0


def test_the_project_may_come_from_the_resource_attribute(project: Project, token: str) -> None:
    response = post(bodies.json_body(bodies.agent_spans(0), project=project.slug), token)
    assert response.status_code == 200
    assert StagedSpan.objects.filter(project=project).count() == 6


def test_malformed_bodies_are_400_naming_what_is_wrong(project: Project, token: str) -> None:
    not_json = post(b"{not json", token, project=project.slug)
    assert not_json.status_code == 400
    assert "not JSON" in message(not_json)
    wrong_shape = post(b'{"resourceSpans": {}}', token, project=project.slug)
    assert wrong_shape.status_code == 400
    assert "resourceSpans: expected a list" in message(wrong_shape)
    bad_span = post(
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}', token, project=project.slug
    )
    assert bad_span.status_code == 400
    assert "resourceSpans.0.scopeSpans.0.spans.0" in message(bad_span)
    not_protobuf = post(b"\xff\xff\xff", token, project=project.slug, content_type=PROTOBUF)
    assert not_protobuf.status_code == 400
    assert not_protobuf["Content-Type"] == PROTOBUF
    assert "protobuf" in message(not_protobuf)
    bad_gzip = post(b"plain", token, project=project.slug, HTTP_CONTENT_ENCODING="gzip")
    assert bad_gzip.status_code == 400
    assert "gzip" in message(bad_gzip)


def test_a_wrong_content_type_is_415(project: Project, token: str) -> None:
    response = post(b"a=1", token, project=project.slug, content_type="text/plain")
    assert response.status_code == 415
    assert "application/x-protobuf" in message(response)
    assert post(b"x", token, project=project.slug, HTTP_CONTENT_ENCODING="br").status_code == 415


def test_a_body_past_the_limit_is_413(project: Project, token: str, settings: Any) -> None:
    settings.STEPSCOPE_OTLP_MAX_BODY = 1000
    body = bodies.json_body(bodies.agent_spans(0))
    response = post(body, token, project=project.slug)
    assert response.status_code == 413
    assert "STEPSCOPE_OTLP_MAX_BODY" in message(response)
    # A small gzip body that inflates past the limit is refused too.
    bomb = post(gzip.compress(body), token, project=project.slug, HTTP_CONTENT_ENCODING="gzip")
    assert bomb.status_code == 413
    assert "after gzip" in message(bomb)


def test_bad_spans_are_rejected_alone_and_named(project: Project, token: str) -> None:
    spans = bodies.agent_spans(0)
    spans[1]["span_id"] = "xyz"
    spans[2]["trace_id"] = "0" * 32
    response = post(bodies.json_body(spans), token, project=project.slug)
    assert response.status_code == 200
    partial = json.loads(response.content)["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "span xyz of trace" in partial["errorMessage"]
    assert "spanId must be 8 bytes" in partial["errorMessage"]
    assert "traceId must be 16 bytes" in partial["errorMessage"]
    assert StagedSpan.objects.count() == 4


def test_spans_past_the_trace_cap_are_rejected_in_partial_success(
    project: Project, token: str, settings: Any
) -> None:
    settings.STEPSCOPE_OTLP_MAX_SPANS_PER_TRACE = 4
    spans = bodies.agent_spans(0)
    body = bodies.protobuf_body(spans, project=project.slug)
    response = post(body, token, content_type=PROTOBUF)
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 2
    assert "has reached 4 spans" in answer.partial_success.error_message
    assert spans[5]["span_id"] in answer.partial_success.error_message
    assert LiveTrace.objects.get().span_count == 4


def test_a_long_attribute_is_cut_with_a_marker(project: Project, token: str, settings: Any) -> None:
    settings.STEPSCOPE_OTLP_MAX_ATTRIBUTE = 1000
    spans = bodies.agent_spans(0)
    spans[4]["attributes"]["output.value"] = "x" * 50_000
    post(bodies.protobuf_body(spans, project=project.slug), token, content_type=PROTOBUF)
    live_traces_assemble()
    tool = Step.objects.get(metadata__span_id=spans[4]["span_id"])
    assert tool.content.startswith("x" * 1000)
    assert tool.content.endswith("[cut by Stepscope: 50000 characters, the first 1000 kept]")


def test_a_50_mb_attribute_is_kept_cut_not_refused(project: Project, token: str) -> None:
    spans = bodies.agent_spans(0)
    spans[4]["attributes"]["output.value"] = "y" * 50_000_000
    response = post(bodies.protobuf_body(spans, project=project.slug), token, content_type=PROTOBUF)
    assert response.status_code == 200
    live_traces_assemble()
    tool = Step.objects.get(metadata__span_id=spans[4]["span_id"])
    assert len(tool.content) < 100_200
    assert "cut by Stepscope: 50000000 characters" in tool.content


def test_past_the_backlog_exporters_are_asked_to_retry(
    project: Project, token: str, settings: Any
) -> None:
    post(bodies.json_body(bodies.agent_spans(0)), token, project=project.slug)
    settings.STEPSCOPE_OTLP_MAX_BACKLOG = 5
    receiver._Checks.backlog_at = 0.0
    response = post(bodies.json_body(bodies.agent_spans(1)), token, project=project.slug)
    assert response.status_code == 429
    assert response["Retry-After"] == "2"
    assert "STEPSCOPE_OTLP_MAX_BACKLOG" in message(response)
    live_traces_assemble()
    receiver._Checks.backlog_at = 0.0
    again = post(bodies.json_body(bodies.agent_spans(1)), token, project=project.slug)
    assert again.status_code == 200


def test_get_is_405(token: str) -> None:
    response = Client().get("/v1/traces", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 405


def test_a_database_outage_is_503_with_retry_after(
    project: Project, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(**_: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(receiver, "live_spans_accept", down)
    response = post(bodies.json_body(bodies.agent_spans(0)), token, project=project.slug)
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert "database is unavailable" in message(response)


def test_one_assembly_task_is_queued_per_burst_and_a_lost_one_replaced(
    project: Project, token: str
) -> None:
    assert assembly_request() is True
    assert assembly_request() is False  # queued, not started: it will take these spans too
    # A task that never started (its message lost) is replaced once the flag is stale.
    LiveAssembly.objects.filter(pk=1).update(
        queued_at=timezone.now() - timedelta(seconds=LiveAssembly.STALE_SECONDS + 1)
    )
    assert assembly_request() is True
    # The task clears the flag when it starts; the sweep queues one for pending traces.
    post(bodies.json_body(bodies.agent_spans(0)), token, project=project.slug)
    LiveAssembly.objects.filter(pk=1).update(queued_at=None)
    assert live_sweep() is True
    assert live_traces_assemble() == 1
    assert LiveAssembly.objects.get(pk=1).queued_at is None
    assert live_sweep() is False  # nothing pending


def test_a_grown_trajectory_is_indexed_again_for_search(project: Project, token: str) -> None:
    spans = bodies.agent_spans(0)
    post(bodies.json_body(spans[:3]), token, project=project.slug)
    live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)
    trajectory_search_index(project_id=project.pk)
    assert StepSearch.objects.filter(trajectory=trajectory).count() == 3
    post(bodies.json_body(spans[3:]), token, project=project.slug)
    live_traces_assemble()
    # The old documents describe three steps; they go, and the index is built anew.
    assert not TrajectorySearch.objects.filter(trajectory=trajectory).exists()
    trajectory_search_index(project_id=project.pk)
    assert StepSearch.objects.filter(trajectory=trajectory).count() == 6
