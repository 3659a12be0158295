"""Real OTLP clients against a live server and a real Celery worker: the OpenTelemetry
SDK's own exporter (``opentelemetry-exporter-otlp-proto-http``, protobuf), and an agent
written as teams write it today, the OpenAI client instrumented by
``openinference-instrumentation-openai``, calling a local stand-in model server. The
trace shows on the trajectory page with its agent root, its model calls (labelable) and
its tool calls with their errors, as the file import gives."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from accounts.services import api_token_create
from tests.conftest import celery_worker_log
from tests.waiting import wait_until
from trajectories.models import LiveTrace, Project, Step, Trajectory

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def provider_for(url: str, token: str, project: str) -> tuple[TracerProvider, OTLPSpanExporter]:
    """What OTEL_EXPORTER_OTLP_ENDPOINT / _HEADERS and OTEL_RESOURCE_ATTRIBUTES set up."""
    exporter = OTLPSpanExporter(
        endpoint=f"{url}/v1/traces", headers={"Authorization": f"Bearer {token}"}
    )
    provider = TracerProvider(
        resource=Resource.create({"service.name": "agent", "stepscope.project": project})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def trajectory_with(project: Project, steps: int, timeout: float = 60) -> Trajectory:
    found = wait_until(
        lambda: Trajectory.objects.filter(project=project, step_count__gte=steps).exists(),
        timeout,
    )
    assert found, f"no trajectory of {steps} steps; {celery_worker_log()}"
    return Trajectory.objects.get(project=project)


def test_the_sdk_exporter_sends_a_trace_in_several_exports_that_becomes_one_trajectory(
    project: Project, researcher: User, live_server: Any, celery_worker: object
) -> None:
    _, token = api_token_create(user=researcher, name="exporter")
    provider, _ = provider_for(live_server.url, token, project.slug)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "agent", attributes={"openinference.span.kind": "AGENT", "input.value": "Sum 2 and 3"}
    ):
        with tracer.start_as_current_span(
            "ChatCompletion",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-test",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "Sum 2 and 3",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "I will add them.",
            },
        ):
            pass
        # The child is exported before its root ends: the trace arrives in two pieces.
        provider.force_flush()
        with tracer.start_as_current_span(
            "add", attributes={"openinference.span.kind": "TOOL", "tool.name": "add"}
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "TypeError: bad operand"))
    provider.force_flush()
    provider.shutdown()

    trajectory = trajectory_with(project, 3)
    steps = list(trajectory.steps.order_by("index"))
    assert [(s.kind, s.labelable) for s in steps] == [
        ("action", False),
        ("message", True),
        ("tool_result", False),
    ]
    assert steps[2].metadata["error"] == "TypeError: bad operand"
    assert steps[1].metadata["parent"] == 0
    assert trajectory.task == "Sum 2 and 3"
    assert LiveTrace.objects.get(project=project).span_count == 3


class _StandInModel(BaseHTTPRequestHandler):
    """A chat completions endpoint: the first call asks for the calculator, the one
    after a tool result answers."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tool_results = [m for m in request["messages"] if m["role"] == "tool"]
        if len(tool_results) < 2:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{len(tool_results)}",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "The answer is 42."}, "stop"
        body = json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "stand-in-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def model_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    thread.join()


def test_an_openinference_instrumented_openai_agent_shows_on_the_trajectory_page(
    project: Project,
    researcher: User,
    live_server: Any,
    celery_worker: object,
    model_server: str,
) -> None:
    import openai
    from openai.types.chat import ChatCompletionMessageFunctionToolCall
    from openinference.instrumentation.openai import OpenAIInstrumentor

    _, token = api_token_create(user=researcher, name="agent")
    provider, _ = provider_for(live_server.url, token, project.slug)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=model_server, api_key="not-needed")
        tracer = provider.get_tracer("agent")
        question = "What is 6 x 7?"
        with tracer.start_as_current_span(
            "agent", attributes={"openinference.span.kind": "AGENT", "input.value": question}
        ) as root:
            messages: list[Any] = [{"role": "user", "content": question}]
            for attempt in range(3):
                reply = client.chat.completions.create(model="stand-in-model", messages=messages)
                choice = reply.choices[0].message
                if not choice.tool_calls:
                    root.set_attribute("output.value", choice.content or "")
                    break
                call = choice.tool_calls[0]
                assert isinstance(call, ChatCompletionMessageFunctionToolCall)
                messages.append(choice.model_dump(exclude_none=True))
                with tracer.start_as_current_span(
                    "calculator",
                    attributes={
                        "openinference.span.kind": "TOOL",
                        "tool.name": "calculator",
                        "input.value": call.function.arguments,
                    },
                ) as tool:
                    if attempt == 0:
                        error = ZeroDivisionError("division by zero")
                        tool.record_exception(error)
                        tool.set_status(Status(StatusCode.ERROR, "division by zero"))
                        result = "error: division by zero"
                    else:
                        result = "42"
                    tool.set_attribute("output.value", result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        provider.force_flush()
    finally:
        instrumentor.uninstrument()
        provider.shutdown()

    trajectory = trajectory_with(project, 6)
    steps = list(trajectory.steps.order_by("index"))
    assert [(s.kind, s.role, s.labelable) for s in steps] == [
        ("action", "agent", False),
        ("tool_call", "assistant", True),
        ("tool_result", "tool", False),
        ("tool_call", "assistant", True),
        ("tool_result", "tool", False),
        ("message", "assistant", True),
    ]
    assert steps[1].tool_name == "calculator"
    assert steps[2].metadata["error"] == "division by zero"
    assert steps[4].content == "42"
    assert steps[5].content == "The answer is 42."
    assert steps[1].metadata["model"] == "stand-in-model"
    assert trajectory.task == question

    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/t/{trajectory.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "live · receiving" in html  # the root is in, but the quiet time has not passed
    assert "The answer is 42." in html
    assert "division by zero" in html
    assert Step.objects.filter(trajectory=trajectory, labelable=True).count() == 3
