"""Importers, one module per external format, all Django-free. ``PARSERS`` maps the
``--format`` name to the parser function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trajectories.formats.base import Parser

PARSERS: dict[str, Parser] = {}


def register(name: str) -> Callable[[Parser], Parser]:
    def decorate(parser: Parser) -> Parser:
        PARSERS[name] = parser
        return parser

    return decorate


def parser_for(name: str, mapping: dict[str, Any] | None = None) -> Parser:
    """The parser for ``--format name``; the ``mapped`` format is bound to ``mapping``.
    Raises ValueError naming the problem (unknown format, missing or bad mapping)."""
    # Importing the modules fills PARSERS; kept lazy so importing the package stays cheap.
    from trajectories.formats import (  # noqa: F401
        agent_session,
        inspect_ai,
        langfuse,
        langsmith,
        mapped,
        math_shepherd,
        openai_messages,
        openhands,
        otel,
        prm800k,
        processbench,
        stepscope,
        swe_agent,
        trl_stepwise,
    )

    if name == "mapped":
        if mapping is None:
            raise ValueError("the mapped format needs a mapping (--mapping FILE)")
        return mapped.parser_with_mapping(mapped.load_mapping(mapping))
    try:
        return PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(PARSERS))
        raise ValueError(f"unknown format {name!r}; known formats: {known}") from None
