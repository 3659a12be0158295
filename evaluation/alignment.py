"""How far to trust each prompt version of an LLM judge: the queries behind the judge
alignment page and ``/api/v1/scorers/<id>/alignment/``.

A judge's ``StepScore`` rows hold only its latest answer per step, so the figures of each
prompt version come from its own replies (``JudgeReply``): per step, the newest parsed
reply of that version (per-step mode: the reply's value; trajectory mode: the steps
before the named first wrong step 1, that step 0, later ones unjudged; -1 every step
good), joined in PostgreSQL with the human label source on the labelable steps. The
trajectories of a version's few-shot examples (``JudgePrompt.example_steps``) are left
out of that version's figures. Attribution runs (failure verdicts, one per trajectory
and judge) count for the version whose reply on that trajectory is the newest, against
a human decisive-failure source. The numbers come from
:mod:`evaluation.alignment_metrics` and :mod:`metrics.decisive`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.contrib.auth.models import User
from django.db import connection

from evaluation import alignment_metrics as am
from evaluation import compare_metrics as cm
from evaluation.compare import DEFAULT_LABELS, pull, scale_for, source_param, source_schema
from labeling.decisive_sources import (
    decisive_source_choices,
    decisive_source_parse,
    decisive_source_sql,
)
from labeling.sources import (
    LabelSource,
    label_source_annotator,
    label_source_parse,
    label_source_sql,
)
from metrics.decisive import DecisiveAgreement, decisive_agreement
from scoring import prm
from scoring.judges.config import PER_STEP, TRAJECTORY
from scoring.models import JudgePrompt, JudgeReply, Scorer
from scoring.selectors import scorers_for_project
from scoring.services.judge_examples import step_rationales
from scoring.services.judges import judge_params_for
from trajectories.models import Project

THRESHOLD = 0.5
PAGE_SIZE = 25
EXCERPT_CHARS = 400
CRITIQUE_CHARS = 800
HUMAN_KINDS = ("human", "import")


class NotFound(LookupError):
    """The scorer is not one the project may use (a 404, as for outsiders)."""


@dataclass(frozen=True)
class AlignmentQuery:
    project: Project
    scorer: Scorer
    mode: str
    source: LabelSource
    # A human decisive-failure source (``human:<user>``, ``import:<source>``), or None.
    decisive: LabelSource | None

    def params(self) -> dict[str, str]:
        params = {"source": source_param(self.source)}
        if self.decisive is not None:
            params["decisive"] = str(self.decisive)
        return params


def judge_for_project(project: Project, scorer_id: int) -> Scorer:
    """A scorer the project may use; :class:`NotFound` otherwise. Any kind: the caller
    says what is wrong with a scorer that is not a judge."""
    scorer = scorers_for_project(project).filter(pk=scorer_id).first()
    if scorer is None:
        raise NotFound(f"no scorer {scorer_id} in project {project.slug!r}")
    return scorer


def human_sources(project: Project, choices: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The human label sources among the compare page's choices."""
    return [(value, name) for value, name in choices if value.split(":", 1)[0] in HUMAN_KINDS]


def decisive_choices(project: Project) -> list[str]:
    """The human decisive-failure sources of the project (no models)."""
    return [c for c in decisive_source_choices(project) if not c.startswith("model:")]


def alignment_query_build(
    project: Project, scorer: Scorer, *, source: str = "", decisive: str = ""
) -> AlignmentQuery:
    """Resolve the page's and the API's parameters; a ValueError names the field and
    what is wrong (a scorer that is not a judge, a source that is not a human one or
    names nobody)."""
    if scorer.kind != prm.LLM_JUDGE:
        raise ValueError(
            f"scorer: {scorer.name!r} is a {scorer.kind} scorer, not an llm-judge;"
            " only judges have prompt versions to align"
        )
    text = source.strip() or DEFAULT_LABELS
    try:
        parsed = label_source_parse(text)
    except ValueError as error:
        raise ValueError(f"source: {error}") from None
    if parsed.kind not in HUMAN_KINDS:
        raise ValueError(
            f"source: {text!r} is not a human label source; use human:<username>,"
            " human:majority, human:adjudicated or import:<source>"
        )
    username = label_source_annotator(parsed)
    if username is not None and not User.objects.filter(username=username).exists():
        raise ValueError(f"source: nobody is called {username!r}")
    try:
        label_source_sql(project, parsed)
    except ValueError as error:
        raise ValueError(f"source: {error}") from None
    reference = None
    if decisive.strip():
        try:
            reference = decisive_source_parse(decisive)
        except ValueError as error:
            raise ValueError(f"decisive: {error}") from None
        if reference.kind == "model":
            raise ValueError("decisive: compare the judge with a human or imported source")
    else:
        # The same annotator's decisive failures where they have any, else the first.
        choices = decisive_choices(project)
        same = f"human:{username}" if username and parsed.kind == "human" else username or ""
        pick = same if same in choices else (choices[0] if choices else "")
        reference = decisive_source_parse(pick) if pick else None
    return AlignmentQuery(project, scorer, judge_params_for(scorer).mode, parsed, reference)


