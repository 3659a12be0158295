"""The template filters that render untrusted step text."""

from __future__ import annotations

from types import SimpleNamespace

from labeling.models import TERNARY_VALUES
from trajectories.templatetags.step_rendering import (
    close_fences,
    label_display,
    markdown_filter,
    outcome_name,
    pretty_json,
)


def test_markdown_renders_code_tables_and_links() -> None:
    html = markdown_filter(
        "Run:\n\n```python\nprint('<hi>')\n```\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n"
        "[docs](https://example.com)"
    )
    assert "<pre><code class=\"language-python\">print('&lt;hi&gt;')" in html
    assert "<table>" in html and '<td align="right">2</td>' in html
    assert '<a href="https://example.com" rel="noopener noreferrer">docs</a>' in html


def test_markdown_shows_raw_html_as_text() -> None:
    html = markdown_filter('<b>bold</b> <img src=x onerror=alert(1)> <a href="javascript:x">y</a>')
    assert "<b>" not in html and "<img" not in html and "<a " not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_markdown_drops_javascript_urls() -> None:
    html = markdown_filter(
        "[x](javascript:alert(1)) [y](JaVaScRiPt:alert(1)) ![z](https://t.example/p.png)"
    )
    assert "javascript" not in html.lower()
    assert "<img" not in html


def test_markdown_keeps_latex_backslashes() -> None:
    html = markdown_filter(r"So \(x^2 = 4\) and \\ \frac{1}{2}")
    assert r"\(x^2 = 4\)" in html
    assert r"\\ \frac{1}{2}" in html


def test_close_fences_closes_a_cut_code_block() -> None:
    assert close_fences("text\n```python\nx = 1") == "text\n```python\nx = 1\n```"
    assert close_fences("```\nx\n```") == "```\nx\n```"
    html = markdown_filter(close_fences("```\nx = [1,\n"))
    assert "<pre><code>x = [1," in html


def test_label_display_uses_the_schema_names_and_only_hex_colours() -> None:
    schema = SimpleNamespace(values=TERNARY_VALUES)
    assert label_display(SimpleNamespace(value=-1, schema=schema)).name == "bad"
    assert label_display(SimpleNamespace(value=1, schema=schema)).color == "#2f9e44"
    hostile = SimpleNamespace(values=[{"value": 1, "name": "ok", "color": "red;background:url(x)"}])
    assert label_display(SimpleNamespace(value=1, schema=hostile)).color == "#6b7280"
    assert label_display(SimpleNamespace(value=5, schema=schema)).name == "5"


def test_pretty_json_and_outcome_name() -> None:
    assert pretty_json({"q": "ü"}) == '{\n  "q": "ü"\n}'
    assert pretty_json(None) == ""
    assert [outcome_name(v) for v in (True, False, None)] == ["success", "failure", "unknown"]
