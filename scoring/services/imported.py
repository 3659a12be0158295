"""Writes for scores computed elsewhere: a file or the API's records of
``{trajectory, step, value}``, stored under a scorer of kind ``external``, all or nothing
unless told to skip bad records."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scoring import prm
from scoring.models import Scorer, ScoringRun
from scoring.services.scores import scores_upsert
from trajectories.models import Project, Step, Trajectory

# Rows per upsert statement when importing scores.
IMPORT_BATCH = 5000


# --- Scores computed elsewhere ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ImportProblem:
    line: int
    message: str


class ScoresRejected(Exception):
    """The file had bad lines and nothing was written."""

    def __init__(self, problems: list[ImportProblem]) -> None:
        super().__init__(f"{len(problems)} line(s) rejected")
        self.problems = problems


class _Rollback(Exception):
    pass


def scores_import(
    *,
    project: Project,
    scorer_name: str,
    path: Path,
    user: User | None = None,
    skip_invalid: bool = False,
) -> tuple[ScoringRun, list[ImportProblem]]:
    """Store scores computed elsewhere, one JSON object a line:
    ``{"trajectory": external_id, "step": index, "value": p}``, the step index as
    Stepscope numbers the trajectory's steps. The scorer is created (kind ``external``)
    if the project has none of that name. All or nothing unless ``skip_invalid``; a
    problem's ``line`` is the file's line number."""
    problems: list[ImportProblem] = []
    return _scores_store(
        project=project,
        scorer_name=scorer_name,
        user=user,
        skip_invalid=skip_invalid,
        rows=_score_lines(path, problems),
        problems=problems,
        selection={"file": path.name},
    )


def scores_import_records(
    *,
    project: Project,
    scorer_name: str,
    records: Iterable[Any],
    user: User | None = None,
    skip_invalid: bool = False,
) -> tuple[ScoringRun, list[ImportProblem]]:
    """:func:`scores_import` for records already parsed (the API's JSON list); a
    problem's ``line`` is the record's 0-based index in ``records``."""
    problems: list[ImportProblem] = []
    return _scores_store(
        project=project,
        scorer_name=scorer_name,
        user=user,
        skip_invalid=skip_invalid,
        rows=_score_records(enumerate(records), problems),
        problems=problems,
        selection={"api": True},
    )


def _scores_store(
    *,
    project: Project,
    scorer_name: str,
    user: User | None,
    skip_invalid: bool,
    rows: Iterator[tuple[int, str, int, float]],
    problems: list[ImportProblem],
    selection: dict[str, Any],
) -> tuple[ScoringRun, list[ImportProblem]]:
    stored = 0
    try:
        with transaction.atomic():
            scorer = _scorer_for_import(project, scorer_name, user)
            run = ScoringRun.objects.create(
                project=project,
                scorer=scorer,
                kind=ScoringRun.Kind.IMPORT,
                status=ScoringRun.Status.RUNNING,
                selection=selection,
                created_by=user,
                started_at=timezone.now(),
            )
            for batch in _batched(rows, IMPORT_BATCH):
                results = _resolve_steps(project, batch, problems)
                if problems and not skip_invalid:
                    continue  # keep reading to report every problem, write nothing
                stored += scores_upsert(run=run, scorer_id=scorer.pk, results=results)
            if problems and not skip_invalid:
                raise _Rollback
            run.status = ScoringRun.Status.DONE
            run.total = run.done = stored
            run.finished_at = timezone.now()
            run.save(update_fields=["status", "total", "done", "finished_at"])
    except _Rollback:
        raise ScoresRejected(sorted(problems, key=lambda p: p.line)) from None
    return run, problems


def _scorer_for_import(project: Project, name: str, user: User | None) -> Scorer:
    from scoring.selectors import scorer_latest

    scorer = scorer_latest(project, name)
    if scorer is not None:
        return scorer
    return Scorer.objects.create(
        project=project, name=name, kind=prm.EXTERNAL, queue="default", created_by=user
    )


def _score_lines(
    path: Path, problems: list[ImportProblem]
) -> Iterator[tuple[int, str, int, float]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                problems.append(ImportProblem(number, f"not JSON: {error.msg}"))
                continue
            yield from _score_records([(number, record)], problems)


def _score_records(
    records: Iterable[tuple[int, Any]], problems: list[ImportProblem]
) -> Iterator[tuple[int, str, int, float]]:
    for number, record in records:
        problem = _score_record_problem(record)
        if problem:
            problems.append(ImportProblem(number, problem))
            continue
        yield number, str(record["trajectory"]), record["step"], float(record["value"])


def _score_record_problem(record: Any) -> str:
    if not isinstance(record, dict):
        return "expected an object"
    for name in ("trajectory", "step", "value"):
        if name not in record:
            return f"{name!r} is missing"
    if not isinstance(record["trajectory"], str | int) or isinstance(record["trajectory"], bool):
        return "'trajectory' must be the trajectory's external id"
    step = record["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return "'step' must be a step index (0 or more)"
    value = record["value"]
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        return "'value' must be a number from 0 to 1"
    return ""


def _resolve_steps(
    project: Project, batch: list[tuple[int, str, int, float]], problems: list[ImportProblem]
) -> list[prm.StepResult]:
    external_ids = {external for _, external, _, _ in batch}
    trajectories: dict[str, list[int]] = {}
    for pk, external in Trajectory.objects.filter(
        project=project, external_id__in=external_ids
    ).values_list("pk", "external_id"):
        trajectories.setdefault(external, []).append(pk)
    unique = {external: pks[0] for external, pks in trajectories.items() if len(pks) == 1}
    wanted = Q(pk__in=[])
    for _, external, index, _ in batch:
        if external in unique:
            wanted |= Q(trajectory_id=unique[external], index=index)
    steps = {
        (trajectory_id, index): pk
        for pk, trajectory_id, index in Step.objects.filter(wanted).values_list(
            "pk", "trajectory_id", "index"
        )
    }
    results = []
    for line, external, index, value in batch:
        if external not in trajectories:
            problems.append(ImportProblem(line, f"no trajectory {external!r} in this project"))
        elif external not in unique:
            problems.append(ImportProblem(line, f"{external!r} names several trajectories"))
        elif (unique[external], index) not in steps:
            problems.append(ImportProblem(line, f"trajectory {external!r} has no step {index}"))
        else:
            results.append(prm.StepResult(steps[(unique[external], index)], value, {}))
    return results


def _batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
