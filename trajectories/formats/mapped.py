"""The generic mapped importer: a small JSON mapping names where a file keeps each
trajectory's fields, so a format nobody wrote a parser for imports without code.

Paths are dotted (``a.b.0.c``): object keys, and list positions as numbers (``-1`` is the
last item). A mapping looks like::

    {"records": "samples", "id": "question_ID", "task": "question",
     "steps": "history", "step": {"content": "content", "role": "role", "agent": "name"},
     "first_error_index": "mistake_step", "metadata": ["level", "mistake_reason"],
     "decisive": {"agent": "mistake_agent", "step": "mistake_step",
                  "reason": "mistake_reason"}}

docs/formats.md describes every key. Values are coerced only where the meaning is plain
(``"7"`` is the index 7, ``0``/``1`` and ``"true"``/``"false"`` are outcomes, numbers
are text where text is expected, null is "none"); anything else is an error naming the
record and the path in it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from collections.abc import Mapping as AnyMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajectories.agents import agent_name, trajectory_agents
from trajectories.formats import jsonstream, register
from trajectories.formats import mapped_values as values
from trajectories.formats.base import (
    STEP_KINDS,
    FieldError,
    FileError,
    ParsedDecisive,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    Parser,
    ParseResult,
    RecordError,
)

ANNOTATOR = "import:mapped"
PATH_KEYS = (
    "records",
    "id",
    "task",
    "task_key",
    "ground_truth",
    "model",
    "outcome",
    "reward",
    "steps",
    "first_error_index",
)
MAPPING_KEYS = (*PATH_KEYS, "step", "metadata", "labelable", "agent_pattern", "decisive")
DECISIVE_KEYS = ("agent", "step", "reason")
LABELABLE_KEYS = ("path", "roles", "agents", "input_roles", "input_agents")
REQUIRED_KEYS = ("task", "steps")
STEP_KEYS = ("content", "role", "agent", "kind", "tool_name")
# Steps with these roles are inputs to the agent, not its decisions, so not labelable.
INPUT_ROLES = ("system", "developer", "user", "tool")
INTEGER = values.INTEGER
MISSING = values.MISSING


class MappingError(ValueError):
    """The mapping itself is wrong; the message names the mapping key."""


@dataclass(frozen=True)
class StepFields:
    """Paths inside one step object. Empty means not mapped."""

    content: str
    role: str = ""
    # One path, or several tried in order (the first with text wins): AG2 names the
    # speaker in ``name``, Magentic-One in ``role``.
    agent: str | tuple[str, ...] = ""
    kind: str = ""
    tool_name: str = ""


@dataclass(frozen=True)
class LabelableRule:
    """Which steps are the agents' turns. Multi-agent logs (AutoGen, AG2) give every
    agent's turn the role ``user`` and tell agents apart by ``name``, so the role alone
    cannot say. In order: the value at ``path`` in the step when it is a boolean; a
    named agent in ``input_agents`` is an input, and one in ``agents`` (or any named
    agent when ``agents`` is ``"*"``) is labelable; a role in ``roles`` is labelable
    and one in ``input_roles`` is not; any other step is labelable."""

    path: str = ""
    roles: tuple[str, ...] = ()
    agents: tuple[str, ...] | str = ()
    input_roles: tuple[str, ...] = INPUT_ROLES
    input_agents: tuple[str, ...] = ()

    def decides(self, raw: dict[str, Any], role: str, agent: str) -> bool:
        if self.path:
            value = values.get(raw, self.path)
            if isinstance(value, bool):
                return value
        if agent:
            if agent in self.input_agents:
                return False
            if self.agents == "*" or agent in self.agents:
                return True
        if role in self.roles:
            return True
        return role not in self.input_roles


@dataclass(frozen=True)
class Mapping:
    """Where a record keeps each field, as dotted paths. Empty means not mapped."""

    task: str
    steps: str
    records: str = ""
    id: str = ""
    task_key: str = ""
    ground_truth: str = ""
    model: str = ""
    outcome: str = ""
    reward: str = ""
    # None: each step is a plain string.
    step: StepFields | None = None
    first_error_index: str = ""
    # (metadata key, path) pairs, in the mapping's order.
    metadata: tuple[tuple[str, str], ...] = ()
    labelable: LabelableRule | None = None
    # Where it matches a step's agent, its group ``agent`` (or its first group) is the
    # agent: ``Orchestrator (thought)`` and ``Orchestrator (-> WebSurfer)`` are one agent.
    agent_pattern: re.Pattern[str] | None = None
    # Paths of the decisive failure's agent, step and reason ("" where not mapped).
    decisive: tuple[str, str, str] | None = None


def load_mapping(source: Path | str | AnyMapping[str, Any]) -> Mapping:
    """A validated :class:`Mapping` from a mapping file (path) or its decoded JSON."""
    if isinstance(source, AnyMapping):
        data: Any = source
    else:
        try:
            data = jsonstream.load_file(Path(source))
        except FileError as error:
            raise MappingError(f"mapping file {error}") from error
    if not isinstance(data, AnyMapping):
        raise MappingError(f"a mapping is a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in MAPPING_KEYS:
            raise MappingError(
                f"mapping key {key!r}: unknown; expected one of {', '.join(MAPPING_KEYS)}"
            )
    for key in REQUIRED_KEYS:
        if key not in data:
            raise MappingError(f"mapping key {key!r}: is missing")
    paths = {key: _path_setting(data, key) for key in PATH_KEYS if key in data}
    return Mapping(
        **paths,
        step=_step_fields(data["step"]) if data.get("step") is not None else None,
        metadata=_metadata_setting(data.get("metadata")),
        labelable=_labelable_setting(data["labelable"]) if "labelable" in data else None,
        agent_pattern=_pattern_setting(data["agent_pattern"]) if "agent_pattern" in data else None,
        decisive=_decisive_setting(data["decisive"]) if "decisive" in data else None,
    )


def parse_mapped(path: Path, mapping: Mapping) -> Iterator[ParseResult]:
    """Yield one trajectory or error per record of ``path``, read as ``mapping`` says."""
    entries = _records(path, mapping) if mapping.records else jsonstream.iter_records(path)
    for entry in entries:
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            yield _trajectory(record, location, mapping)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)


def parser_with_mapping(mapping: Mapping | Path | str | AnyMapping[str, Any]) -> Parser:
    """A parser with the same signature as every other format's, bound to ``mapping``."""
    bound = mapping if isinstance(mapping, Mapping) else load_mapping(mapping)

    def parse(path: Path) -> Iterator[ParseResult]:
        return parse_mapped(path, bound)

    return parse