# --- Each version's figures -----------------------------------------------------------------


@dataclass
class VersionRow:
    prompt: JudgePrompt
    runs: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    parse_failures: int = 0
    mean_latency_ms: float | None = None
    # Trajectories left out: those of the version's few-shot examples.
    left_out: int = 0
    figures: am.VersionFigures | None = None
    decisive: DecisiveAgreement | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.prompt.version,
            "prompt_id": self.prompt.pk,
            "note": self.prompt.note,
            "example_steps": list(self.prompt.example_steps),
            "runs": self.runs,
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "parse_failures": self.parse_failures,
            "mean_latency_ms": self.mean_latency_ms,
            "trajectories_left_out": self.left_out,
            "steps": self.figures.as_json() if self.figures else None,
            "attribution": self.decisive.as_json() if self.decisive else None,
        }


@dataclass(frozen=True)
class Alignment:
    query: AlignmentQuery
    scale: cm.Scale
    versions: list[VersionRow] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "project": self.query.project.slug,
            "scorer": self.query.scorer.name,
            "scorer_id": self.query.scorer.pk,
            "mode": self.query.mode,
            "source": str(self.query.source),
            "decisive": str(self.query.decisive) if self.query.decisive else None,
            "threshold": THRESHOLD,
            "values": list(self.scale.values),
            "names": list(self.scale.names),
            "versions": [row.as_json() for row in self.versions],
        }


def _judged_sql(scorer: Scorer, mode: str) -> tuple[str, list[Any]]:
    """``(prompt_id, step_id, value, reply_id)``: each version's newest parsed answer per
    step, as a 0..1 value."""
    if mode == PER_STEP:
        return (
            "SELECT DISTINCT ON (jr.prompt_id, jr.step_id)"
            " jr.prompt_id, jr.step_id, jr.value, jr.id AS reply_id"
            " FROM scoring_judgereply jr"
            " WHERE jr.scorer_id = %s AND jr.step_id IS NOT NULL AND jr.parse_error = ''"
            " AND jr.value IS NOT NULL"
            " ORDER BY jr.prompt_id, jr.step_id, jr.id DESC",
            [scorer.pk],
        )
    if mode == TRAJECTORY:
        return (
            "SELECT tr.prompt_id, s.id AS step_id,"
            " CASE WHEN s.index = tr.verdict THEN 0.0 ELSE 1.0 END AS value, tr.reply_id"
            " FROM (SELECT DISTINCT ON (jr.prompt_id, jr.trajectory_id)"
            " jr.prompt_id, jr.trajectory_id, jr.verdict, jr.id AS reply_id"
            " FROM scoring_judgereply jr"
            " WHERE jr.scorer_id = %s AND jr.step_id IS NULL AND jr.key ~ '^t[0-9]+$'"
            " AND jr.parse_error = '' AND jr.verdict IS NOT NULL"
            " ORDER BY jr.prompt_id, jr.trajectory_id, jr.id DESC) tr"
            " JOIN trajectories_step s ON s.trajectory_id = tr.trajectory_id"
            " WHERE tr.verdict = -1 OR s.index <= tr.verdict",
            [scorer.pk],
        )
    # Failure-attribution modes judge trajectories, not steps: no step figures.
    return (
        "SELECT 0::int8 AS prompt_id, 0::int8 AS step_id, 0.0 AS value, 0::int8 AS reply_id"
        " WHERE false",
        [],
    )


