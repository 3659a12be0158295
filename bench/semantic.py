"""Semantic search: embedding throughput through the worker's path against a bare encoder
loop in the same process, and the latency of a semantic query with a filter, with what the
vectors and their HNSW index cost in disk and build time.

    .venv/bin/python bench/semantic.py                     # 200,000 vectors, 7 warm runs
    .venv/bin/python bench/semantic.py --vectors 1000000   # the issue's size (slow to build)

Needs pgvector: leave DATABASE_URL unset (the embedded server has it) or point it at a
server that has the extension.

Throughput: ProcessBench's GSM8K file (``../shared/realdata/processbench/gsm8k.json``,
2,082 steps of real text) is imported through the real import path; the bare loop is
``TextEncoder.encode`` over the same step texts; the worker's path is
``embeddings_build`` (what the ``discovery.embed`` task runs: read the steps without a
vector, encode, write to pgvector, a chunk at a time). Both share one loaded encoder and
run after a warm-up, in this process, ``--rounds`` times each, alternating which goes
first; the median of the rounds' ratios is the figure.

Latency: ``--vectors`` steps (10 a trajectory, a quarter of trajectories failures) are
written by SQL with random 384-wide vectors (no encoder: a million steps would take
about an hour to embed on this machine's CPU), the HNSW index is built and timed, and the
trajectory list's first page (``trajectory_list_page``: 50 rows, every column) is asked
for with ``similar_step=`` (the step's stored vector; no encoding) and with ``similar=``
(the query text encoded in the request) together with ``outcome=failure``. Random vectors
have no clusters, which is HNSW's hard case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
from discovery.encoder import encoder_get  # noqa: E402
from discovery.services import (  # noqa: E402
    embedding_model_current,
    embeddings_build,
    encoder_configured,
    step_text,
)
from trajectories.models import Project, Step  # noqa: E402
from trajectories.selection import selection_parse  # noqa: E402
from trajectories.selectors import trajectory_list_page  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

PROCESSBENCH = REPO.parent / "shared" / "realdata" / "processbench" / "gsm8k.json"
FALLBACK = "/work/shared/realdata/processbench/gsm8k.json"


def fresh_project(slug: str) -> Project:
    old = Project.objects.filter(slug=slug).first()
    if old is not None:
        project_drop(old)
    return project_create(slug=slug, name=slug)


def throughput(records: int, rounds: int) -> dict[str, Any]:
    project = fresh_project("bench-semantic-text")
    source = PROCESSBENCH if PROCESSBENCH.exists() else Path(FALLBACK)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as part:
        json.dump(json.loads(source.read_text())[:records], part)
    trajectory_import(project=project, source_format="processbench", path=Path(part.name))
    os.unlink(part.name)
    steps = list(
        Step.objects.filter(trajectory__project=project)
        .order_by("id")
        .values_list("content", "tool_name", "tool_args")
    )
    # The same texts as the worker's pass: every step, then every task.
    texts = [step_text(*row) for row in steps]
    texts += [t for t in project.trajectories.values_list("task", flat=True) if t]
    encoder = encoder_get(encoder_configured())
    model = embedding_model_current(create=True)
    assert model is not None
    encoder.encode(texts[:256])  # warm-up: weights paged in, kernels chosen

    def bare() -> float:
        start = time.perf_counter()
        encoder.encode(texts)
        return len(texts) / (time.perf_counter() - start)

    def worker() -> float:
        with connection.cursor() as cursor:  # the project's vectors gone: all built again
            for table in (store.STEP_TABLE, store.TASK_TABLE):
                cursor.execute(
                    f"DELETE FROM {table} v USING trajectories_trajectory t"
                    " WHERE t.id = v.trajectory_id AND t.project_id = %s AND v.model_id = %s",
                    [project.pk, model.pk],
                )
        start = time.perf_counter()
        built = embeddings_build(project_id=project.pk)
        assert built.steps + built.tasks == len(texts), (built, len(texts))
        return len(texts) / (time.perf_counter() - start)

    # Rounds alternate which side goes first, so a load that changes while they run
    # falls on both; each round's ratio is the worker's rate over the bare loop's.
    rates: dict[str, list[float]] = {"bare": [], "worker": []}
    for round_number in range(rounds):
        for side in ("bare", "worker")[:: 1 if round_number % 2 == 0 else -1]:
            rates[side].append(bare() if side == "bare" else worker())
    ratios = [w / b for w, b in zip(rates["worker"], rates["bare"], strict=True)]
    figures = {
        "texts": len(texts),
        "rounds": rounds,
        "bare_texts_per_s": [round(rate, 1) for rate in rates["bare"]],
        "worker_texts_per_s": [round(rate, 1) for rate in rates["worker"]],
        "ratios": [round(ratio, 3) for ratio in ratios],
        "ratio_median": round(statistics.median(ratios), 3),
    }
    project_drop(project)
    return figures


def _kept(vectors: int) -> Project | None:
    """The scale project of an earlier ``--keep`` run with as many steps, to measure again
    without writing and indexing the vectors again."""
    project = Project.objects.filter(slug="bench-semantic-scale").first()
    if project is None:
        return None
    if Step.objects.filter(trajectory__project=project).count() != vectors // 10 * 10:
        project_drop(project)
        return None
    return project


def _write(project: Project, model: Any, trajectories: int) -> dict[str, Any]:
    """The trajectories, steps and random vectors, and the HNSW index, timed."""
    timings: dict[str, Any] = {}
    with connection.cursor() as cursor:
        start = time.perf_counter()
        cursor.execute(
            """INSERT INTO trajectories_trajectory (external_id, source_format, task_key, task,
                ground_truth, model_name, metadata, step_count, content_hash, created_at,
                project_id, success, policy_version)
            SELECT 'b-' || g, 'stepscope', 'task-' || mod(g, 100), 'task ' || g, '',
                'model-' || mod(g, 4), '{}', 10, md5(g::text), now(), %s, mod(g, 4) <> 0, ''
            FROM generate_series(1, %s) g""",
            [project.pk, trajectories],
        )
        cursor.execute(
            """INSERT INTO trajectories_step (index, kind, role, agent, content, tool_name,
                metadata, labelable, prefix_hash, trajectory_id, policy_version)
            SELECT i, 'thought', 'assistant', '', 'step ' || i, '', '{}', true,
                md5(t.id || '-' || i), t.id, ''
            FROM trajectories_trajectory t, generate_series(0, 9) i
            WHERE t.project_id = %s""",
            [project.pk],
        )
        timings["rows_written_s"] = round(time.perf_counter() - start, 1)
        cursor.execute(f"DROP INDEX IF EXISTS {store.STEP_TABLE}_hnsw_{model.pk}")
        start = time.perf_counter()
        cursor.execute(
            f"""INSERT INTO {store.STEP_TABLE} (model_id, step_id, trajectory_id, embedding)
            SELECT %s, s.id, s.trajectory_id, r.v::vector
            FROM trajectories_step s JOIN trajectories_trajectory t ON t.id = s.trajectory_id
            CROSS JOIN LATERAL (
                -- Correlated (the WHERE names the step), so drawn again for each step.
                SELECT array_agg(random() - 0.5) AS v FROM generate_series(1, %s)
                WHERE s.id IS NOT NULL) r
            WHERE t.project_id = %s""",
            [model.pk, model.dim, project.pk],
        )
        timings["vectors_written_s"] = round(time.perf_counter() - start, 1)
        # The graph built in memory: about 2 GB a million vectors (a build that spills
        # is many times slower).
        build_memory_mb = max(1024, trajectories * 10 * 2500 // 2**20)
        cursor.execute(f"SET maintenance_work_mem = '{build_memory_mb}MB'")
        start = time.perf_counter()
        store.vector_index_ensure(model.pk, model.dim)
        timings["hnsw_build_s"] = round(time.perf_counter() - start, 1)
        cursor.execute("ANALYZE trajectories_trajectory, trajectories_step")
        cursor.execute(f"ANALYZE {store.STEP_TABLE}")
    return timings


def _explain(project: Project, model: Any, vector: str, given: dict[str, str]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the nearest-steps query a semantic filter runs."""
    from django.db import transaction

    from discovery import selectors
    from trajectories.selectors import trajectories_filtered

    among = trajectories_filtered(project, selection_parse(given))
    sql, params = selectors.nearest_query(model, vector, among, with_tasks=False)
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in selectors.nearest_settings():
            cursor.execute(setting)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def synthetic(
    vectors: int, repeat: int, *, keep: bool = False, explain: bool = False
) -> dict[str, Any]:
    model = embedding_model_current(create=True)
    assert model is not None
    kept = _kept(vectors) if keep else None
    project = kept or fresh_project("bench-semantic-scale")
    timings = {"reused": True} if kept else _write(project, model, vectors // 10)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {store.STEP_TABLE} WHERE model_id = %s", [model.pk])
        stored = int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT pg_total_relation_size(%s) - pg_indexes_size(%s), pg_relation_size(%s)",
            [store.STEP_TABLE, store.STEP_TABLE, f"{store.STEP_TABLE}_hnsw_{model.pk}"],
        )
        table_bytes, index_bytes = cursor.fetchone()
    step_id = Step.objects.filter(trajectory__project=project).order_by("id").values("id")[0]["id"]
    queries = {
        "baseline: outcome=failure alone": {"outcome": "failure"},
        "similar_step + outcome=failure": {"similar_step": str(step_id), "outcome": "failure"},
        "similar (text) + outcome=failure": {
            "similar": "the agent gave up on the refund",
            "outcome": "failure",
        },
    }
    latency = {}
    for name, given in queries.items():
        filters = selection_parse(given)
        runs = []
        for _ in range(repeat + 1):
            start = time.perf_counter()
            rows, _next = trajectory_list_page(project, filters)
            runs.append(time.perf_counter() - start)
        warm = runs[1:]
        latency[name] = {
            "rows": len(rows),
            "cold_ms": round(runs[0] * 1000, 1),
            "warm_median_ms": round(statistics.median(warm) * 1000, 1),
            "warm_range_ms": [round(min(warm) * 1000, 1), round(max(warm) * 1000, 1)],
        }
    encoder = encoder_get(encoder_configured())
    encodes = []
    for _ in range(repeat):
        start = time.perf_counter()
        encoder.encode(["the agent gave up on the refund"])
        encodes.append(time.perf_counter() - start)
    latency["encoding the query text alone"] = {
        "warm_median_ms": round(statistics.median(encodes) * 1000, 1)
    }
    per_million = 1_000_000 / max(stored, 1)
    figures: dict[str, Any] = {
        "vectors": stored,
        **timings,
        "table_mb": round(table_bytes / 2**20, 1),
        "hnsw_index_mb": round(index_bytes / 2**20, 1),
        "per_million_vectors": {
            "table_gb": round(table_bytes * per_million / 2**30, 2),
            "hnsw_index_gb": round(index_bytes * per_million / 2**30, 2),
        },
        "latency": latency,
    }
    if "hnsw_build_s" in timings:
        figures["per_million_vectors"]["hnsw_build_s (linear estimate)"] = round(
            timings["hnsw_build_s"] * per_million
        )
    if explain:
        from discovery.selectors import step_vector_text

        vector = step_vector_text(model, project, step_id)
        assert vector is not None
        print("EXPLAIN similar_step + outcome=failure:")
        print(_explain(project, model, vector, {"outcome": "failure"}))
    if not keep:
        project_drop(project)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--records", type=int, default=400, help="ProcessBench records")
    parser.add_argument(
        "--rounds", type=int, default=3, help="throughput rounds (bare loop and worker's pass)"
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--keep", action="store_true", help="keep the scale project and reuse one of this size"
    )
    parser.add_argument(
        "--explain", action="store_true", help="print EXPLAIN ANALYZE of the nearest query"
    )
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    if not store.pgvector_available() and not store.vector_tables_ensure():
        raise SystemExit(store.PGVECTOR_MISSING)
    print(f"cpus: {os.cpu_count()}, encoder: {encoder_configured()}")
    if not args.skip_throughput:
        print("throughput:", json.dumps(throughput(args.records, args.rounds), indent=2))
    figures = synthetic(args.vectors, args.repeat, keep=args.keep, explain=args.explain)
    print("scale:", json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
