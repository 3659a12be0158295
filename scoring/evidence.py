"""The trajectory page's scores and credit (``GET /t/<id>/evidence/``), read for one part
at a time: what each part costs is what its rows need, not the whole trajectory (#37).

One query per request. Facts about the whole trajectory (the scorer and run shown, where
labels, the PRM and the MC values put the first error, the credit's colour scale, the
pickers) are aggregates the database computes over indexes and hands back as a few
values; the rows that come back as Python objects are only those of the steps asked
for (``[low, high)``, or one step), plus the strips' cells: one per step up to
``STRIP_CELLS`` steps, else ``STRIP_RUNS`` cells for even runs of steps, each showing its
run's lowest score and MC value and its credit of largest size."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from scoring import methods, prm
from scoring.models import JudgeReply
from trajectories.models import Trajectory

# A trajectory of up to STRIP_CELLS steps has a strip cell per step; a longer one has
# STRIP_RUNS cells, each for a run of steps, few enough to fit a phone's width.
STRIP_CELLS = 1000
STRIP_RUNS = 200
# Steps the evidence table (the page without HTMX) and one columns request show at most.
PAGE_STEPS = 1000
NO_LIMIT = 2**62


@dataclass(frozen=True)
class RunChoice:
    pk: int
    method: str
    label: str


@dataclass(frozen=True)
class ScorerChoice:
    """A scorer with scores on the trajectory shown, and how many of its steps."""

    pk: int
    name: str
    revision: str
    steps: int

    @property
    def label(self) -> str:
        revision = f" r{self.revision}" if self.revision else ""
        return f"{self.name}{revision} · {self.steps} step{'s' if self.steps != 1 else ''}"


@dataclass
class StepEvidence:
    """What the trajectory page shows beside one step."""

    pk: int
    index: int
    labelable: bool
    score: float | None = None  # the default scorer's value
    mc: float | None = None  # Monte Carlo value of the step's prefix
    credit: float | None = None  # from the chosen run
    level: float | None = None
    detail: dict[str, Any] | None = None
    first_error: list[str] = field(default_factory=list)  # who flags it: "PRM", "MC", users
    # When the scorer shown is an llm-judge: its critique of this step (untrusted model
    # text, escaped where shown).
    critique: str = ""


@dataclass(frozen=True)
class StripCell:
    """One cell of the strips: the steps ``index`` to ``last`` (one step on a trajectory
    of up to ``STRIP_CELLS`` steps, else a run of them), linked to the first of them
    (``pk``); their lowest score and MC value, and their credit of largest size."""

    pk: int
    index: int
    last: int
    score: float | None = None
    mc: float | None = None
    credit: float | None = None

    @property
    def span(self) -> bool:
        return self.last > self.index


@dataclass(frozen=True)
class AgentCredit:
    """One agent's Shapley value (players: agents), shown on its lane on the page."""

    agent: str
    value: float
    std_error: float | None = None


@dataclass
class TrajectoryEvidence:
    """Scores, Monte Carlo values, credits and first-error flags of one trajectory for one
    user: the whole trajectory's facts, the steps asked for (``steps``) and the strips'
    cells (``strip``, for the top part and the page)."""

    visible: bool  # model scores and credits may be shown to this user now
    steps: list[StepEvidence]
    scorer: dict[str, Any] | None = None
    scorers: list[ScorerChoice] = field(default_factory=list)
    runs: list[RunChoice] = field(default_factory=list)
    run: RunChoice | None = None
    mc_run: int | None = None
    first_errors: list[tuple[str, int, int]] = field(default_factory=list)  # (who, index, pk)
    # The agents' credits of the picked Shapley run over agents, else the newest one.
    agent_credits: list[AgentCredit] = field(default_factory=list)
    agent_run: RunChoice | None = None
    strip: list[StripCell] = field(default_factory=list)
    has_scores: bool = False  # the scorer shown has a score on some step
    has_mc: bool = False
    # The largest |credit| of the run shown over the whole trajectory: the diverging
    # colour scale runs from -scale to +scale.
    credit_scale: float = 1.0
    step_count: int = 0

    def __post_init__(self) -> None:
        self.by_step = {step.pk: step for step in self.steps}

    @property
    def scorer_listed(self) -> bool:
        """The scorer shown has scores on this trajectory (is among ``scorers``)."""
        return self.scorer is not None and any(c.pk == self.scorer["id"] for c in self.scorers)

    @property
    def score_map(self) -> dict[int, float | None]:
        return {cell.pk: cell.score for cell in self.strip}

    @property
    def mc_map(self) -> dict[int, float | None]:
        return {cell.pk: cell.mc for cell in self.strip}

    @property
    def scorer_runs_a_model(self) -> bool:
        """Whether token saliency can be asked of the scorer shown (a PRM, not imported
        scores or a generative judge)."""
        kind = (self.scorer or {}).get("kind")
        return bool(self.scorer) and kind not in (prm.EXTERNAL, prm.LLM_JUDGE)

    @property
    def has_credits(self) -> bool:
        return self.run is not None


