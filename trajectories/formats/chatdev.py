"""ChatDev 1.0 run logs (``WareHouse/<project>_<org>_<timestamp>.log``): one trajectory
per file, a software company of agents (Chief Executive Officer, Chief Product Officer,
Chief Technology Officer, Programmer, Code Reviewer, Counselor) talking in phases.

The log is plain text, read line by line. An entry starts with ``[YYYY-DD-MM HH:MM:SS
LEVEL]`` (ChatDev writes the day before the month) and runs to the next one:

- ``System: **[chatting]**`` starts a phase; its table names the phase and its two roles.
- ``<Role>: **[Start Chat]**`` is the phase's instruction from its user role to its
  assistant role: a step of that agent, an input (ChatDev fills it in from the phase's
  prompt template), not labelable, and the root of the phase's turns.
- ``<Role>: **<Role><-><Other> on : <Phase>, turn N**`` is an agent's turn: a labelable
  ``message`` step of that agent below the phase's instruction, with the model call's
  token counts (the ``[OpenAI_Usage_Info Receive]`` entry before it).
- ``[Update Codes]``, ``[Rewrite Codes]``, ``[Test Reports]``, ``[Test Info]`` and any other
  marker are what the environment did with the agents' work: ``observation`` steps (not
  labelable) below the turn before them.
- ``[Seminar Conclusion]`` (a phase's result), ``[Execute Detail]`` (which composed phase
  and cycle the next phase belongs to), ``[Software Info]`` / ``[Post Info]`` (cost and
  token totals) and ``[Preprocessing]`` (the task) are kept in the trajectory's
  metadata; bookkeeping lines (``flask app.py did not start``, ``[RolePlaying]``) make
  nothing.

Each message starts with the receiving agent's system prompt in brackets, which ChatDev
logs with it; that is left out of the step (it is the phase table's role prompt). A bad
entry (a date that is not one) is an error naming its line; a log with one is rejected
whole, since the file is one trajectory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from trajectories.formats import register
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
)
from trajectories.formats.spans import depth_below

ENTRY = re.compile(r"\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) ([A-Z]+)\] ?(.*)")
TURN = re.compile(r"(.+?): \*\*(.+?)<->(.+?) on : (.+?), turn (\d+)\*\*")
START = re.compile(r"(.+?): \*\*\[Start Chat\]\*\*")
MARKER = re.compile(r"(?:System: )?\*\*\[(.+?)\]\*\*:?")
TABLE_ROW = re.compile(r"\| \*\*(.+?)\*\* \| (.*) \|")
SETTING = re.compile(r"\*\*(.+?)\*\*: ?(.*)")
STAT = re.compile(r".*?\*\*(\w+)\*\*=(.*)")
USAGE = re.compile(r"(\w+_tokens): (\d+)")
EXECUTE = re.compile(r"execute SimplePhase:\[(.+?)\] in ComposedPhase:\[(.+?)\], cycle (\d+)")
SKIPPED = ("flask app.py did not start for online log",)
SKIPPED_MARKERS = ("RolePlaying",)
# Markers whose entry is kept in the metadata, not as a step.
KEPT_MARKERS = (
    "Preprocessing",
    "chatting",
    "Seminar Conclusion",
    "Execute Detail",
    "Software Info",
    "Post Info",
    "OpenAI_Usage_Info Receive",
)


@dataclass
class Entry:
    line: int
    time: str  # ISO 8601
    head: str
    body: str


@dataclass
class Run:
    """A log's steps and what it says about itself, as its entries are read."""

    steps: list[ParsedStep] = field(default_factory=list)
    task: str = ""
    log_name: str = ""
    models: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    software_info: dict[str, Any] = field(default_factory=dict)
    # A phase's place in a composed phase (by the phase's name), from the Execute Detail
    # before it; a phase that holds no chat (a test run) leaves its place unused.
    next_place: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)  # the next turn's model call
    start: int | None = None  # the current phase's instruction step
    last_turn: int | None = None

    def add(self, step: ParsedStep, parent: int | None) -> None:
        if parent is not None:
            step.metadata["parent"] = parent
        step.metadata["depth"] = depth_below(self.steps, step)
        self.steps.append(step)


