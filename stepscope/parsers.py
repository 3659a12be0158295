"""The API's request parsers: DRF's, except that JSON nested too deeply for Python's parser
is a 400 like any other malformed body (``json`` raises RecursionError there, which DRF
does not catch, so the request would end in a 500)."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
