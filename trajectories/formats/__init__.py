"""Importers, one module per external format, all Django-free. ``PARSERS`` maps the
``--format`` name to the parser function; ``FORMATS`` adds what the import page and the
command need to know about each: its label, and which files of a folder it reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajectories.formats.base import Parser

# What a folder stands for when a format says nothing else: every such file below it.
DEFAULT_SUFFIXES = (".json", ".jsonl", ".traj", ".eval")

# A folder's import units, in order: each is one all-or-nothing import.
Units = Callable[[Path], list[Path]]


@dataclass(frozen=True)
class Format:
    name: str
    parser: Parser
    # Shown on the import page; a format without one (an app's internal format) is not
    # offered there.
    label: str = ""
    suffixes: tuple[str, ...] = DEFAULT_SUFFIXES
    # The import units of a folder, for formats where one is not simply a file (an
    # OpenHands conversation folder, a run's results beside its metadata).
    units: Units | None = None


PARSERS: dict[str, Parser] = {}
FORMATS: dict[str, Format] = {}


def register(
    name: str,
    *,
    label: str = "",
    suffixes: tuple[str, ...] = DEFAULT_SUFFIXES,
    units: Units | None = None,
) -> Callable[[Parser], Parser]:
    def decorate(parser: Parser) -> Parser:
        PARSERS[name] = parser
        FORMATS[name] = Format(name, parser, label, suffixes, units)
        return parser

    return decorate


def _load() -> None:
    # Importing the modules fills PARSERS; kept lazy so importing the package stays cheap.
    from trajectories.formats import (  # noqa: F401
        agent_session,
        art,
        chatdev,
        inspect_ai,
        langfuse,
        langsmith,
        mapped,
        math_shepherd,
        nemo_gym,
        openai_messages,
        openhands,
        otel,
        prm800k,
        processbench,
        rllm,
        stepscope,
        swe_agent,
        trl_completions,
        trl_stepwise,
        verifiers,
        verl,
    )


def parser_for(name: str, mapping: dict[str, Any] | None = None) -> Parser:
    """The parser for ``--format name``; the ``mapped`` format is bound to ``mapping``.
    Raises ValueError naming the problem (unknown format, missing or bad mapping)."""
    _load()
    from trajectories.formats import mapped

    if name == "mapped":
        if mapping is None:
            raise ValueError("the mapped format needs a mapping (--mapping FILE)")
        return mapped.parser_with_mapping(mapped.load_mapping(mapping))
    try:
        return PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(PARSERS))
        raise ValueError(f"unknown format {name!r}; known formats: {known}") from None


def format_choices() -> list[tuple[str, str]]:
    """``(name, label)`` of every format a user can pick: Stepscope's own first, the
    mapped one last, the others by name."""
    _load()
    offered = [entry for entry in FORMATS.values() if entry.label]
    order = {"stepscope": 0, "mapped": 2}
    offered.sort(key=lambda entry: (order.get(entry.name, 1), entry.name))
    return [(entry.name, entry.label) for entry in offered]


def import_units(name: str, path: Path) -> list[Path]:
    """What importing ``path`` with format ``name`` imports, one all-or-nothing import
    each: a file is itself; a folder is what the format reads in it (by default every
    file below it with one of the format's suffixes, in sorted order). Raises
    ValueError for an unknown format."""
    _load()
    if name not in FORMATS:
        parser_for(name)  # raises, naming the known formats
    if not path.is_dir():
        return [path]
    entry = FORMATS[name]
    if entry.units is not None:
        return entry.units(path)
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in entry.suffixes)