def _left_out(prompts: Sequence[JudgePrompt]) -> dict[int, set[int]]:
    """Per prompt version, the trajectories of its few-shot example steps."""
    wanted = {pk for p in prompts for pk in p.example_steps}
    if not wanted:
        return {p.pk: set() for p in prompts}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, trajectory_id FROM trajectories_step WHERE id = ANY(%s)", [list(wanted)]
        )
        owner = dict(cursor.fetchall())
    return {p.pk: {owner[s] for s in p.example_steps if s in owner} for p in prompts}


def alignment_run(query: AlignmentQuery) -> Alignment:
    """Every prompt version of the judge, oldest first, with its cost and figures."""
    prompts = list(query.scorer.prompts.order_by("version"))
    rows = {p.pk: VersionRow(p) for p in prompts}
    left_out = _left_out(prompts)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT prompt_id, count(*), COALESCE(sum(prompt_tokens), 0),"
            " COALESCE(sum(completion_tokens), 0), count(*) FILTER (WHERE parse_error <> ''),"
            " avg(latency_ms) FROM scoring_judgereply WHERE scorer_id = %s"
            " AND run_id IN (SELECT id FROM scoring_scoringrun WHERE project_id = %s)"
            " GROUP BY prompt_id",
            [query.scorer.pk, query.project.pk],
        )
        for prompt_id, calls, p_tokens, c_tokens, failures, latency in cursor.fetchall():
            if prompt_id in rows:
                row = rows[prompt_id]
                row.calls, row.prompt_tokens, row.completion_tokens = calls, p_tokens, c_tokens
                row.parse_failures = failures
                row.mean_latency_ms = float(latency) if latency is not None else None
        cursor.execute(
            "SELECT prompt_id, count(*) FROM scoring_scoringrun"
            " WHERE scorer_id = %s AND project_id = %s AND prompt_id IS NOT NULL"
            " GROUP BY prompt_id",
            [query.scorer.pk, query.project.pk],
        )
        for prompt_id, runs in cursor.fetchall():
            if prompt_id in rows:
                rows[prompt_id].runs = runs

    judged_sql, judged_params = _judged_sql(query.scorer, query.mode)
    ref_sql, ref_params = label_source_sql(query.project, query.source)
    columns = pull(
        "SELECT j.prompt_id::int8, s.trajectory_id::int8, s.index::int4, r.value::int4,"
        " j.value::float8"
        f" FROM ({judged_sql}) j"
        " JOIN trajectories_step s ON s.id = j.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        f" JOIN ({ref_sql}) r ON r.step_id = s.id"
        " WHERE t.project_id = %s AND s.labelable",
        [*judged_params, *ref_params, query.project.pk],
        [
            ("prompt", "int8"),
            ("trajectory", "int8"),
            ("index", "int4"),
            ("label", "int4"),
            ("score", "float8"),
        ],
    )
    scale = scale_for(
        query.project,
        np.unique(columns["label"]).tolist(),
        schema=source_schema(query.project, query.source),
    )
    for pk, row in rows.items():
        mine = columns["prompt"] == pk
        excluded = left_out[pk]
        row.left_out = len(excluded)
        if excluded:
            mine &= ~np.isin(columns["trajectory"], np.fromiter(excluded, dtype=np.int64))
        if not mine.any():
            continue
        steps = cm.StepRows(
            trajectory=columns["trajectory"][mine].astype(np.int64),
            index=columns["index"][mine].astype(np.int64),
            label=columns["label"][mine].astype(np.float64),
            score=columns["score"][mine].astype(np.float64),
            group=np.zeros(int(mine.sum()), dtype=np.int64),
        ).sort()
        row.figures = am.version_figures(steps, scale, threshold=THRESHOLD)
    if query.decisive is not None:
        _attribution(query, rows, left_out)
    return Alignment(query, scale, [rows[p.pk] for p in prompts])