# Every join to the steps names the trajectory, so each reads through the (trajectory,
# index) index; none is a CTE shared by the others, which PostgreSQL would materialise
# whole. ``rows`` is the one per-step result: the steps in [lo, hi) (or one step).
#
# A project's credits table holds a row per step for every run over it (10M rows for one
# run over a 10M-step project). Credits are read only for this trajectory's steps, whose
# ids lie in ``span`` (the least and greatest): each read of a run's credits names that
# range, so it is a range of the (run, step) index, and whether a run credits the
# trajectory at all is a probe per run of the project. (Asked per step, or of all a run's
# credits, the planner hashed the whole table: 5 s on a 100,000-step trajectory at 4M
# credits, #37.)
_EVIDENCE_SQL = """
WITH choice AS (
    SELECT c.scorer_id, c.credit_run_id FROM scoring_evidencechoice c
    WHERE c.user_id = %(me)s AND c.project_id = %(p)s
), scorer AS (
    -- The address's scorer, else the user's pick; else, by default, the last finished
    -- scorer among those with scores on this trajectory, before the project's last one.
    SELECT COALESCE((
        SELECT s.id FROM scoring_scorer s
        WHERE s.id = COALESCE(%(scorer)s::bigint, (SELECT scorer_id FROM choice))
          AND (s.project_id = %(p)s OR s.project_id IS NULL)
    ), (
        SELECT r.scorer_id FROM (
            SELECT DISTINCT ON (r.scorer_id) r.scorer_id, r.finished_at, r.id
            FROM scoring_scoringrun r
            WHERE r.project_id = %(p)s AND r.status = 'done'
              AND r.kind IN ('score', 'import') AND r.scorer_id IS NOT NULL
            ORDER BY r.scorer_id, r.finished_at DESC NULLS LAST, r.id DESC
        ) r
        ORDER BY EXISTS (
            SELECT 1 FROM trajectories_step s JOIN scoring_stepscore ss ON ss.step_id = s.id
            WHERE s.trajectory_id = %(t)s AND ss.scorer_id = r.scorer_id
        ) DESC, r.finished_at DESC NULLS LAST, r.id DESC LIMIT 1
    )) AS id WHERE %(show)s
), scored AS (
    SELECT ss.scorer_id AS id, count(*) AS steps
    FROM trajectories_step s JOIN scoring_stepscore ss ON ss.step_id = s.id
    WHERE s.trajectory_id = %(t)s AND %(show)s AND %(top)s GROUP BY ss.scorer_id
), span AS (
    -- ``+ 0``: an aggregate over the trajectory's steps, not a walk of the primary key.
    -- ``dense``: every id in the range is one of its steps (ids are unique), so a credit
    -- in the range is on one of them without asking the step.
    SELECT min(s.id + 0) AS lo, max(s.id + 0) AS hi,
           count(*) = max(s.id + 0) - min(s.id + 0) + 1 AS dense
    FROM trajectories_step s WHERE s.trajectory_id = %(t)s AND %(show)s
), runs AS (
    -- The project's runs with a credit on some step of the trajectory.
    SELECT a.id, a.method, a.parameters, a.label_source, a.created_at, sc.name AS scorer
    FROM scoring_attributionrun a
    LEFT JOIN scoring_scorer sc ON sc.id = a.scorer_id
    WHERE a.project_id = %(p)s AND EXISTS (
        SELECT 1 FROM scoring_stepcredit c JOIN trajectories_step s ON s.id = c.step_id
        WHERE c.run_id = a.id AND s.trajectory_id = %(t)s
          AND c.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span))
), chosen AS (
    SELECT id FROM runs
    ORDER BY (id = COALESCE(%(want)s::bigint, (SELECT credit_run_id FROM choice))) DESC NULLS LAST,
        created_at DESC, id DESC
    LIMIT 1
), mc AS (
    SELECT id FROM runs WHERE method = 'mc-prefix' ORDER BY created_at DESC, id DESC LIMIT 1
), mc_root AS (
    -- The task's mean outcome: the first valued prefix's value minus its advantage.
    SELECT mm.level - mm.value AS value
    FROM trajectories_step s JOIN scoring_stepcredit mm ON mm.step_id = s.id
    WHERE s.trajectory_id = %(t)s AND mm.run_id = (SELECT id FROM mc) AND mm.level IS NOT NULL
      AND mm.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span)
    ORDER BY s.index LIMIT 1
), agent_run AS (
    SELECT r.id FROM runs r
    WHERE %(top)s AND r.method = 'shapley' AND EXISTS (
        SELECT 1 FROM trajectories_step s JOIN scoring_stepcredit c ON c.step_id = s.id
        WHERE s.trajectory_id = %(t)s AND c.run_id = r.id AND c.detail ? 'agent'
          AND c.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span))
    ORDER BY (r.id = %(want)s) DESC NULLS LAST, r.created_at DESC, r.id DESC LIMIT 1
), agent_values AS (
    SELECT c.detail->>'agent' AS agent, max((c.detail->>'agent_value')::float) AS value,
           max((c.detail->>'agent_std_error')::float) AS std_error, min(s.index) AS first
    FROM trajectories_step s JOIN scoring_stepcredit c ON c.step_id = s.id
    WHERE s.trajectory_id = %(t)s AND c.run_id = (SELECT id FROM agent_run)
      AND c.detail ? 'agent'
      AND c.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span)
    GROUP BY c.detail->>'agent'
), first_prm AS (
    -- The first step (by index) the scorer shown puts under the threshold.
    SELECT s.index, s.id FROM trajectories_step s
    WHERE s.trajectory_id = %(t)s AND EXISTS (
        SELECT 1 FROM scoring_stepscore ss
        WHERE ss.step_id = s.id AND ss.scorer_id = (SELECT id FROM scorer)
          AND ss.value < %(prm_threshold)s)
    ORDER BY s.index LIMIT 1
), first_mc AS (
    -- The first step whose MC value collapsed, where the task ever succeeds.
    SELECT s.index, s.id FROM trajectories_step s
    WHERE s.trajectory_id = %(t)s
      AND (SELECT value FROM mc_root) > %(mc_collapsed)s
      AND (SELECT value FROM mc_root) <> 'NaN'::float
      AND EXISTS (
        SELECT 1 FROM scoring_stepcredit mm
        WHERE mm.step_id = s.id AND mm.run_id = (SELECT id FROM mc)
          AND mm.level < %(mc_collapsed)s)
    ORDER BY s.index LIMIT 1
), rows AS (
    SELECT s.id, s.index, s.labelable, ss.value AS score, cc.value AS credit,
           cc.level, cc.detail, mm.level AS mc
    FROM trajectories_step s
    LEFT JOIN scoring_stepscore ss
      ON ss.step_id = s.id AND ss.scorer_id = (SELECT id FROM scorer)
    LEFT JOIN scoring_stepcredit cc ON cc.step_id = s.id AND cc.run_id = (SELECT id FROM chosen)
    LEFT JOIN scoring_stepcredit mm ON mm.step_id = s.id AND mm.run_id = (SELECT id FROM mc)
    WHERE s.trajectory_id = %(t)s AND s.index >= %(lo)s AND s.index < %(hi)s
      AND (%(step)s::bigint IS NULL OR s.id = %(step)s::bigint)
), strip AS (
    -- A cell of one step: its id and values. Of a run: its lowest score and MC value,
    -- its credit of largest size (the positive one on a tie); its id is only a key.
    SELECT min(s.id) AS id, min(s.index) AS first, max(s.index) AS last,
           min(ss.value) AS score, min(mm.level) AS mc,
           CASE WHEN max(cc.value) >= -min(cc.value) THEN max(cc.value)
                ELSE min(cc.value) END AS credit
    FROM trajectories_step s
    LEFT JOIN scoring_stepscore ss
      ON ss.step_id = s.id AND ss.scorer_id = (SELECT id FROM scorer)
    LEFT JOIN scoring_stepcredit cc ON cc.step_id = s.id AND cc.run_id = (SELECT id FROM chosen)
      AND cc.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span)
    LEFT JOIN scoring_stepcredit mm ON mm.step_id = s.id AND mm.run_id = (SELECT id FROM mc)
      AND mm.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span)
    WHERE s.trajectory_id = %(t)s AND %(top)s AND %(show)s
    GROUP BY s.index::bigint * %(cells)s / %(count)s
)
SELECT json_build_object(
    'agent_run', (SELECT id FROM agent_run),
    'agent_credits', (SELECT json_agg(json_build_array(agent, value, std_error) ORDER BY first)
                      FROM agent_values),
    'scorer', (SELECT json_build_object('id', s.id, 'name', s.name, 'revision', s.revision,
                   'kind', s.kind)
               FROM scoring_scorer s WHERE s.id = (SELECT id FROM scorer)),
    'scorers', (SELECT json_agg(json_build_object('id', s.id, 'name', s.name,
                    'revision', s.revision, 'steps', scored.steps)
                    ORDER BY s.name, s.id DESC)
                FROM scored JOIN scoring_scorer s ON s.id = scored.id),
    'runs', (SELECT json_agg(json_build_object('id', id, 'method', method,
                'parameters', parameters, 'label_source', label_source, 'scorer', scorer)
                ORDER BY created_at DESC, id DESC) FROM runs),
    'chosen', (SELECT id FROM chosen),
    'mc', (SELECT id FROM mc),
    'has_scores', EXISTS (
        SELECT 1 FROM trajectories_step s JOIN scoring_stepscore ss ON ss.step_id = s.id
        WHERE s.trajectory_id = %(t)s AND ss.scorer_id = (SELECT id FROM scorer)),
    'has_mc', EXISTS (
        SELECT 1 FROM trajectories_step s JOIN scoring_stepcredit mm ON mm.step_id = s.id
        WHERE s.trajectory_id = %(t)s AND mm.run_id = (SELECT id FROM mc)
          AND mm.level IS NOT NULL
          AND mm.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span)),
    'credit_scale', (
        SELECT max(abs(cc.value)) FROM scoring_stepcredit cc
        WHERE cc.run_id = (SELECT id FROM chosen)
          AND cc.step_id BETWEEN (SELECT lo FROM span) AND (SELECT hi FROM span)
          AND ((SELECT dense FROM span) OR EXISTS (
              SELECT 1 FROM trajectories_step s
              WHERE s.id = cc.step_id AND s.trajectory_id = %(t)s))),
    'first_prm', (SELECT json_build_array(index, id) FROM first_prm),
    'first_mc', (SELECT json_build_array(index, id) FROM first_mc),
    'steps', (SELECT json_agg(json_build_array(id, index, labelable, score, credit, level,
                  detail, mc) ORDER BY index) FROM rows),
    'strip', (SELECT json_agg(json_build_array(id, first, last, score, mc, credit)
                  ORDER BY first) FROM strip),
    'labels', (SELECT json_agg(json_build_array(u.username, m.idx, (
                   SELECT s.id FROM trajectories_step s
                   WHERE s.trajectory_id = %(t)s AND s.index = m.idx))
                   ORDER BY m.idx, u.username)
               FROM (SELECT l.annotator_id, min(s.index) AS idx
                     FROM trajectories_step s JOIN labeling_steplabel l ON l.step_id = s.id
                     WHERE s.trajectory_id = %(t)s AND l.value < 0
                       AND (NOT %(blind)s OR l.annotator_id = %(me)s)
                     GROUP BY l.annotator_id) m
               JOIN auth_user u ON u.id = m.annotator_id)
)
"""


