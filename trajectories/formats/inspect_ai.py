"""Inspect AI evaluation logs: the JSON log format (``.json``) and the zipped ``.eval``
format. One trajectory per sample and epoch.

A JSON log is one object, ``{version, status, eval, plan, results, stats, samples}``; it
is streamed, the ``eval`` header first and then one sample at a time. An ``.eval`` log is
a zip archive holding ``header.json`` (or, for a run that never finished,
``_journal/start.json``) and one ``samples/<id>_epoch_<n>.json`` member per sample,
read one member at a time. A file starting with the zip signature is read as ``.eval``,
anything else as JSON, whatever its name.

Messages become steps as in the OpenAI-messages format: system and user messages are
inputs, assistant messages are labelable (with their tool calls), tool results are not.
The first scorer's value gives the outcome.
"""

from __future__ import annotations

import lzma
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonio, jsonstream, register
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
    tool_call_step,
)

ZIP_SIGNATURE = b"PK\x03\x04"
# Refuse archive members that would expand past these (a zip bomb): no real log member
# comes near them, and reading one would exhaust memory.
MAX_MEMBER_BYTES = 512 * 1024 * 1024
MAX_RATIO = 100
RATIO_CHECK_FROM = 1024 * 1024
# What reading a damaged archive raises: zipfile's own errors, truncated or corrupt
# compressed data, an unsupported compression method, an encrypted member.
ZIP_READ_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    OSError,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)
HEADER_MEMBERS = ("header.json", "_journal/start.json")
SAMPLE_MEMBER = re.compile(r"samples/(.+)_epoch_(\d+)\.json")

INPUT_ROLES = ("system", "user")
TEXT_PART_TYPES = ("text",)
ATTACHMENT_PREFIX = "attachment://"
# Inspect's letter grades (inspect_ai.scorer.value_to_float): correct, incorrect,
# partial, no answer.
GRADES = {"C": (1.0, True), "I": (0.0, False), "P": (0.5, None), "N": (0.0, False)}
# Sample keys too large or too internal for the trajectory metadata; the raw record
# keeps them.
SAMPLE_KEYS_LEFT_OUT = (
    "id",
    "epoch",
    "input",
    "target",
    "messages",
    "events",
    "attachments",
    "store",
    "output",
    "scores",
    "metadata",
)
EVAL_METADATA = ("task", "task_id", "run_id", "eval_id", "created")


@register("inspect", label="Inspect AI log (.json or .eval)")
def parse(path: Path) -> Iterator[ParseResult]:
    if _is_zip(path):
        yield from _parse_eval(path)
    else:
        yield from _parse_json(path)


def _parse_json(path: Path) -> Iterator[ParseResult]:
    header = jsonstream.value_at(path, ("eval",))
    if not isinstance(header, dict):
        raise FileError(f"{path}: not an Inspect log: it has no 'eval' header object")
    status = jsonstream.value_at(path, ("status",))
    context = _Context.from_header(header, status if isinstance(status, str) else None)
    for location, sample in jsonstream.iter_array(path, ("samples",)):
        yield _result(sample, location, context)


def _parse_eval(path: Path) -> Iterator[ParseResult]:
    try:
        archive = zipfile.ZipFile(path)
    except ZIP_READ_ERRORS as error:
        raise FileError(f"{path}: not a readable zip archive: {error}") from error
    with archive:
        members = archive.infolist()
        for member in members:
            _check_size(path, member)
        names = {member.filename for member in members}
        header_name = next((name for name in HEADER_MEMBERS if name in names), None)
        if header_name is None:
            raise FileError(
                f"{path}: not an Inspect log: the zip has no header.json or _journal/start.json"
            )
        try:
            header = _read_member(path, archive, header_name)
        except _MemberError as error:
            raise FileError(f"{path}: not an Inspect log: {header_name} {error}") from error
        if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
            raise FileError(f"{path}: not an Inspect log: {header_name} has no 'eval' object")
        status = header.get("status")
        context = _Context.from_header(header["eval"], status if isinstance(status, str) else None)
        for name in sorted((n for n in names if SAMPLE_MEMBER.fullmatch(n)), key=_natural):
            try:
                sample = _read_member(path, archive, name)
            except _MemberError as error:
                yield RecordError(name, "", str(error))
                continue
            yield _result(sample, name, context)


class _MemberError(Exception):
    """One member of the archive cannot be read as JSON."""


def _read_member(path: Path, archive: zipfile.ZipFile, name: str) -> Any:
    try:
        data = archive.read(name)
    except ZIP_READ_ERRORS as error:
        # A damaged member (bad CRC, truncated data, an unknown compression) may leave
        # the rest of the archive unreadable too, so it stops the file.
        raise FileError(f"{path}: member {name} cannot be read: {error}") from error
    try:
        return jsonstream.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise _MemberError(f"is not UTF-8 text ({error.reason} at byte {error.start})") from error
    except ValueError as error:
        raise _MemberError(f"not valid JSON: {jsonio.error_message(error)}") from error


