"""LangSmith runs: one trajectory per trace.

A run is ``{id, name, run_type, start_time, end_time, inputs, outputs, error, extra,
parent_run_id, trace_id, dotted_order, child_runs?}``. Files hold runs in the shapes the
SDK and the API use, read through :func:`jsonstream.iter_records`:

- the SDK's batch payload ``{"post": [runs], "patch": [updates]}``: each update is
  merged into the run with its id (it carries ``end_time``, ``outputs``, ``error``);
- run trees, a run with its children nested under ``child_runs``
  (``read_run(..., load_child_runs=True)``);
- runs one by one, in a JSON array or JSON Lines, linked by ``parent_run_id``.

Runs of one trace may be spread over the file, so they are gathered first and the
trajectories come out at the end. ``run_type`` says what a step is: ``llm`` is a model
call, ``tool`` a tool execution; ``chain``, ``retriever``, ``prompt`` and the rest are
structure (see :mod:`spans`). Times are ISO 8601 strings or epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register, spans
from trajectories.formats.base import (
    FieldError,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
)
from trajectories.formats.chat_content import decode
from trajectories.formats.spans import Span

TOKEN_KEYS = {
    "input": ("input_tokens", "prompt_tokens"),
    "output": ("output_tokens", "completion_tokens"),
    "total": ("total_tokens",),
}
# Child runs nested deeper than this are refused rather than risk the stack.
MAX_DEPTH = 200


@register("langsmith", label="LangSmith runs")
def parse(path: Path) -> Iterator[ParseResult]:
    runs: dict[str, dict[str, Any]] = {}
    where: dict[str, tuple[str, str]] = {}
    for entry in jsonstream.iter_records(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            found = _record_runs(record)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
            continue
        for field_path, run, is_update in found:
            run_id = run["id"]
            if is_update and run_id in runs:
                runs[run_id] = {**runs[run_id], **run}
            else:
                runs[run_id] = {**runs.get(run_id, {}), **run}
                where.setdefault(run_id, (location, field_path))

    traces: dict[str, list[Span]] = {}
    locations: dict[str, str] = {}
    raws: dict[str, list[Any]] = {}
    bad_traces: set[str] = set()
    for order, (run_id, run) in enumerate(runs.items()):
        location, field_path = where.get(run_id, ("record 0", ""))
        trace_id = _trace_id(run, runs)
        try:
            span = _span(run, field_path, order)
        except FieldError as error:
            bad_traces.add(trace_id)
            yield RecordError(location, error.field, error.message)
            continue
        traces.setdefault(trace_id, []).append(span)
        locations.setdefault(trace_id, location)
        raws.setdefault(trace_id, []).append(run)
    for trace_id, trace_spans in traces.items():
        if trace_id not in bad_traces:
            yield _trajectory(trace_id, trace_spans, locations[trace_id], raws[trace_id])


def _record_runs(record: Any) -> list[tuple[str, dict[str, Any], bool]]:
    """(field path, run without its children, whether it is an update) for every run in
    one record, children included."""
    if not isinstance(record, dict):
        raise FieldError("", f"expected a run object, got {type(record).__name__}")
    found: list[tuple[str, dict[str, Any], bool]] = []
    if "post" in record or "patch" in record:
        posted: dict[str, str] = {}
        for key in ("post", "patch"):
            runs = record.get(key) or []
            if not isinstance(runs, list):
                raise FieldError(key, f"expected a list of runs, got {type(runs).__name__}")
            for number, run in enumerate(runs):
                if key == "patch" and isinstance(run, dict) and "id" not in run:
                    # The JS SDK's updates name their run by dotted_order, not id.
                    run_id = posted.get(str(run.get("dotted_order")))
                    run = {**run, "id": run_id} if run_id else run
                _flatten(run, f"{key}.{number}", "", found, key == "patch", 0)
                if key == "post" and isinstance(run, dict):
                    posted[str(run.get("dotted_order"))] = run["id"]
        return found
    _flatten(record, "", "", found, False, 0)
    return found


def _flatten(
    run: Any,
    where: str,
    parent_id: str,
    found: list[tuple[str, dict[str, Any], bool]],
    is_update: bool,
    depth: int,
) -> None:
    if depth > MAX_DEPTH:
        raise FieldError(where, f"child runs nest deeper than {MAX_DEPTH}")
    if not isinstance(run, dict):
        raise FieldError(where, f"expected a run object, got {type(run).__name__}")
    run_id = require(run, "id", str, where)
    if not run_id.strip():
        raise FieldError(f"{where}.id" if where else "id", "is empty")
    flat = {key: value for key, value in run.items() if key != "child_runs"}
    if parent_id and not flat.get("parent_run_id"):
        flat["parent_run_id"] = parent_id
    found.append((where, flat, is_update))
    children = run.get("child_runs") or []
    if not isinstance(children, list):
        raise FieldError(f"{where}.child_runs" if where else "child_runs", "expected a list")
    for number, child in enumerate(children):
        child_where = f"{where}.child_runs.{number}" if where else f"child_runs.{number}"
        _flatten(child, child_where, run_id, found, is_update, depth + 1)


def _trace_id(run: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    """The run's ``trace_id``, else the id of the root it hangs from."""
    trace_id = run.get("trace_id")
    if isinstance(trace_id, str) and trace_id:
        return trace_id
    seen = set()
    while isinstance(run.get("parent_run_id"), str) and run["parent_run_id"] in runs:
        if run["id"] in seen:
            break
        seen.add(run["id"])
        run = runs[run["parent_run_id"]]
    return str(run["id"])


