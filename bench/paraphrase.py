"""Paraphrased first errors: how often "more like this step" (semantic search from a known
first-error step) lists the trajectory holding a hand-written paraphrase of that step
among its first 10, against full-text search. The method, written before measuring, is in
tests/discovery/README.md ("More like this step against full-text search"); the
paraphrases are tests/discovery/paraphrases.json.

    .venv/bin/python bench/paraphrase.py

Needs pgvector: leave DATABASE_URL unset (the embedded server has it).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from discovery import store  # noqa: E402
from discovery.services import embeddings_build  # noqa: E402
from trajectories.models import Project, Step  # noqa: E402
from trajectories.selection import selection_parse  # noqa: E402
from trajectories.selectors import trajectory_list_page  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

REALDATA = Path("/work/shared/realdata")
if not REALDATA.exists():
    REALDATA = REPO.parent / "shared" / "realdata"
PROBES = REPO / "tests" / "discovery" / "paraphrases.json"
TAU_RUNS = 50
TOP = 10
# tests/trajectories/test_formats_mapped.py's mapping of the Who&When logs.
WHO_AND_WHEN = {
    "id": "question_ID",
    "task": "question",
    "ground_truth": "ground_truth",
    "steps": "history",
    "step": {"content": "content", "role": "role", "agent": "name"},
    "first_error_index": "mistake_step",
    "metadata": ["mistake_agent", "mistake_step", "mistake_reason"],
    "labelable": {
        "agents": "*",
        "input_agents": ["Computer_terminal"],
        "input_roles": ["human", "system", "user", "tool"],
    },
}
OUTCOME = {"Algorithm-Generated": "is_correct", "Hand-Crafted": "is_corrected"}
PARAPHRASE_MAPPING = {"id": "id", "task": "task", "steps": "steps", "step": {"content": "text"}}


def _json_file(rows: Any) -> Path:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as part:
        json.dump(rows, part)
    return Path(part.name)


def haystack(project: Project, probes: list[dict[str, Any]]) -> None:
    trajectory_import(
        project=project,
        source_format="processbench",
        path=REALDATA / "processbench" / "gsm8k.json",
    )
    tau = json.loads((REALDATA / "tau_bench" / "gpt-4o-airline.json").read_text())[:TAU_RUNS]
    path = _json_file(tau)
    trajectory_import(project=project, source_format="openai-messages", path=path)
    path.unlink()
    for probe in probes:
        if probe["source"] == "who_and_when":
            mapping = {**WHO_AND_WHEN, "outcome": OUTCOME[probe["record"].split("/")[0]]}
            trajectory_import(
                project=project,
                source_format="mapped",
                path=REALDATA / "multiagent_who_and_when" / probe["record"],
                mapping=mapping,
            )
    rows = [
        {"id": f"paraphrase-{i}", "task": "", "steps": [{"text": probe["paraphrase"]}]}
        for i, probe in enumerate(probes)
    ]
    path = _json_file(rows)
    trajectory_import(
        project=project, source_format="mapped", path=path, mapping=PARAPHRASE_MAPPING
    )
    path.unlink()


def original_text(probe: dict[str, Any]) -> str:
    if probe["source"] == "processbench":
        records = json.loads((REALDATA / "processbench" / "gsm8k.json").read_text())
        record = next(r for r in records if r["id"] == probe["record"])
        return str(record["steps"][probe["step"]])
    log = json.loads((REALDATA / "multiagent_who_and_when" / probe["record"]).read_text())
    return str(log["history"][int(log["mistake_step"])]["content"])


def semantic_top(project: Project, step_id: int) -> list[int]:
    rows, _ = trajectory_list_page(project, selection_parse({"similar_step": str(step_id)}))
    return [row.pk for row in rows[:TOP]]


def fulltext_top(project: Project, step_id: int, text: str, *, any_word: bool) -> list[int]:
    """The trajectories of the steps best ranked against the step's words (any of them,
    or all of them as the list's ``q``), each at its best step, the step itself left out."""
    query = (
        "to_tsquery('english', replace(plainto_tsquery('english', %s)::text, '&', '|'))"
        if any_word
        else "websearch_to_tsquery('english', %s)"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT s.trajectory_id, max(ts_rank_cd(to_tsvector('english', s.content), q)) r
            FROM trajectories_step s JOIN trajectories_trajectory t ON t.id = s.trajectory_id,
                {query} q
            WHERE t.project_id = %s AND s.id <> %s
                AND to_tsvector('english', s.content) @@ q
            GROUP BY s.trajectory_id ORDER BY r DESC, s.trajectory_id LIMIT %s""",
            [text, project.pk, step_id, TOP],
        )
        return [int(row[0]) for row in cursor.fetchall()]


def main() -> None:
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    if not store.pgvector_available() and not store.vector_tables_ensure():
        raise SystemExit(store.PGVECTOR_MISSING)
    probes = json.loads(PROBES.read_text())["probes"]
    old = Project.objects.filter(slug="bench-paraphrase").first()
    if old is not None:
        project_drop(old)
    project = project_create(slug="bench-paraphrase", name="bench-paraphrase")
    start = time.perf_counter()
    haystack(project, probes)
    imported = time.perf_counter() - start
    start = time.perf_counter()
    built = embeddings_build(project_id=project.pk)
    embedded = time.perf_counter() - start
    steps = Step.objects.filter(trajectory__project=project)
    results = []
    for i, probe in enumerate(probes):
        target = steps.get(trajectory__external_id=f"paraphrase-{i}").trajectory_id
        text = original_text(probe)
        original = (
            steps.filter(content=text).exclude(trajectory__external_id__startswith="paraphrase-")
        ).first()
        assert original is not None, f"no step holds the first error of {probe['record']}"
        found = {
            "semantic": semantic_top(project, original.pk),
            "fulltext_any_word": fulltext_top(project, original.pk, text, any_word=True),
            "fulltext_q": fulltext_top(project, original.pk, text, any_word=False),
        }
        ranks = {
            name: (ids.index(target) + 1 if target in ids else None) for name, ids in found.items()
        }
        results.append({"source": probe["source"], "record": probe["record"], **ranks})
    figures: dict[str, Any] = {
        "steps": steps.count(),
        "steps_embedded": built.steps,
        "import_s": round(imported, 1),
        "embed_s": round(embedded, 1),
        "probes": len(results),
    }
    for source in ("processbench", "who_and_when", None):
        chosen = [r for r in results if source is None or r["source"] == source]
        figures[f"hits in top {TOP} ({source or 'all'})"] = {
            name: f"{sum(r[name] is not None for r in chosen)}/{len(chosen)}"
            for name in ("semantic", "fulltext_any_word", "fulltext_q")
        }
    print("per probe (rank of the paraphrase's trajectory, None: not in the top 10):")
    for row in results:
        print(" ", json.dumps(row))
    print("figures:", json.dumps(figures, indent=2))
    project_drop(project)


if __name__ == "__main__":
    main()
