"""The template filters that render untrusted step text."""

from __future__ import annotations

from types import SimpleNamespace

from labeling.models import TERNARY_VALUES
from trajectories.templatetags.step_rendering import (
    close_fences,
    label_display,
    markdown_filter,
    math_text_filter,
    outcome_name,
    pretty_json,
)


def test_markdown_renders_code_tables_and_links() -> None:
    html = markdown_filter(
        "Run:\n\n```python\nprint('<hi>')\n```\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n"
        "[docs](https://example.com)"
    )
    # Highlighted by Pygments: the tokens carry its classes, the text stays escaped.
    assert '<span class="nb">print</span><span class="p">(</span>' in html
    assert "&lt;hi&gt;" in html and "<hi>" not in html
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


def test_tex_spans_are_kept_whole_for_the_browser_to_typeset() -> None:
    # ProcessBench's display math, and inline math whose _ and * markdown would eat.
    html = markdown_filter(
        r"Food: \[ \text{Food} = 1 \text{ cup/day} \times 180 \] and \(a_1 * b_1\), "
        r"$x_1 * x_2$ and $$\frac{a_1}{b_1}$$."
    )
    assert (
        r'<span class="math math-display">\[ \text{Food} = 1 \text{ cup/day} \times 180 \]</span>'
        in html
    )
    assert r'<span class="math math-inline">\(a_1 * b_1\)</span>' in html
    assert r'<span class="math math-inline">$x_1 * x_2$</span>' in html
    assert r'<span class="math math-display">$$\frac{a_1}{b_1}$$</span>' in html
    assert "<em>" not in html


def test_money_and_code_are_not_math() -> None:
    html = markdown_filter("It costs $5 and $10. Use `$x$` literally.")
    assert "math" not in html
    assert "<code>$x$</code>" in html


def test_tex_is_escaped_and_cannot_smuggle_markup() -> None:
    html = markdown_filter(r"$a<b$ and $\href{javascript:alert(1)}{x}</span><img src=x>$")
    assert '<span class="math math-inline">$a&lt;b$</span>' in html
    assert "<img" not in html and "</span><img" not in html


def test_plain_text_gets_its_math_marked_and_the_rest_escaped() -> None:
    assert math_text_filter("so $x<y$ <b>") == (
        'so <span class="math math-inline">$x&lt;y$</span> &lt;b&gt;'
    )
    assert math_text_filter(None) == ""
