"""How long a 1,000-step trajectory page takes to open in Chromium, with its math typeset
by KaTeX and without (the page as it was before math rendered: KaTeX's script blocked, so
the TeX stays source).

    .venv/bin/python bench/page_open.py                 # 1,000 steps, 7 loads of each
    .venv/bin/python bench/page_open.py --steps 1000 --repeat 11

Writes a throwaway project (``bench-page-<time>``) whose one trajectory has ``--steps``
ProcessBench steps (real chain-of-thought text, two in three with TeX), starts the web
server (``manage.py runserver --noreload`` on a free port, DEBUG off, static files from
whitenoise) against the configured database, signs in and loads the trajectory page
``--repeat`` times each way, alternating. Prints, per way, the median and the range of:
the load event, and (with math) the moment the last formula was typeset, counted from
the start of navigation. The ratio is with-math over without. The project and the bench
user are dropped at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402

from trajectories.models import Membership, Project, Trajectory  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

PROCESSBENCH = ROOT.parent / "shared" / "realdata" / "processbench" / "gsm8k.json"
PASSWORD = "bench-page-pw"


def trajectory_make(project: Project, steps: int, folder: Path) -> Trajectory:
    """One ProcessBench record of ``steps`` real steps, through the importer."""
    records = json.loads(PROCESSBENCH.read_text())
    texts = [s for record in records for s in record["steps"]]
    record = {**records[0], "id": "bench", "label": -1}
    record["steps"] = list(itertools.islice(itertools.cycle(texts), steps))
    path = folder / "bench.json"
    path.write_text(json.dumps([record]))
    trajectory_import(project=project, source_format="processbench", path=path)
    return Trajectory.objects.get(project=project)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_start(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STEPSCOPE_DEBUG": "0"}
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.1)  # polling for the port, not synchronising work
    server.kill()
    raise SystemExit("the web server did not start")


def load(page: Any, url: str, *, math: bool) -> tuple[float, float]:
    """(load event, last formula typeset) in ms from the start of navigation."""
    page.goto(url, wait_until="load")
    loaded = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    if not math:
        return float(loaded), float(loaded)
    page.wait_for_function(
        "document.querySelectorAll('span.math').length > 0"
        " && document.querySelectorAll('span.math:not([data-typeset])').length === 0",
        polling="raf",
    )
    return float(loaded), float(page.evaluate("performance.now()"))


def summary(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"median {statistics.median(values):.0f} ms (range {low:.0f} to {high:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(
        f"command: .venv/bin/python bench/page_open.py --steps {args.steps} --repeat {args.repeat}"
    )

    import playwright.sync_api as playwright_api

    slug = f"bench-page-{int(time.time())}"
    project = project_create(slug=slug, name="Bench page")
    user = User.objects.create_user(username=slug, password=PASSWORD)
    Membership.objects.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    port = free_port()
    server = None
    try:
        with tempfile.TemporaryDirectory() as folder:
            trajectory = trajectory_make(project, args.steps, Path(folder))
        shown = trajectory.steps.order_by("index").values_list("content", flat=True)[:200]
        math_spans = sum(content.count("\\(") for content in shown)
        server = server_start(port)
        base = f"http://127.0.0.1:{port}"
        url = f"{base}/t/{trajectory.pk}/"
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=shutil.which("chromium"),
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            with_math = browser.new_page(viewport={"width": 1440, "height": 900})
            without = browser.new_page(viewport={"width": 1440, "height": 900})
            without.route("**/katex.min.js", lambda route: route.abort())
            for page in (with_math, without):
                page.goto(base + "/login/")
                page.fill("input[name=username]", slug)
                page.fill("input[name=password]", PASSWORD)
                page.click("button[type=submit]")
                page.wait_for_url(base + "/")
                load(page, url, math=page is with_math)  # warm: caches, the server's first hit
            runs: dict[str, list[tuple[float, float]]] = {"math": [], "plain": []}
            for _ in range(args.repeat):
                runs["math"].append(load(with_math, url, math=True))
                runs["plain"].append(load(without, url, math=False))
            browser.close()
    finally:
        if server is not None:
            server.kill()
            server.wait()
        project.delete()
        user.delete()

    plain_load = [r[0] for r in runs["plain"]]
    math_load = [r[0] for r in runs["math"]]
    math_done = [r[1] for r in runs["math"]]
    print(f"page: {args.steps} steps, the first 200 shown, {math_spans} inline formulas among them")
    print(f"without math: load {summary(plain_load)}")
    print(f"with math:    load {summary(math_load)}; last formula typeset {summary(math_done)}")
    ratio = statistics.median(math_done) / statistics.median(plain_load)
    print(f"ratio (typeset / plain load, medians): {ratio:.2f}")
    print(json.dumps({"plain_load": plain_load, "math_load": math_load, "math_done": math_done}))


if __name__ == "__main__":
    main()