@register("chatdev", label="ChatDev run log (.log)", suffixes=(".log",))
def parse(path: Path) -> Iterator[ParseResult]:
    run = Run()
    errors: list[RecordError] = []
    first_line = 0
    for entry in _entries(path):
        if isinstance(entry, RecordError):
            errors.append(entry)
            continue
        first_line = first_line or entry.line
        try:
            _read(run, entry)
        except FieldError as error:
            errors.append(RecordError(f"line {entry.line}", error.field, error.message))
    location = f"line {first_line or 1}"
    if not run.task:
        errors.insert(0, RecordError(location, "task_prompt", "is missing; the log names no task"))
    if not any(step.labelable for step in run.steps):
        errors.append(RecordError(location, "", "the log has no agent turn to make a step of"))
    if errors:
        yield from errors
        return
    metadata: dict[str, Any] = {"phases": run.phases}
    for key in ("project_name", "Timestamp"):
        if key in run.settings:
            metadata[key.lower()] = run.settings[key]
    if run.software_info:
        metadata["software_info"] = run.software_info
        if isinstance(run.software_info.get("cost"), float):
            metadata["cost"] = run.software_info["cost"]
    yield ParsedTrajectory(
        external_id=run.log_name or path.stem,
        task=run.task,
        steps=run.steps,
        model_name=run.models[0] if run.models else "",
        metadata=metadata,
        location=location,
    )


