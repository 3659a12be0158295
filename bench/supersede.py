"""What the superseding triggers (``labeling/0006``) cost a label write.

    .venv/bin/python bench/supersede.py                       # 200 upserts, 200,000 copied labels
    .venv/bin/python bench/supersede.py --labels 1000000 --repeat 5

Makes a throwaway project (``bench-supersede-<time>``, dropped at the end) with one
annotator, and times, each way in turn in the same run:

- one label upsert through ``step_label_set`` (the labeling page's and the API's write),
  into a project whose schema was never edited, and into one whose schema has a second
  version (the trigger then ranks the annotator's labels on the step);
- one ``COPY`` of ``--labels`` submitted labels in one statement (an import's labels),
  into a schema with one version.

The baseline is the same work with the three superseding triggers disabled (inside the
measured transaction, which is rolled back, so every round starts from the same rows,
and the label tables vacuumed after it); the majority triggers run in both. Each round
checks the rule held: every version 1 label superseded with the triggers, none without.
Prints medians and ranges, the ratio with/without, and a JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from labeling.models import LabelSchema  # noqa: E402
from labeling.selectors import labeling_state_for_user  # noqa: E402
from labeling.services import label_schema_save, step_label_set  # noqa: E402
from trajectories.models import Project, ProjectDeletion, Step  # noqa: E402
from trajectories.services import project_create, project_deletion_run  # noqa: E402

TRIGGERS = tuple(f"steplabel_supersede_{event}" for event in ("insert", "update", "delete"))
BINARY = [
    {"value": -1, "name": "wrong", "key": "1", "color": "#ff0000"},
    {"value": 1, "name": "right", "key": "2", "color": "#00ff00"},
]


class Rolledback(Exception):
    pass


def timed(work: Any, *, superseding: bool, expect_superseded: int = 0) -> float:
    """Seconds ``work`` takes in a transaction that is rolled back afterwards."""
    elapsed = 0.0
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            if not superseding:
                for name in TRIGGERS:
                    cursor.execute(f"ALTER TABLE labeling_steplabel DISABLE TRIGGER {name}")
            start = time.perf_counter()
            work(cursor)
            elapsed = time.perf_counter() - start
            # The rule held (or, without the triggers, did not run): counted before the
            # rollback, off the clock.
            cursor.execute("SELECT count(*) FROM labeling_steplabel WHERE status = 'superseded'")
            row = cursor.fetchone()
            if (row[0] if row else 0) != (expect_superseded if superseding else 0):
                raise RuntimeError(f"{row} labels superseded; {expect_superseded} expected")
            raise Rolledback
    except Rolledback:
        pass
    return elapsed


def vacuum() -> None:
    """Clear what a rolled-back round left (a copy's dead rows slowed every later
    upsert's plans, with and without the triggers, until autovacuum came by)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "VACUUM (ANALYZE) labeling_steplabel, labeling_steplabelevent, labeling_stepmajority"
        )