def _span(run: dict[str, Any], where: str, order: int) -> Span:
    def name_of(key: str) -> str:
        return f"{where}.{key}" if where else key

    run_type = run.get("run_type", "chain")
    if not isinstance(run_type, str):
        raise FieldError(name_of("run_type"), f"expected str, got {type(run_type).__name__}")
    parent = run.get("parent_run_id")
    if parent is not None and not isinstance(parent, str):
        raise FieldError(name_of("parent_run_id"), "expected str or null")
    name = run.get("name")
    inputs = decode(run.get("inputs"))
    outputs = decode(run.get("outputs"))
    span = Span(
        span_id=run["id"],
        parent_span_id=parent or "",
        kind=run_type.lower(),
        name=name if isinstance(name, str) else run_type,
        order=order,
        start=spans.seconds(run.get("start_time"), name_of("start_time")),
        end=spans.seconds(run.get("end_time"), name_of("end_time")),
        input=inputs,
        output=_output(outputs),
    )
    extra = run.get("extra")
    metadata = extra.get("metadata") if isinstance(extra, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    model = metadata.get("ls_model_name")
    if not isinstance(model, str) and isinstance(outputs, dict):
        model = outputs.get("model")
    if not isinstance(model, str) and isinstance(inputs, dict):
        model = inputs.get("model")
    span.model = model if isinstance(model, str) else ""
    span.tokens = _tokens(outputs, run)
    cost = spans.money(run.get("total_cost"))
    span.cost = cost
    error = run.get("error")
    if isinstance(error, str) and error:
        span.error = error
    if span.kind == "tool":
        span.tool_name = span.name
        span.tool_args = inputs.get("input", inputs) if isinstance(inputs, dict) else inputs
    agent = metadata.get("langgraph_node")
    if isinstance(agent, str) and agent:
        span.extra["langgraph_node"] = agent
    session = run.get("session_name")
    if isinstance(session, str) and session:
        span.extra["session_name"] = session
    return span


def _output(outputs: Any) -> Any:
    """A run's output: LangChain chat models keep theirs under ``generations``, tools
    under ``output``."""
    if isinstance(outputs, dict):
        if "generations" in outputs:
            return outputs["generations"]
        if set(outputs) == {"output"}:
            return outputs["output"]
    return outputs


def _tokens(outputs: Any, run: dict[str, Any]) -> dict[str, int]:
    usage: Any = None
    if isinstance(outputs, dict):
        usage = outputs.get("usage_metadata") or outputs.get("usage")
        llm_output = outputs.get("llm_output")
        if usage is None and isinstance(llm_output, dict):
            usage = llm_output.get("token_usage")
    tokens = {}
    for name, keys in TOKEN_KEYS.items():
        for key in keys:
            value = spans.count(usage.get(key)) if isinstance(usage, dict) else None
            if value is None:
                value = spans.count(run.get(key))
            if value is not None:
                tokens[name] = value
                break
    return tokens


def _trajectory(
    trace_id: str, trace_spans: list[Span], location: str, raw: list[Any]
) -> ParsedTrajectory:
    tree = spans.build(trace_spans)
    metadata: dict[str, Any] = {"trace_id": trace_id, **tree.totals}
    sessions = [span.extra["session_name"] for span in trace_spans if "session_name" in span.extra]
    if sessions:
        metadata["session_name"] = sessions[0]
    return ParsedTrajectory(
        external_id=trace_id,
        task=tree.task,
        steps=tree.steps,
        model_name=tree.model,
        metadata=metadata,
        raw=raw,
        location=location,
    )