def _entries(path: Path) -> Iterator[Entry | RecordError]:
    """The log's entries in order, each with its first line's number; an entry whose
    date is bad is an error, and its lines are skipped with it."""
    current: Entry | None = None
    started = False
    body: list[str] = []
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                line = line.rstrip("\n")
                match = ENTRY.fullmatch(line)
                if match is None:
                    if not started and line.strip():
                        raise FileError(
                            f"{path}: line {number} is not a ChatDev log entry; a ChatDev "
                            "log starts with [YYYY-DD-MM HH:MM:SS LEVEL]"
                        )
                    body.append(line)
                    continue
                started = True
                if current is not None:
                    current.body = "\n".join(body).strip()
                    yield current
                body = []
                try:
                    current = Entry(number, _time(match), match.group(8).strip(), "")
                except FieldError as error:
                    current = None
                    yield RecordError(f"line {number}", error.field, error.message)
    except OSError as error:
        raise FileError(f"{path}: cannot be read: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise FileError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    if not started:
        raise FileError(f"{path}: is empty")
    if current is not None:
        current.body = "\n".join(body).strip()
        yield current


def _time(match: re.Match[str]) -> str:
    year, day, month, hour, minute, second = (int(match.group(n)) for n in range(1, 7))
    try:
        return datetime(year, month, day, hour, minute, second).isoformat()
    except ValueError:
        written = match.group(0)[1:20]
        raise FieldError(
            "timestamp", f"{written!r} is not a date written as ChatDev does (year-day-month)"
        ) from None


def _read(run: Run, entry: Entry) -> None:
    head = entry.head
    if head in SKIPPED:
        return
    turn = TURN.fullmatch(head)
    if turn is not None:
        _turn(run, entry, turn)
        return
    start = START.fullmatch(head)
    if start is not None:
        phase = run.phases[-1] if run.phases else {}
        step = ParsedStep(
            kind="message",
            role="user",
            content=_without_preamble(entry.body),
            labelable=False,
            agent=start.group(1).strip(),
            metadata={"start": entry.time, "phase": phase.get("name", ""), "event": "Start Chat"},
        )
        run.start = len(run.steps)
        run.add(step, None)
        return
    marker = MARKER.fullmatch(head)
    name = marker.group(1) if marker is not None else ""
    if name in SKIPPED_MARKERS:
        return
    if name in KEPT_MARKERS:
        _kept(run, name, entry)
        return
    # What the environment did with the agents' work, or an entry this parser does not
    # know: kept as an observation, below the turn before it.
    content = entry.body if marker is not None else "\n".join(filter(None, (head, entry.body)))
    run.add(
        ParsedStep(
            kind="observation",
            role="tool",
            content=content,
            labelable=False,
            metadata={"start": entry.time, "event": name or "log"},
        ),
        run.last_turn,
    )


def _turn(run: Run, entry: Entry, turn: re.Match[str]) -> None:
    speaker, agent, other, phase, number = (part.strip() for part in turn.groups())
    if speaker != agent:
        raise FieldError("speaker", f"is {speaker!r}, but the turn says {agent!r} speaks")
    metadata: dict[str, Any] = {
        "start": entry.time,
        "phase": phase,
        "turn": int(number),
        "with": other,
    }
    if run.usage:
        metadata["tokens"] = run.usage
        run.usage = {}
    step = ParsedStep(
        kind="message",
        role="assistant",
        content=_without_preamble(entry.body),
        labelable=True,
        agent=agent,
        metadata=metadata,
    )
    run.last_turn = len(run.steps)
    run.add(step, run.start)
    if run.phases and run.phases[-1]["name"] == phase:
        run.phases[-1]["turns"] += 1
        run.phases[-1]["last_step"] = run.last_turn


def _kept(run: Run, name: str, entry: Entry) -> None:
    lines = entry.body.splitlines()
    if name == "Preprocessing":
        for line in lines:
            setting = SETTING.fullmatch(line.strip())
            if setting is not None:
                run.settings[setting.group(1)] = setting.group(2).strip()
        run.task = run.settings.get("task_prompt", "")
        log_file = run.settings.get("Log File", "")
        run.log_name = re.split(r"[\\/]", log_file)[-1].removesuffix(".log")
    elif name == "chatting":
        table = {
            row.group(1): row.group(2).strip() for row in map(TABLE_ROW.fullmatch, lines) if row
        }
        model = table.get("model_type", "").removeprefix("ModelType.")
        if model and model not in run.models:
            run.models.append(model)
        if not run.task and table.get("task_prompt"):
            run.task = table["task_prompt"]
        phase: dict[str, Any] = {
            "name": table.get("phase_name", ""),
            "assistant": table.get("assistant_role_name", ""),
            "user": table.get("user_role_name", ""),
            **run.next_place.get(table.get("phase_name", ""), {}),
            "first_step": len(run.steps),
            "last_step": None,
            "turns": 0,
        }
        run.next_place = {}
        run.phases.append(phase)
        run.start = None
    elif name == "Seminar Conclusion":
        if run.phases:
            run.phases[-1].setdefault("conclusions", []).append(entry.body)
    elif name == "Execute Detail":
        detail = EXECUTE.search(entry.body)
        if detail is not None:
            place = {"composed_phase": detail.group(2), "cycle": int(detail.group(3))}
            run.next_place = {detail.group(1): place}
    elif name == "OpenAI_Usage_Info Receive":
        run.usage = {usage.group(1): int(usage.group(2)) for usage in USAGE.finditer(entry.body)}
    else:  # Software Info, Post Info: the run's totals so far
        for line in lines:
            stat = STAT.fullmatch(line.strip())
            if stat is not None:
                run.software_info[stat.group(1)] = _number(stat.group(2).strip())


def _without_preamble(body: str) -> str:
    """The message without the ``[...]`` system prompt ChatDev logs before it."""
    lines = body.splitlines()
    if not lines or not lines[0].startswith("["):
        return body
    for number, line in enumerate(lines):
        if line.rstrip().endswith("]") and (number + 1 == len(lines) or not lines[number + 1]):
            return "\n".join(lines[number + 1 :]).strip()
    return body


def _number(text: str) -> Any:
    """``$0.04`` and ``423.00s`` as numbers; other text as it is."""
    cleaned = text.removeprefix("$").removesuffix("s")
    try:
        number = float(cleaned)
    except ValueError:
        return text
    if not math.isfinite(number):
        return text
    return int(number) if number.is_integer() and "." not in cleaned else number
