r"""Rendering untrusted trajectory text: markdown, math, code, JSON and label badges.

Everything a model wrote or a file carried is untrusted. Markdown is rendered with raw
HTML switched off (an ``<img onerror=...>`` in a step shows as text, which is also what a
researcher wants to see), and the result is then cleaned by nh3 with a short allow-list,
so a gap in either layer is covered by the other.

TeX (``$…$``, ``$$…$$``, ``\(…\)``, ``\[…\]``) is kept out of markdown's hands: each
span becomes ``<span class="math math-inline|math-display">`` holding its source as
text, which the browser typesets with KaTeX (``static/stepscope/math.js``); without
script the source shows. Fenced code with a language is highlighted by Pygments.
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as etree
from dataclasses import dataclass
from typing import Any

import markdown as markdown_lib
import nh3
from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown.extensions import Extension
from markdown.inlinepatterns import InlineProcessor
from markdown.util import AtomicString
from pygments.token import STANDARD_TYPES

from trajectories.selectors import trajectory_text_full

register = template.Library()

ALLOWED_TAGS = {
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "code",
    "del",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "li",
    "ol",
    "p",
    "pre",
    "span",
    "strong",
    "sub",
    "sup",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "code": {"class"},  # language-xyz from fenced code blocks
    "ol": {"start"},
    "td": {"align"},
    "th": {"align"},
}
ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}
MATH_CLASSES = {"math", "math-inline", "math-display"}
# Pygments' token classes, for highlighted code (``codehilite``).
ALLOWED_CLASSES = {
    "span": MATH_CLASSES | {name for name in STANDARD_TYPES.values() if name},
    "div": {"codehilite"},
}

# A TeX span: display ($$…$$, \[…\]) or inline (\(…\), and $…$ as pandoc reads it: no
# space just inside either dollar, and no digit just after the closing one, so "$5 and
# $10" stays money).
MATH = re.compile(
    r"(?P<display>\$\$(?P<d1>.+?)\$\$|\\\[(?P<d2>.+?)\\\])"
    r"|(?P<inline>\\\((?P<i1>.+?)\\\)|\$(?P<i2>[^\s$](?:[^$\n]*?[^\s$\\])?)\$(?!\d))",
    re.DOTALL,
)


class _MathPattern(InlineProcessor):
    """Each TeX span as a ``span.math`` holding its source, out of reach of the other
    inline patterns (emphasis would eat the ``_`` and ``*`` of ``a_1 * b_1``)."""

    # The stubs give InlineProcessor the signature of the older Pattern.handleMatch.
    def handleMatch(self, m: re.Match[str], data: str) -> tuple[Any, int, int]:  # type: ignore[override]
        element = etree.Element("span")
        element.set("class", "math math-display" if m.group("display") else "math math-inline")
        element.text = AtomicString(m.group(0))
        return element, m.start(0), m.end(0)


class _MathExtension(Extension):
    def extendMarkdown(self, md: markdown_lib.Markdown) -> None:
        # Above emphasis and line breaks, below inline code (`$x$` in backticks is code).
        md.inlinePatterns.register(_MathPattern(MATH.pattern, md), "math", 185)


_local = threading.local()


def _converter() -> markdown_lib.Markdown:
    # A Markdown instance is not thread-safe but is costly to build, so each thread keeps
    # one and resets it between documents.
    converter: markdown_lib.Markdown | None = getattr(_local, "converter", None)
    if converter is None:
        converter = markdown_lib.Markdown(
            extensions=[
                "fenced_code",
                "codehilite",
                "tables",
                "nl2br",
                "sane_lists",
                _MathExtension(),
            ],
            extension_configs={
                "tables": {"use_align_attribute": True},
                # Only code that names its language; guessing colours prose as code.
                "codehilite": {"guess_lang": False, "css_class": "codehilite"},
            },
        )
        # Raw HTML in model output is shown as text, never interpreted.
        converter.preprocessors.deregister("html_block")
        converter.inlinePatterns.deregister("html")
        # Backslash escapes would eat LaTeX (\( \) \\ in chains of thought); keep them.
        converter.inlinePatterns.deregister("escape")
        _local.converter = converter
    return converter


def render_markdown(text: str) -> str:
    """Markdown to sanitized HTML. Plain function so it can be used outside templates."""
    converter = _converter()
    try:
        # Pygments opens every block with an empty span; it says nothing.
        html = converter.convert(text).replace("<pre><span></span>", "<pre>")
    finally:
        converter.reset()
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=ALLOWED_URL_SCHEMES,
        link_rel="noopener noreferrer",
        allowed_classes=ALLOWED_CLASSES,
    )


def render_math_text(text: str) -> str:
    """Plain text (a rationale, a correction) escaped, its TeX spans marked for the
    browser to typeset as in markdown."""
    out, last = [], 0
    for m in MATH.finditer(text):
        kind = "math-display" if m.group("display") else "math-inline"
        out += [
            escape(text[last : m.start()]),
            f'<span class="math {kind}">{escape(m.group(0))}</span>',
        ]
        last = m.end()
    out.append(escape(text[last:]))
    return "".join(out)


@register.filter(name="math_text")
def math_text_filter(text: str | None) -> SafeString:
    # Safe to mark: every piece of the text went through escape().
    return mark_safe(render_math_text(str(text or "")))


@register.filter(name="markdown")
def markdown_filter(text: str | None) -> SafeString:
    if not text:
        return mark_safe("")
    # Safe to mark: render_markdown's output has been through nh3.
    return mark_safe(render_markdown(str(text)))


@register.filter
def close_fences(text: str | None) -> str:
    """Close a fenced code block that a truncated preview cut in half, so the rest of the
    preview still renders as code rather than as stray backticks."""
    if not text:
        return ""
    fences = re.findall(r"^\s*(```|~~~)", text, flags=re.MULTILINE)
    if len(fences) % 2 == 1:
        return f"{text}\n{fences[-1]}"
    return text


@register.inclusion_tag("trajectories/_trajectory_text.html")
def trajectory_text(trajectory: Any, field: str, preview_chars: int) -> dict[str, Any]:
    """The first ``preview_chars`` characters of a trajectory's task, ground truth or
    metadata, with a link that loads the rest, as steps do."""
    text = trajectory_text_full(trajectory, field)
    truncated = len(text) > preview_chars
    return {
        "trajectory": trajectory,
        "field": field,
        "text": text[:preview_chars] if truncated else text,
        "length": len(text),
        "truncated": truncated,
    }


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON for display; the template escapes it like any other text."""
    if value is None or value == "":
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


@dataclass(frozen=True)
class LabelDisplay:
    name: str
    color: str


_COLOR = re.compile(r"#[0-9a-fA-F]{3,8}")
_DEFAULT_COLOR = "#6b7280"


@register.filter
def label_display(label: Any) -> LabelDisplay:
    """A step label's value as its schema names and colours it (``bad`` in red for -1 in
    the ternary schema). The colour goes into a style attribute, so only a hex colour is
    accepted from the schema."""
    for entry in label.schema.values or []:
        if isinstance(entry, dict) and entry.get("value") == label.value:
            color = str(entry.get("color", ""))
            return LabelDisplay(
                name=str(entry.get("name") or label.value),
                color=color if _COLOR.fullmatch(color) else _DEFAULT_COLOR,
            )
    return LabelDisplay(name=str(label.value), color=_DEFAULT_COLOR)


@register.filter
def outcome_name(success: bool | None) -> str:
    if success is None:
        return "unknown"
    return "success" if success else "failure"