@register("mapped", label="Anything, with a mapping")
def parse(path: Path) -> Iterator[ParseResult]:
    """Registered so ``--format mapped`` is listed; without a mapping it cannot read."""
    raise ValueError(
        "the mapped format needs a mapping: pass --mapping FILE, or in code use "
        "parser_with_mapping(load_mapping(FILE))"
    )


# The mapping


def _path_setting(data: AnyMapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise MappingError(
            f"mapping key {key!r}: expected a dotted path string, got {type(value).__name__}"
        )
    _check_path(value, key)
    return value


def _check_path(value: str, key: str) -> None:
    if not value or any(not segment for segment in value.split(".")):
        raise MappingError(f"mapping key {key!r}: {value!r} is not a dotted path such as 'a.b.0.c'")


def _step_fields(value: Any) -> StepFields:
    if not isinstance(value, AnyMapping):
        raise MappingError(
            f"mapping key 'step': expected an object of paths, got {type(value).__name__}"
        )
    for key in value:
        if key not in STEP_KEYS:
            raise MappingError(
                f"mapping key 'step.{key}': unknown; expected one of {', '.join(STEP_KEYS)}"
            )
    if "content" not in value:
        raise MappingError("mapping key 'step.content': is missing")
    fields: dict[str, Any] = {}
    for key, path in value.items():
        if key == "agent" and isinstance(path, list) and path:
            for number, each in enumerate(path):
                if not isinstance(each, str):
                    raise MappingError(
                        f"mapping key 'step.agent.{number}': expected a dotted path string, "
                        f"got {type(each).__name__}"
                    )
                _check_path(each, f"step.agent.{number}")
            fields[key] = tuple(path)
            continue
        if not isinstance(path, str):
            expected = "a dotted path string or a list of them" if key == "agent" else ""
            raise MappingError(
                f"mapping key 'step.{key}': expected {expected or 'a dotted path string'}, "
                f"got {type(path).__name__}"
            )
        _check_path(path, f"step.{key}")
        fields[key] = path
    return StepFields(**fields)


def _pattern_setting(value: Any) -> re.Pattern[str]:
    if not isinstance(value, str):
        raise MappingError(
            "mapping key 'agent_pattern': expected a regular expression, "
            f"got {type(value).__name__}"
        )
    try:
        pattern = re.compile(value)
    except re.error as error:
        raise MappingError(
            f"mapping key 'agent_pattern': not a regular expression: {error}"
        ) from None
    if not pattern.groups:
        raise MappingError(
            "mapping key 'agent_pattern': needs a group (named 'agent', or the first) "
            "that is the agent's name"
        )
    return pattern


def _metadata_setting(value: Any) -> tuple[tuple[str, str], ...]:
    """``metadata`` is a list of paths (each stored under its own path as the key) or an
    object from metadata key to path."""
    if value is None:
        return ()
    if isinstance(value, list):
        pairs = []
        for number, path in enumerate(value):
            if not isinstance(path, str):
                raise MappingError(
                    f"mapping key 'metadata.{number}': expected a dotted path string, "
                    f"got {type(path).__name__}"
                )
            pairs.append((path, path))
    elif isinstance(value, AnyMapping):
        pairs = []
        for name, path in value.items():
            if not isinstance(path, str):
                raise MappingError(
                    f"mapping key 'metadata.{name}': expected a dotted path string, "
                    f"got {type(path).__name__}"
                )
            pairs.append((name, path))
    else:
        raise MappingError(
            "mapping key 'metadata': expected a list of paths or an object of "
            f"name to path, got {type(value).__name__}"
        )
    for name, path in pairs:
        _check_path(path, f"metadata.{name}")
    return tuple(pairs)


def _labelable_setting(value: Any) -> LabelableRule:
    if not isinstance(value, AnyMapping):
        raise MappingError(
            f"mapping key 'labelable': expected an object, got {type(value).__name__}"
        )
    settings: dict[str, Any] = {}
    for key, setting in value.items():
        name = f"labelable.{key}"
        if key not in LABELABLE_KEYS:
            raise MappingError(
                f"mapping key {name!r}: unknown; expected one of {', '.join(LABELABLE_KEYS)}"
            )
        if key == "path":
            if not isinstance(setting, str):
                raise MappingError(f"mapping key {name!r}: expected a dotted path string")
            _check_path(setting, name)
            settings[key] = setting
        elif key == "agents" and setting == "*":
            settings[key] = "*"
        elif isinstance(setting, list) and all(isinstance(item, str) for item in setting):
            settings[key] = tuple(setting)
        else:
            raise MappingError(f"mapping key {name!r}: expected a list of names")
    return LabelableRule(**settings)


def _decisive_setting(value: Any) -> tuple[str, str, str]:
    if not isinstance(value, AnyMapping):
        raise MappingError(
            f"mapping key 'decisive': expected an object of paths, got {type(value).__name__}"
        )
    for key in value:
        if key not in DECISIVE_KEYS:
            raise MappingError(
                f"mapping key 'decisive.{key}': unknown; expected one of {', '.join(DECISIVE_KEYS)}"
            )
    if "agent" not in value and "step" not in value:
        raise MappingError("mapping key 'decisive': needs 'agent' or 'step' (or both)")
    paths = []
    for key in DECISIVE_KEYS:
        path = value.get(key, "")
        if not isinstance(path, str):
            raise MappingError(
                f"mapping key 'decisive.{key}': expected a dotted path string, "
                f"got {type(path).__name__}"
            )
        if path:
            _check_path(path, f"decisive.{key}")
        paths.append(path)
    return paths[0], paths[1], paths[2]


# Reading records


def _records(path: Path, mapping: Mapping) -> Iterator[tuple[str, Any]]:
    """The items of the list at ``mapping.records``, streamed when the path is object
    keys only (ijson cannot pick one list position), else from the whole file."""
    keys = tuple(mapping.records.split("."))
    if any(INTEGER.fullmatch(key) for key in keys):
        found = values.get(jsonstream.load_file(path), mapping.records)
        if not isinstance(found, list):
            raise FileError(_records_problem(path, mapping, _json_kind(found)))
        for index, record in enumerate(found):
            yield f"record {index}", record
        return
    count = 0
    for entry in jsonstream.iter_array(path, keys):
        count += 1
        yield entry
    if count == 0:
        kind = jsonstream.kind_at(path, keys)
        if kind != "array":
            raise FileError(_records_problem(path, mapping, kind))


def _records_problem(path: Path, mapping: Mapping, kind: str | None) -> str:
    where = f"{path}: mapping key 'records': {mapping.records!r}"
    if kind is None:
        return f"{where} is not in the file"
    return f"{where} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, expected a list of records"


def _json_kind(value: Any) -> str | None:
    if value is MISSING:
        return None
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# One record


def _trajectory(record: Any, location: str, mapping: Mapping) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a record object, got {type(record).__name__}")
    task = values.text(record, mapping.task, required=True)
    steps = _steps(record, mapping)
    first_error = values.first_error_index(record, mapping.first_error_index, len(steps))
    success = values.outcome(record, mapping.outcome)
    reward = values.reward(record, mapping.reward)
    if reward is None and success is not None:
        reward = 1.0 if success else 0.0
    if mapping.id:
        external_id = values.text(record, mapping.id, required=True)
        if not external_id.strip():
            raise FieldError(mapping.id, "is empty")
    else:
        # Without an id the record's content names it, so re-imports still match.
        canonical = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
        external_id = "mapped-" + digest[:16]
    metadata = {}
    for name, path in mapping.metadata:
        value = values.get(record, path)
        if value is not MISSING:
            metadata[name] = value
    return ParsedTrajectory(
        external_id=external_id,
        task=task,
        steps=steps,
        task_key=values.text(record, mapping.task_key),
        ground_truth=values.text(record, mapping.ground_truth),
        model_name=values.text(record, mapping.model),
        outcome_reward=reward,
        success=success,
        first_error_index=first_error,
        metadata=metadata,
        labels=_labels(steps, first_error, mapping.first_error_index),
        decisive=_decisive(record, mapping.decisive, steps),
        raw=record,
        location=location,
    )


def _steps(record: dict[str, Any], mapping: Mapping) -> list[ParsedStep]:
    raw_steps = values.get(record, mapping.steps)
    if raw_steps is MISSING:
        raise FieldError(mapping.steps, "is missing")
    if not isinstance(raw_steps, list):
        raise FieldError(
            mapping.steps, f"expected a list of steps, got {values.type_name(raw_steps)}"
        )
    if not raw_steps:
        raise FieldError(mapping.steps, "is empty; a trajectory needs at least one step")
    fields = mapping.step
    steps = []
    for index, raw in enumerate(raw_steps):
        path = f"{mapping.steps}.{index}"
        if fields is None:
            if raw is None or isinstance(raw, bool | dict | list):
                raise FieldError(
                    path,
                    "expected a string step (the mapping has no 'step'), "
                    f"got {values.type_name(raw)}",
                )
            steps.append(
                ParsedStep(kind="thought", role="assistant", content=str(raw), labelable=True)
            )
            continue
        if not isinstance(raw, dict):
            raise FieldError(path, f"expected a step object, got {values.type_name(raw)}")
        content = values.text(raw, fields.content, required=True, nullable=True, prefix=path)
        role = values.text(raw, fields.role, prefix=path) or "assistant"
        agent = _agent(raw, fields.agent, mapping.agent_pattern, path)
        kind = values.text(raw, fields.kind, prefix=path) or "message"
        if kind not in STEP_KINDS:
            raise FieldError(
                f"{path}.{fields.kind}", f"is {kind!r}; expected one of {', '.join(STEP_KINDS)}"
            )
        steps.append(
            ParsedStep(
                kind=kind,
                role=role,
                content=content,
                labelable=(
                    mapping.labelable.decides(raw, role, agent)
                    if mapping.labelable
                    else role not in INPUT_ROLES
                ),
                agent=agent,
                tool_name=values.text(raw, fields.tool_name, prefix=path),
            )
        )
    return steps


def _agent(
    raw: dict[str, Any], paths: str | tuple[str, ...], pattern: re.Pattern[str] | None, prefix: str
) -> str:
    agent = ""
    for each in (paths,) if isinstance(paths, str) else paths:
        agent = values.text(raw, each, prefix=prefix)
        if agent:
            break
    if pattern is None or not agent:
        return agent
    found = pattern.match(agent)
    if found is None:
        return agent
    name = found.group("agent") if "agent" in pattern.groupindex else found.group(1)
    return (name or "").strip() or agent


def _labels(steps: list[ParsedStep], first_error: int | None, path: str) -> list[ParsedLabel]:
    """As for ProcessBench: +1 on each labelable step before the first error, -1 on it,
    nothing after it (never judged); +1 on every labelable step when it is -1."""
    if first_error is None:
        return []
    if first_error >= 0 and not steps[first_error].labelable:
        raise FieldError(
            path,
            f"points at step {first_error}, whose role {steps[first_error].role!r} "
            "is an input and cannot be labeled",
        )
    judged = len(steps) if first_error == -1 else first_error + 1
    return [
        ParsedLabel(step_index=index, value=-1 if index == first_error else 1, annotator=ANNOTATOR)
        for index in range(judged)
        if steps[index].labelable
    ]


def _decisive(
    record: dict[str, Any], paths: tuple[str, str, str] | None, steps: list[ParsedStep]
) -> ParsedDecisive | None:
    """The decisive failure at the mapping's paths: the step must be one of the
    trajectory's, the agent one of its agents (``trajectories.agents``). None when the
    record has neither."""
    if paths is None:
        return None
    agent_path, step_path, reason_path = paths
    agent = agent_name(values.text(record, agent_path)) if agent_path else ""
    step = values.first_error_index(record, step_path, len(steps)) if step_path else None
    if step == -1:
        step = None
    if not agent and step is None:
        return None
    if agent:
        agents = trajectory_agents((s.agent, s.role, s.labelable) for s in steps)
        if agent not in agents:
            raise FieldError(
                agent_path,
                f"is {agent!r}, not one of the trajectory's agents ({', '.join(agents) or 'none'})",
            )
    return ParsedDecisive(agent=agent, step_index=step, reason=values.text(record, reason_path))