def steps_make(project: Project, count: int, per_trajectory: int = 20) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO trajectories_trajectory (project_id, external_id, source_format,"
            " task_key, task, ground_truth, model_name, metadata, step_count, content_hash,"
            " created_at) SELECT %s, 'b' || n, 'stepscope', '', 'task ' || n, '', '', '{}',"
            " %s, md5(n::text), now() FROM generate_series(1, %s) n",
            [project.pk, per_trajectory, max(1, count // per_trajectory)],
        )
        cursor.execute(
            "INSERT INTO trajectories_step (trajectory_id, index, kind, role, agent, content,"
            " tool_name, metadata, labelable, prefix_hash) SELECT t.id, i, 'thought',"
            " 'assistant', '', 'step ' || i, '', '{}', true, md5(t.id::text || i)"
            " FROM trajectories_trajectory t CROSS JOIN generate_series(0, %s - 1) i"
            " WHERE t.project_id = %s",
            [per_trajectory, project.pk],
        )
        cursor.execute("ANALYZE trajectories_step")
    return list(
        Step.objects.filter(trajectory__project=project).order_by("id").values_list("id", flat=True)
    )


def spread(values: list[float], scale: float = 1.0) -> str:
    return (
        f"{statistics.median(values) * scale:.2f}"
        f" ({min(values) * scale:.2f}-{max(values) * scale:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upserts", type=int, default=200, help="label upserts per round")
    parser.add_argument("--labels", type=int, default=200_000, help="labels in the COPY")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)

    tag = f"bench-supersede-{int(time.time())}"
    user = User.objects.create_user(tag)
    projects: list[Project] = []
    try:
        plain = project_create(slug=tag, name=tag, owner=user)
        edited = project_create(slug=f"{tag}-v2", name=f"{tag} v2", owner=user)
        projects += [plain, edited]
        label_schema_save(
            schema=edited.label_schemas.get(is_active=True),
            kind=LabelSchema.Kind.BINARY,
            values=BINARY,
            error_tags=[],
            ask_rationale=False,
            first_error_mode=False,
        )
        plain_steps = steps_make(plain, args.labels)
        edited_steps = steps_make(edited, args.upserts)
        old_schema = edited.label_schemas.get(version=1)
        with connection.cursor() as cursor:  # version 1 labels, to be superseded
            cursor.execute(
                "INSERT INTO labeling_steplabel (step_id, annotator_id, schema_id, value, tags,"
                " rationale, correction, status, saw_model_scores, created_at, updated_at)"
                " SELECT s, %s, %s, -1, '[]', '', '', 'submitted', false, now(), now()"
                " FROM unnest(%s::bigint[]) s",
                [user.pk, old_schema.pk, edited_steps],
            )
            # Their work submitted: a label they write now is submitted at once (a draft
            # supersedes nothing), as when an annotator revisits a finished trajectory.
            cursor.execute(
                "INSERT INTO labeling_trajectorylabel (trajectory_id, annotator_id,"
                " first_error_index, finish_reason, status, flagged, outcome, comment,"
                " created_at, updated_at, submitted_at) SELECT t.id, %s, NULL, 'solution',"
                " 'submitted', false, '', '', now(), now(), now()"
                " FROM trajectories_trajectory t WHERE t.project_id = %s",
                [user.pk, edited.pk],
            )

        def upserts(project: Project, steps: list[int]) -> Any:
            trajectory_ids = dict(
                Step.objects.filter(id__in=steps[: args.upserts]).values_list("id", "trajectory")
            )
            states = {t: labeling_state_for_user(user, t) for t in set(trajectory_ids.values())}
            chosen = Step.objects.in_bulk(steps[: args.upserts])

            def work(cursor: Any) -> None:
                for step_id in steps[: args.upserts]:
                    step_label_set(
                        state=states[trajectory_ids[step_id]], step=chosen[step_id], value=1
                    )

            return work

        plain_schema = plain.label_schemas.get(is_active=True)

        def copy(cursor: Any) -> None:
            rows = "".join(
                f"{step}\t{user.pk}\t{plain_schema.pk}\t1\t[]\t\t\tsubmitted\tf\t"
                "2026-01-01T00:00:00Z\t2026-01-01T00:00:00Z\n"
                for step in plain_steps[: args.labels]
            )
            with cursor.cursor.copy(
                "COPY labeling_steplabel (step_id, annotator_id, schema_id, value, tags,"
                " rationale, correction, status, saw_model_scores, created_at, updated_at)"
                " FROM STDIN"
            ) as out:
                out.write(rows)

        ways = {
            "upsert, one version": upserts(plain, plain_steps),
            "upsert, superseding": upserts(edited, edited_steps),
            f"copy {args.labels:,}": copy,
        }
        results: dict[str, dict[str, list[float]]] = {
            name: {"with": [], "without": []} for name in ways
        }
        for round_ in range(args.repeat):
            for name, work in ways.items():
                order = ("with", "without") if round_ % 2 == 0 else ("without", "with")
                for side in order:
                    expect = args.upserts if name == "upsert, superseding" else 0
                    results[name][side].append(
                        timed(work, superseding=side == "with", expect_superseded=expect)
                    )
                    vacuum()
            print(f"round {round_ + 1} done", flush=True)

        print(f"\n{args.repeat} rounds, median (range), triggers on vs off:")
        summary: dict[str, Any] = {}
        for name, sides in results.items():
            per = args.upserts if name.startswith("upsert") else 1
            unit, scale = ("ms per upsert", 1000 / per) if per > 1 else ("s", 1.0)
            ratio = statistics.median(sides["with"]) / statistics.median(sides["without"])
            print(
                f"  {name:22s} with {spread(sides['with'], scale)} {unit},"
                f" without {spread(sides['without'], scale)} {unit}, ratio {ratio:.2f}x"
            )
            summary[name] = {**sides, "ratio": ratio}
        print(json.dumps({"upserts": args.upserts, "labels": args.labels, "results": summary}))
    finally:
        for project in projects:
            deletion = ProjectDeletion.objects.create(
                project=project, slug=project.slug, name=project.name
            )
            project_deletion_run(deletion_id=deletion.pk)
            deletion.delete()
        user.delete()


if __name__ == "__main__":
    main()