def _check_size(path: Path, member: zipfile.ZipInfo) -> None:
    size = member.file_size
    ratio_too_high = size >= RATIO_CHECK_FROM and size > MAX_RATIO * max(member.compress_size, 1)
    if size > MAX_MEMBER_BYTES or ratio_too_high:
        raise FileError(
            f"{path}: member {member.filename} would expand to {size} bytes from "
            f"{member.compress_size}; refusing it as a possible zip bomb"
        )


def _is_zip(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(ZIP_SIGNATURE)) == ZIP_SIGNATURE
    except OSError as error:
        raise FileError(f"{path}: cannot be read: {error.strerror}") from error


def _natural(name: str) -> list[Any]:
    """Sort key that puts ``samples/2_epoch_1.json`` before ``samples/10_epoch_1.json``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class _Context:
    """What every sample of one log shares."""

    def __init__(self, task: str, log_id: str, model: str, metadata: dict[str, Any]) -> None:
        self.task = task
        self.log_id = log_id
        self.model = model
        self.metadata = metadata

    @classmethod
    def from_header(cls, header: dict[str, Any], status: str | None) -> _Context:
        task = header.get("task")
        model = header.get("model")
        # eval_id is unique per log in current Inspect; older logs have only task_id,
        # which is unique per task run (it ends the .eval file name).
        log_id = header.get("eval_id") or header.get("task_id") or header.get("run_id")
        metadata: dict[str, Any] = {key: header[key] for key in EVAL_METADATA if key in header}
        if status is not None:
            metadata["log_status"] = status
        return cls(
            task=task if isinstance(task, str) else "",
            log_id=str(log_id) if isinstance(log_id, str | int) else "",
            model=model if isinstance(model, str) else "",
            metadata=metadata,
        )


def _result(sample: Any, location: str, context: _Context) -> ParseResult:
    try:
        return _trajectory(sample, location, context)
    except FieldError as error:
        return RecordError(location, error.field, error.message)


def _trajectory(sample: Any, location: str, context: _Context) -> ParsedTrajectory:
    if not isinstance(sample, dict):
        raise FieldError("", f"expected a sample object, got {type(sample).__name__}")
    sample_id = require(sample, "id", (str, int))
    epoch = require(sample, "epoch", int)
    attachments = sample.get("attachments")
    if not isinstance(attachments, dict):
        attachments = {}
    messages = require(sample, "messages", list)
    if not messages:
        raise FieldError("messages", "is empty; the sample has no conversation")

    steps: list[ParsedStep] = []
    names_by_call_id: dict[str, str] = {}
    for number, message in enumerate(messages):
        step = _step(message, f"messages.{number}", names_by_call_id, attachments)
        for call in step.metadata.get("tool_calls", []):
            if call["id"]:
                names_by_call_id[call["id"]] = call["name"]
        steps.append(step)

    reward, success = _outcome(sample)
    target = sample.get("target")
    metadata: dict[str, Any] = {
        **context.metadata,
        "sample_id": sample_id,
        "epoch": epoch,
        "scores": sample.get("scores") or {},
        "sample_metadata": sample.get("metadata") or {},
    }
    if isinstance(target, list):
        metadata["target"] = target
    metadata.update(
        (key, value)
        for key, value in sample.items()
        if key not in SAMPLE_KEYS_LEFT_OUT and value is not None
    )
    return ParsedTrajectory(
        external_id=f"{context.log_id}:{sample_id}:{epoch}",
        task=_input_text(sample, attachments),
        steps=steps,
        task_key=f"{context.task}:{sample_id}",
        ground_truth=_target_text(target),
        model_name=context.model,
        outcome_reward=reward,
        success=success,
        metadata=metadata,
        raw=sample,
        location=location,
    )


def _outcome(sample: dict[str, Any]) -> tuple[float | None, bool | None]:
    """The first scorer's value (Inspect lists the primary scorer first): a letter
    grade, a number or a boolean. Other values (several metrics in one dict, free text)
    leave the outcome unknown; every score stays in the metadata."""
    scores = _optional(sample, "scores", dict)
    if not scores:
        return None, None
    name, score = next(iter(scores.items()))
    if not isinstance(score, dict):
        raise FieldError(f"scores.{name}", f"expected an object, got {type(score).__name__}")
    value = score.get("value")
    if isinstance(value, bool):
        return float(value), value
    if isinstance(value, int | float):
        return float(value), None
    if isinstance(value, str) and value in GRADES:
        return GRADES[value]
    return None, None


def _input_text(sample: dict[str, Any], attachments: dict[str, Any]) -> str:
    """The sample's input: a string, or a list of chat messages whose texts are joined."""
    raw = require(sample, "input", (str, list))
    if isinstance(raw, str):
        return _resolve(raw, attachments)
    texts = []
    for number, message in enumerate(raw):
        path = f"input.{number}"
        if not isinstance(message, dict):
            raise FieldError(path, f"expected a message object, got {type(message).__name__}")
        text, _, _ = _content(message.get("content"), f"{path}.content", attachments)
        texts.append(text)
    return "\n\n".join(text for text in texts if text)