def _run_label(row: dict[str, Any]) -> str:
    inputs = [name for name in (row.get("scorer"), row.get("label_source")) if name]
    shown = ", ".join(
        f"{k}={v}" for k, v in sorted((row.get("parameters") or {}).items()) if v is not None
    )
    return " · ".join(
        part for part in (f"#{row['id']} {row['method']}", " + ".join(inputs), shown) if part
    )


def trajectory_evidence(
    trajectory: Trajectory,
    *,
    user_id: int,
    show_scores: bool,
    blind: bool,
    run_id: int | None = None,
    scorer_id: int | None = None,
    low: int = 0,
    high: int | None = None,
    step_id: int | None = None,
    top: bool = True,
) -> TrajectoryEvidence:
    """What the trajectory page shows about scores and credit, in one query: the step
    scores of ``scorer_id`` (if the project may use it; else the user's pick in the
    project, ``EvidenceChoice``; else the scorer that last finished among those with scores
    on this trajectory, else the project's last finished one), the credits of ``run_id``
    (else the user's pick, else the newest run with credits on it), the Monte Carlo values
    of the newest ``mc-prefix`` run, and where labels, the PRM and the MC values put the
    first error, for the steps with index in ``[low, high)`` (``high`` None: to the end),
    or only the step ``step_id``. With ``top``, also the strips' cells and the pickers'
    choices (the scorers with scores on this trajectory, the agents' credits).

    With ``show_scores`` False (annotators of a project that hides model scores, until
    they submit) only the label flags come back. With ``blind`` only the user's own labels
    count."""
    count = max(trajectory.step_count, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            _EVIDENCE_SQL,
            {
                "t": trajectory.pk,
                "p": trajectory.project_id,
                "show": show_scores,
                "top": top,
                "want": run_id,
                "scorer": scorer_id,
                "blind": blind,
                "me": user_id,
                "lo": low,
                "hi": NO_LIMIT if high is None else high,
                "step": step_id,
                "cells": count if count <= STRIP_CELLS else STRIP_RUNS,
                "count": count,
                "prm_threshold": methods.PRM_THRESHOLD,
                "mc_collapsed": methods.MC_COLLAPSED,
            },
        )
        row = cursor.fetchone()
    data: dict[str, Any] = row[0] if row else {}
    if isinstance(data, str):
        data = json.loads(data)
    steps = [
        StepEvidence(
            pk=pk,
            index=index,
            labelable=labelable,
            score=score,
            credit=credit,
            level=level,
            detail=detail,
            mc=mc,
        )
        for pk, index, labelable, score, credit, level, detail, mc in data.get("steps") or []
    ]
    runs = [RunChoice(r["id"], r["method"], _run_label(r)) for r in data.get("runs") or []]
    scorer = data.get("scorer") or {}
    evidence = TrajectoryEvidence(
        visible=show_scores,
        steps=steps,
        scorer=data.get("scorer"),
        scorers=[
            ScorerChoice(r["id"], r["name"], r["revision"], r["steps"])
            for r in data.get("scorers") or []
        ],
        runs=runs,
        run=next((r for r in runs if r.pk == data.get("chosen")), None),
        mc_run=data.get("mc"),
        agent_credits=[
            AgentCredit(agent, value, std_error)
            for agent, value, std_error in data.get("agent_credits") or []
            if value is not None
        ],
        agent_run=next((r for r in runs if r.pk == data.get("agent_run")), None),
        strip=[StripCell(*cell) for cell in data.get("strip") or []],
        has_scores=bool(data.get("has_scores")),
        has_mc=bool(data.get("has_mc")),
        credit_scale=data.get("credit_scale") or 1.0,
        step_count=trajectory.step_count,
    )
    by_index = {s.index: s for s in steps}
    if show_scores and scorer.get("kind") == prm.LLM_JUDGE and steps:
        _attach_critiques(trajectory, scorer["id"], steps, by_index)
    flags: list[tuple[str, int, int | None]] = [
        (name, index, pk) for name, index, pk in data.get("labels") or []
    ]
    if show_scores:
        who = "Judge" if scorer.get("kind") == prm.LLM_JUDGE else "PRM"
        for name, first in ((who, data.get("first_prm")), ("MC", data.get("first_mc"))):
            if first:
                flags.append((name, first[0], first[1]))
    for who, index, pk in flags:
        if pk is None:
            continue
        evidence.first_errors.append((who, index, pk))
        step = by_index.get(index)
        if step is not None:
            step.first_error.append(who)
    return evidence


def _attach_critiques(
    trajectory: Trajectory,
    scorer_id: int,
    steps: list[StepEvidence],
    by_index: dict[int, StepEvidence],
) -> None:
    """The judge's newest parsed critique of each step shown: a per-step (or step-by-step)
    reply's on its step, a trajectory (or all-at-once) reply's on the step it names. A
    binary-search reply names a half, not a step, and is left out."""
    by_pk = {s.pk: s for s in steps}
    replies = (
        JudgeReply.objects.filter(trajectory=trajectory, scorer_id=scorer_id, parse_error="")
        .exclude(key__contains=":b")
        .order_by("-id")
        .values_list("step_id", "verdict", "critique")
    )
    for reply_step, verdict, critique in replies[:1000]:
        step = by_pk.get(reply_step) if reply_step is not None else by_index.get(verdict)
        if step is not None and not step.critique:
            step.critique = critique
