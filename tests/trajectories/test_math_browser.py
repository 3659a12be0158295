"""Math in real ProcessBench steps, typeset by KaTeX from our own static files in a real
browser, under our Content-Security-Policy, with the TeX source kept for copying."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.conftest import REALDATA
from tests.factories import MembershipFactory, UserFactory
from tests.screens import shot
from trajectories.models import Membership, Step, Trajectory
from trajectories.services import project_create, trajectory_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
INLINE = re.compile(r"\\\((.+?)\\\)", re.DOTALL)


def test_processbench_math_is_typeset_and_its_source_kept(
    page: Any, live_server: Any, tmp_path: Any
) -> None:
    records = json.loads((REALDATA / "processbench" / "gsm8k.json").read_text())[:5]
    path = tmp_path / "gsm8k-5.json"
    path.write_text(json.dumps(records))
    project = project_create(slug="math", name="Math")
    trajectory_import(project=project, source_format="processbench", path=path)
    trajectory = Trajectory.objects.get(project=project, external_id=str(records[0]["id"]))
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    wanted = [(step, INLINE.findall(step.content)) for step in steps]
    tex = [source for _, sources in wanted for source in sources]
    assert len(tex) >= 4  # the flamingo sums: \(1/3 \times 18 = 6\), ...

    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    # A request the browser dropped because the page went on to the next one (the login
    # page's favicon as the test navigates) is no failure; a refused one (CSP, a
    # connection error) is.
    page.on(
        "requestfailed",
        lambda r: (
            None if r.failure == "net::ERR_ABORTED" else problems.append(f"{r.url} {r.failure}")
        ),
    )
    sign_in(page, live_server, "reader", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector("span.math[data-typeset] .katex")
    page.locator(f"#step-{steps[1].pk}").scroll_into_view_if_needed()
    shot(page, "math-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator(f"#step-{steps[1].pk}").scroll_into_view_if_needed()
    shot(page, "math-390")

    for step, sources in wanted:
        got = page.eval_on_selector_all(
            f"#step-{step.pk} span.math",
            """spans => spans.map(s => [
                s.classList.contains('math-error'),
                s.querySelector('annotation[encoding="application/x-tex"]')?.textContent ?? null,
                s.querySelector('.katex-html')?.getBoundingClientRect().width ?? 0,
            ])""",
        )
        # Every span typeset (laid out, so KaTeX's styles were allowed), no error, and the
        # TeX source inside each, which copy-tex puts on the clipboard.
        assert [(error, annotation.strip()) for error, annotation, _ in got] == [
            (False, source.strip()) for source in sources
        ]
        assert all(width > 0 for _, _, width in got)
    # The fonts came from our static files; nothing was refused or failed to load.
    fonts = page.evaluate(
        "performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('KaTeX_'))"
    )
    assert fonts and all(
        name.startswith(live_server.url + "/static/vendor/katex/") for name in fonts
    )
    assert problems == []