def _target_text(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, list) and all(isinstance(item, str) for item in target):
        return "\n".join(target)
    if target is None:
        return ""
    raise FieldError("target", f"expected str or a list of str, got {type(target).__name__}")


def _step(
    message: Any, path: str, names_by_call_id: dict[str, str], attachments: dict[str, Any]
) -> ParsedStep:
    if not isinstance(message, dict):
        raise FieldError(path, f"expected a message object, got {type(message).__name__}")
    role = require(message, "role", str, path)
    content, reasoning, skipped = _content(message.get("content"), f"{path}.content", attachments)
    metadata: dict[str, Any] = {}
    if reasoning:
        metadata["reasoning"] = reasoning
    if skipped:
        metadata["non_text_parts"] = skipped
    for key in ("source", "model"):
        if isinstance(message.get(key), str):
            metadata[key] = message[key]

    if role in INPUT_ROLES:
        return ParsedStep(
            kind="message", role=role, content=content, labelable=False, metadata=metadata
        )
    if role == "tool":
        call_id = _optional(message, "tool_call_id", str, path) or ""
        if call_id:
            metadata["tool_call_id"] = call_id
        if message.get("error") is not None:
            metadata["error"] = message["error"]
        name = _optional(message, "function", str, path) or names_by_call_id.get(call_id, "")
        return ParsedStep(
            kind="tool_result",
            role="tool",
            content=content,
            labelable=False,
            tool_name=name,
            metadata=metadata,
        )
    if role != "assistant":
        raise FieldError(f"{path}.role", f"is {role!r}; expected system, user, assistant or tool")

    calls = _tool_calls(message, path, attachments)
    if not calls:
        return ParsedStep(
            kind="message", role="assistant", content=content, labelable=True, metadata=metadata
        )
    metadata["tool_calls"] = calls
    errors = [
        f"call {number} ({call['name']}): {call['parse_error']}"
        if len(calls) > 1
        else call["parse_error"]
        for number, call in enumerate(calls)
        if call.get("parse_error")
    ]
    return tool_call_step(content=content, calls=calls, metadata=metadata, errors=errors)


def _tool_calls(
    message: dict[str, Any], path: str, attachments: dict[str, Any]
) -> list[dict[str, Any]]:
    """Inspect's calls, ``{id, function, arguments, parse_error?}`` with ``function``
    the tool's name and ``arguments`` already decoded, as ``{id, name, arguments}``."""
    calls = []
    for number, call in enumerate(_optional(message, "tool_calls", list, path) or []):
        call_path = f"{path}.tool_calls.{number}"
        if not isinstance(call, dict):
            raise FieldError(call_path, f"expected a tool call object, got {type(call).__name__}")
        arguments = call.get("arguments")
        if isinstance(arguments, str):
            arguments = _resolve(arguments, attachments)
        entry = {
            "id": _optional(call, "id", str, call_path) or "",
            "name": require(call, "function", str, call_path),
            "arguments": arguments,
        }
        parse_error = _optional(call, "parse_error", str, call_path)
        if parse_error:
            entry["parse_error"] = parse_error
        calls.append(entry)
    return calls


def _content(content: Any, path: str, attachments: dict[str, Any]) -> tuple[str, str, list[str]]:
    """A message's text, its reasoning text, and the types of parts that carry no text
    (images, audio), which are left out."""
    if content is None:
        return "", "", []
    if isinstance(content, str):
        return _resolve(content, attachments), "", []
    if not isinstance(content, list):
        raise FieldError(
            path, f"expected str, a list of content parts or null, got {type(content).__name__}"
        )
    texts = []
    reasoning = []
    skipped = []
    for number, part in enumerate(content):
        part_path = f"{path}.{number}"
        if not isinstance(part, dict):
            raise FieldError(
                part_path, f"expected a content part object, got {type(part).__name__}"
            )
        kind = part.get("type")
        if kind in TEXT_PART_TYPES:
            texts.append(_resolve(require(part, "text", str, part_path), attachments))
        elif kind == "reasoning":
            reasoning.append(_resolve(require(part, "reasoning", str, part_path), attachments))
        else:
            skipped.append(str(kind))
    return "\n".join(texts), "\n".join(reasoning), skipped


def _resolve(text: str, attachments: dict[str, Any]) -> str:
    """Inspect moves long strings into the sample's ``attachments`` and leaves
    ``attachment://<hash>`` in their place; this puts them back."""
    if text.startswith(ATTACHMENT_PREFIX):
        value = attachments.get(text[len(ATTACHMENT_PREFIX) :])
        if isinstance(value, str):
            return value
    return text


def _optional(
    record: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str = ""
) -> Any:
    """``record[key]`` checked like :func:`require`, or None when absent or null."""
    if record.get(key) is None:
        return None
    return require(record, key, kind, path)