def _attribution(
    query: AlignmentQuery, rows: dict[int, VersionRow], left_out: dict[int, set[int]]
) -> None:
    """Agent and decisive-step accuracy of the judge's failure verdicts, per version
    (the version of the newest reply on each verdict's trajectory)."""
    assert query.decisive is not None
    ref_sql, ref_params = decisive_source_sql(query.project, query.decisive)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lr.prompt_id, fv.trajectory_id, r.agent, r.step, fv.agent, fv.step"
            " FROM scoring_failureverdict fv"
            " JOIN trajectories_trajectory t ON t.id = fv.trajectory_id"
            f" JOIN ({ref_sql}) r ON r.trajectory_id = fv.trajectory_id"
            " CROSS JOIN LATERAL (SELECT jr.prompt_id FROM scoring_judgereply jr"
            " WHERE jr.trajectory_id = fv.trajectory_id AND jr.scorer_id = fv.scorer_id"
            " ORDER BY jr.id DESC LIMIT 1) lr"
            " WHERE fv.scorer_id = %s AND t.project_id = %s"
            " ORDER BY fv.trajectory_id",
            [*ref_params, query.scorer.pk, query.project.pk],
        )
        pairs = cursor.fetchall()
    by_prompt: dict[int, list[tuple[Any, ...]]] = {}
    for prompt_id, trajectory_id, *rest in pairs:
        if prompt_id in rows and trajectory_id not in left_out[prompt_id]:
            by_prompt.setdefault(prompt_id, []).append(tuple(rest))
    for prompt_id, found in by_prompt.items():
        rows[prompt_id].decisive = decisive_agreement(
            [ra or "" for ra, _, _, _ in found],
            [ca or "" for _, _, ca, _ in found],
            [rs for _, rs, _, _ in found],
            [cs for _, _, _, cs in found],
            k=1,
        )


# --- Disagreements ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Disagreement:
    step_id: int
    trajectory_id: int
    trajectory: str
    index: int
    excerpt: str
    label: int
    label_name: str
    judge_value: float
    verdict: str
    critique: str
    rationale: str


def disagreements(
    query: AlignmentQuery, alignment: Alignment, prompt: JudgePrompt, *, page: int = 1
) -> tuple[list[Disagreement], bool]:
    """The steps where ``prompt``'s answers say good and the source bad, or the other
    way (steps a human left neutral are not listed), outside its examples' trajectories;
    one page, and whether there is another."""
    scale = alignment.scale
    judged_sql, judged_params = _judged_sql(query.scorer, query.mode)
    ref_sql, ref_params = label_source_sql(query.project, query.source)
    excluded = sorted(_left_out([prompt])[prompt.pk])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.id, s.trajectory_id, t.external_id, s.index, left(s.content, %s),"
            " r.value, j.value, j.reply_id"
            f" FROM ({judged_sql}) j"
            " JOIN trajectories_step s ON s.id = j.step_id"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            f" JOIN ({ref_sql}) r ON r.step_id = s.id"
            " WHERE t.project_id = %s AND s.labelable AND j.prompt_id = %s"
            " AND NOT (s.trajectory_id = ANY(%s))"
            " AND ((r.value = %s AND j.value < %s) OR (r.value = %s AND j.value >= %s))"
            " ORDER BY s.trajectory_id, s.index LIMIT %s OFFSET %s",
            [
                EXCERPT_CHARS + 1,
                *judged_params,
                *ref_params,
                query.project.pk,
                prompt.pk,
                excluded,
                scale.good,
                THRESHOLD,
                scale.bad,
                THRESHOLD,
                PAGE_SIZE + 1,
                (page - 1) * PAGE_SIZE,
            ],
        )
        found = cursor.fetchall()
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    replies = {
        r.pk: r
        for r in JudgeReply.objects.filter(pk__in=[row[7] for row in found]).only(
            "id", "verdict", "critique"
        )
    }
    rationales = step_rationales(query.project, query.source, [row[0] for row in found])
    listed = []
    for step_id, trajectory_id, external_id, index, content, label, value, reply_id in found:
        reply = replies.get(reply_id)
        if query.mode == TRAJECTORY and reply is not None:
            verdict = (
                "no step wrong" if reply.verdict == -1 else f"first wrong step {reply.verdict}"
            )
        elif reply is not None and reply.verdict is not None:
            verdict = f"{reply.verdict:+d}" if reply.verdict else "0"
        else:
            verdict = f"{value:.2f}"
        critique = reply.critique if reply is not None else ""
        listed.append(
            Disagreement(
                step_id=step_id,
                trajectory_id=trajectory_id,
                trajectory=external_id or f"#{trajectory_id}",
                index=index,
                excerpt=_cut(content, EXCERPT_CHARS),
                label=int(label),
                label_name=scale.name(int(label)),
                judge_value=float(value),
                verdict=verdict,
                critique=_cut(critique, CRITIQUE_CHARS),
                rationale=rationales.get(step_id, ""),
            )
        )
    return listed, more


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
