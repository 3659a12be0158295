"""``import_trajectories --follow DIR``: each new or grown file imported once, a JSON
Lines file's appended lines only (a line still being written waits), across restarts of
the command and a crash in the middle of an import; what it follows and how far it got
on the project page."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from trajectories.models import FollowedFile, Project, Step, Trajectory
from trajectories.services import follow as follow_service
from trajectories.services import follow_pass_run, follow_source_set

pytestmark = pytest.mark.django_db


def line(step: int, n: int) -> str:
    """One line of a verl rollout dump."""
    record = {
        "input": f"prompt {n % 2}",
        "output": f"answer {step}.{n}",
        "gts": "1",
        "score": float(n % 2),
        "step": step,
    }
    return json.dumps(record) + "\n"


def follow_once(folder: Path, *extra: str, fmt: str = "verl") -> dict[str, Any]:
    out, err = StringIO(), StringIO()
    try:
        call_command(
            "import_trajectories",
            "--project",
            "rl",
            "--create",
            "--format",
            fmt,
            "--follow",
            str(folder),
            "--once",
            *extra,
            stdout=out,
            stderr=err,
        )
    except SystemExit as exit_:
        assert exit_.code == 1
    summary: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    summary["stderr"] = err.getvalue()
    return summary


def outputs(project_slug: str = "rl") -> list[str]:
    answers = Step.objects.filter(trajectory__project__slug=project_slug, index=1)
    return sorted(answers.values_list("content", flat=True))


def test_new_files_then_appended_lines_are_imported_once(tmp_path: Path) -> None:
    (tmp_path / "1.jsonl").write_text(line(1, 0) + line(1, 1))
    (tmp_path / "2.jsonl").write_text(line(2, 0))

    first = follow_once(tmp_path)
    assert (first["files"], first["imported"], first["created"]) == (2, ["1.jsonl", "2.jsonl"], 3)
    # Nothing changed: nothing is imported (not even looked into).
    again = follow_once(tmp_path)
    assert (again["imported"], again["created"], again["unchanged"]) == ([], 0, 0)

    # The trainer appends a line and is in the middle of the next one.
    with (tmp_path / "2.jsonl").open("a") as handle:
        handle.write(line(2, 1) + line(2, 2)[:20])
    grown = follow_once(tmp_path)
    assert (grown["imported"], grown["created"], grown["unchanged"]) == (["2.jsonl"], 1, 0)
    row = FollowedFile.objects.get(path="2.jsonl")
    assert row.imported_lines == 2
    assert row.imported_bytes == len((line(2, 0) + line(2, 1)).encode())
    assert row.seen_size > row.imported_bytes

    # The line is finished: only it comes in; its line number is the file's own.
    with (tmp_path / "2.jsonl").open("a") as handle:
        handle.write(line(2, 2)[20:])
    finished = follow_once(tmp_path)
    assert (finished["created"], finished["unchanged"]) == (1, 0)
    assert Trajectory.objects.filter(external_id="step-2:3").count() == 1
    assert outputs() == ["answer 1.0", "answer 1.1", "answer 2.0", "answer 2.1", "answer 2.2"]


def test_a_restart_after_a_crash_in_an_import_imports_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "1.jsonl").write_text(line(1, 0) + line(1, 1))
    follow_once(tmp_path)
    with (tmp_path / "1.jsonl").open("a") as handle:
        handle.write(line(1, 2) + line(1, 3))
    real_import = follow_service.trajectory_import

    def killed_after_writing(**kwargs: Any) -> Any:
        real_import(**kwargs)
        raise KeyboardInterrupt("the follower is killed after the rows went in")

    monkeypatch.setattr(follow_service, "trajectory_import", killed_after_writing)
    with pytest.raises(KeyboardInterrupt):
        follow_once(tmp_path)
    monkeypatch.undo()
    # The rows and the file's progress were one transaction: neither stayed.
    assert Trajectory.objects.count() == 2
    assert FollowedFile.objects.get(path="1.jsonl").imported_lines == 2

    restarted = follow_once(tmp_path)
    assert (restarted["created"], restarted["unchanged"]) == (2, 0)
    assert outputs() == ["answer 1.0", "answer 1.1", "answer 1.2", "answer 1.3"]
    assert follow_once(tmp_path)["created"] == 0


def test_a_rewritten_file_is_imported_whole_and_adds_only_what_is_new(tmp_path: Path) -> None:
    path = tmp_path / "1.jsonl"
    path.write_text(line(1, 0) + line(1, 1))
    follow_once(tmp_path)
    path.write_text(line(1, 1) + line(1, 5))  # not an append: its first bytes differ
    rewritten = follow_once(tmp_path)
    # Line 1 now holds 1.1 (a new external id, so a new trajectory) and line 2 holds 1.5.
    assert rewritten["imported"] == ["1.jsonl"]
    assert FollowedFile.objects.get(path="1.jsonl").imported_lines == 2


def test_a_bad_line_is_reported_and_retried_once_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "1.jsonl"
    path.write_text(line(1, 0))
    follow_once(tmp_path)
    with path.open("a") as handle:
        handle.write('{"input": "p", "score": 1, "step": 1}\n')
    failed = follow_once(tmp_path)
    assert failed["failed"] == ["1.jsonl"]
    assert "line 2, field 'output': is missing" in failed["stderr"]
    row = FollowedFile.objects.get(path="1.jsonl")
    assert (row.imported_lines, row.error) == (1, "line 2, field 'output': is missing")
    # Unchanged, it is not tried again.
    assert follow_once(tmp_path)["failed"] == []
    path.write_text(line(1, 0) + line(1, 1))
    fixed = follow_once(tmp_path)
    assert (fixed["imported"], fixed["created"], fixed["unchanged"]) == (["1.jsonl"], 1, 0)
    assert FollowedFile.objects.get(path="1.jsonl").error == ""


def test_parquet_tables_are_followed_file_by_file(tmp_path: Path) -> None:
    def table(step: int) -> None:
        rows = {
            "step": [step],
            "prompt": ["p"],
            "completion": [f"c{step}"],
            "r": [1.0],
            "advantage": [0.0],
        }
        pq.write_table(pa.table(rows), tmp_path / f"completions_{step:05d}.parquet")

    table(1)
    assert follow_once(tmp_path, fmt="trl-completions")["created"] == 1
    table(2)
    second = follow_once(tmp_path, fmt="trl-completions")
    assert (second["imported"], second["created"]) == (["completions_00002.parquet"], 1)


def test_the_command_refuses_what_it_cannot_follow(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not a folder"):
        call_command(
            "import_trajectories",
            "--project",
            "rl",
            "--create",
            "--format",
            "verl",
            "--follow",
            str(tmp_path / "missing"),
            "--once",
        )
    with pytest.raises(CommandError, match="not both"):
        call_command(
            "import_trajectories",
            "--project",
            "rl",
            "--create",
            "--format",
            "verl",
            "--follow",
            str(tmp_path),
            str(tmp_path / "x.jsonl"),
        )
    with pytest.raises(CommandError, match="goes with --follow"):
        call_command(
            "import_trajectories",
            "--project",
            "rl",
            "--create",
            "--format",
            "verl",
            "--once",
            str(tmp_path),
        )


def test_the_project_page_shows_what_is_followed_and_how_far(
    project: Project, annotator: User, tmp_path: Path
) -> None:
    (tmp_path / "1.jsonl").write_text(line(1, 0) + line(1, 1) + line(1, 2)[:10])
    source = follow_source_set(project=project, path=tmp_path, source_format="verl")
    follow_pass_run(source=source)
    client = Client()
    client.force_login(annotator)
    html = client.get(reverse("project-home", args=[project.slug])).content.decode()
    assert 'id="follow-sources"' in html
    assert str(tmp_path.resolve()) in html
    assert re.search(r"1 file\s+·\s+2 trajectories imported", html)
    row = FollowedFile.objects.get(source=source)
    assert f'<td class="num">{row.imported_bytes} of {row.seen_size}</td>' in html
    assert "line being written" in html
