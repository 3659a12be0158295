"""The import helper's modules compiled with mypyc: built for the sources as they are,
used only while those sources are unchanged, and giving the chunks plain Python gives,
errors included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trajectories import compiled, prepare, synthetic

# One worker runs the whole module, so two never build into one directory at once.
pytestmark = pytest.mark.xdist_group("compiled")


@pytest.fixture(scope="module")
def build() -> Path:
    # `make install` builds it; a checkout without one builds it here (seconds).
    return compiled.build()


def test_a_build_is_used_only_for_the_sources_it_was_built_from(
    build: Path, tmp_path: Path
) -> None:
    assert build == compiled.build_dir()
    assert {p.name for p in build.glob("trajectories/**/*.so")} >= {
        f"{name.rsplit('.', 1)[1]}{compiled._SUFFIX}" for name in compiled.MODULES
    }
    copy = tmp_path / "checkout"
    for name in compiled.MODULES:
        source = compiled._source(compiled.ROOT, name)
        target = copy / source.relative_to(compiled.ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    assert compiled.sources_digest(copy) == compiled.sources_digest()
    edited = compiled._source(copy, "trajectories.hashing")
    edited.write_text(edited.read_text() + "\n# an edit\n")
    assert compiled.sources_digest(copy) != compiled.sources_digest()


@pytest.mark.usefixtures("build")
def test_the_helper_loads_the_compiled_modules_for_stepscope_only() -> None:
    probe = (
        "import sys; from trajectories import compiled; used = compiled.use(sys.argv[1]);"
        " from trajectories import hashing, pgcopy; from trajectories.formats import base,"
        " jsonio, stepscope; print(used, [m.__file__.endswith('.py') for m in"
        " (hashing, pgcopy, base, jsonio, stepscope)])"
    )
    expected = {
        "stepscope": "True [False, False, False, False, False]",
        "openai-messages": "False [True, True, True, True, True]",
    }
    for source_format, loaded in expected.items():
        done = subprocess.run(
            [sys.executable, "-c", probe, source_format],
            cwd=compiled.ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == loaded


def damaged_and_varied_records() -> list[str]:
    """Lines that take every path of the parser: plain and labelled steps, metadata,
    tool arguments, text that needs escaping, and broken records of several kinds."""
    records: list[dict[str, Any]] = list(synthetic.rollouts(tasks=8, rollouts_per_task=3, seed=2))
    records[1]["steps"][0]["metadata"] = {"tokens": [1, 2, 3], "note": "tab\there"}
    records[2]["steps"][1].update(kind="tool_call", tool_name="calc", tool_args={"x": 1.5})
    records[3]["steps"][0]["content"] = "back\\slash, new\nline, ünïcödé, emoji 🙂"
    records[4]["outcome"] = {"reward": 1, "success": True}
    records[5]["metadata"] = {"big": 2**70, "nested": {"a": [None, False]}}
    lines = [json.dumps(record, ensure_ascii=False) for record in records]
    lines[6] = lines[6].replace('"kind"', '"knd"', 1)  # unknown field
    lines[7] = lines[7].replace('"content": "', '"content": 7, "x": "', 1)  # wrong type
    lines[8] = lines[8][:-5]  # truncated JSON
    lines[9] = lines[9].replace('"content": "', '"content": "nul \\u0000 ', 1)  # unstorable
    return lines


@pytest.mark.usefixtures("build")
def test_the_compiled_helper_gives_the_chunks_plain_python_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(damaged_and_varied_records()) + "\n", encoding="utf-8")
    monkeypatch.setattr(prepare, "CHUNK_TRAJECTORIES", 4)
    monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", 1 << 40)
    with prepare.file_chunks(path, "stepscope") as chunks:
        here = list(chunks)
    monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", 0)
    with prepare.file_chunks(path, "stepscope") as chunks:
        there = list(chunks)
    errors = [item for chunk in here for item in chunk if isinstance(item, prepare.RecordError)]
    assert [error.location for error in errors] == ["line 7", "line 8", "line 9", "line 10"]
    assert len(here) == 6
    assert there == here
