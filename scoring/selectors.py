"""Named read queries for scoring. Lookups that start from a request go through a
``*_for_user`` helper, which raises 404 outside the user's projects."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import connection
from django.db.models import Exists, F, FloatField, OuterRef, Q, QuerySet
from django.db.models.functions import Abs
from django.http import Http404

from labeling.models import StepLabel
from scoring import methods, prm
from scoring.models import (
    AttributionRun,
    EvidenceChoice,
    JudgeReply,
    Scorer,
    ScoringRun,
    StepScore,
)
from trajectories.models import Project, Step, Trajectory
from trajectories.selectors import AnyUser, projects_for_user

RECENT_RUNS = 10


def scorers_for_project(project: Project) -> QuerySet[Scorer]:
    """Scorers a project may use: its own and the global ones."""
    return Scorer.objects.filter(Q(project=project) | Q(project__isnull=True))


def scorers_for_user(user: AnyUser) -> QuerySet[Scorer]:
    return Scorer.objects.filter(Q(project__in=projects_for_user(user)) | Q(project__isnull=True))


def scorer_get_for_user(user: AnyUser, pk: int) -> Scorer:
    scorer = scorers_for_user(user).filter(pk=pk).first() if user.is_authenticated else None
    if scorer is None:
        raise Http404("No such scorer.")
    return scorer


def scorer_latest(project: Project, name: str) -> Scorer | None:
    """The newest revision of ``name``; the project's own scorer wins over a global one."""
    return (
        scorers_for_project(project)
        .filter(name=name)
        .order_by(F("project_id").desc(nulls_last=True), "-id")
        .first()
    )


def scorer_id_for(project: Project, name: str) -> int:
    """The newest scorer called ``name`` usable in ``project`` (its own, or global)."""
    scorer = (
        Scorer.objects.filter(Q(project=project) | Q(project__isnull=True), name=name)
        .order_by("-id")
        .first()
    )
    if scorer is None:
        raise ValueError(f"no scorer named {name!r} in project {project.slug!r}")
    return scorer.pk


def scorer_choices(project: Project) -> list[Scorer]:
    """The newest revision of each scorer name the project may run (not external ones)."""
    seen: dict[str, Scorer] = {}
    queryset = (
        scorers_for_project(project)
        .exclude(kind=prm.EXTERNAL)
        .exclude(kind=prm.TRAINED_HEAD, artifact__isnull=True)
        .order_by("name", F("project_id").desc(nulls_last=True), "-id")
    )
    for scorer in queryset:
        seen.setdefault(scorer.name, scorer)
    return list(seen.values())


def scorers_with_scores(project: Project) -> list[Scorer]:
    """The newest revision of each scorer name the project may use, external ones (scores
    imported from elsewhere) included: the inputs attribution can read."""
    seen: dict[str, Scorer] = {}
    queryset = (
        scorers_for_project(project)
        .exclude(kind=prm.TRAINED_HEAD, artifact__isnull=True)
        .defer("artifact")
        .order_by("name", F("project_id").desc(nulls_last=True), "-id")
    )
    for scorer in queryset:
        seen.setdefault(scorer.name, scorer)
    return list(seen.values())


def scoring_runs_recent(project: Project, limit: int = RECENT_RUNS) -> list[ScoringRun]:
    return list(
        ScoringRun.objects.filter(project=project).select_related("scorer").order_by("-id")[:limit]
    )


def scoring_run_get_for_user(user: AnyUser, pk: int) -> ScoringRun:
    run = (
        ScoringRun.objects.select_related("project", "scorer")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if run is None:
        raise Http404("No such scoring run.")
    return run


def default_scorer(project: Project) -> Scorer | None:
    """The scorer whose scores the project last finished: the one to show by default."""
    run = (
        ScoringRun.objects.filter(
            project=project,
            status=ScoringRun.Status.DONE,
            kind__in=[ScoringRun.Kind.SCORE, ScoringRun.Kind.IMPORT],
        )
        .select_related("scorer")
        .order_by("-finished_at", "-id")
        .first()
    )
    return run.scorer if run else None


def step_scores_for_trajectory(
    trajectory: Trajectory, scorer: Scorer | None = None
) -> dict[int, float]:
    """Step id → score for one trajectory, from ``scorer`` or the project's default
    scorer; empty when there is none. One query."""
    scorer = scorer or default_scorer(trajectory.project)
    if scorer is None:
        return {}
    return dict(
        StepScore.objects.filter(step__trajectory=trajectory, scorer=scorer).values_list(
            "step_id", "value"
        )
    )


def latest_trained_head(project: Project) -> Scorer | None:
    return (
        Scorer.objects.filter(project=project, kind=prm.TRAINED_HEAD)
        .exclude(artifact__isnull=True)
        .order_by("-id")
        .first()
    )


def steps_most_uncertain(project: Project, scorer: Scorer | None = None) -> QuerySet[Step]:
    """Unlabeled labelable steps that have a score, most uncertain first (score closest
    to 0.5), from ``scorer`` or the latest trained head: the steps whose labels teach the
    head most. For a labeling queue's "most uncertain first" order."""
    scorer = scorer or latest_trained_head(project)
    if scorer is None:
        return Step.objects.none()
    score = StepScore.objects.filter(step=OuterRef("pk"), scorer=scorer).values("value")[:1]
    return (
        Step.objects.filter(trajectory__project=project, labelable=True)
        .exclude(Exists(StepLabel.objects.filter(step=OuterRef("pk"))))
        .annotate(score=score)
        .filter(score__isnull=False)
        .annotate(uncertainty=Abs(F("score") - 0.5, output_field=FloatField()))
        .order_by("uncertainty", "trajectory_id", "index")
    )


# --- Attribution ---------------------------------------------------------------------------


def attribution_runs_recent(project: Project, limit: int = RECENT_RUNS) -> list[AttributionRun]:
    """Runs over trajectories; token saliency of single steps shows on their steps."""
    return list(
        AttributionRun.objects.filter(project=project)
        .exclude(method=AttributionRun.Method.TOKEN_SALIENCY)
        .select_related("scorer")
        .order_by("-created_at", "-id")[:limit]
    )


def attribution_run_get_for_user(user: AnyUser, pk: int) -> AttributionRun:
    run = (
        AttributionRun.objects.select_related("project", "scorer")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if run is None:
        raise Http404("No such attribution run.")
    return run


def saliency_latest(step: Step, scorer: Scorer) -> AttributionRun | None:
    """The newest token-saliency run of ``step`` with ``scorer``."""
    return (
        AttributionRun.objects.filter(
            project_id=step.trajectory.project_id,
            method=AttributionRun.Method.TOKEN_SALIENCY,
            scorer=scorer,
            selection__step=step.pk,
        )
        .order_by("-id")
        .first()
    )


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
class AgentCredit:
    """One agent's Shapley value (players: agents), shown on its lane on the page."""

    agent: str
    value: float
    std_error: float | None = None


@dataclass
class TrajectoryEvidence:
    """Scores, Monte Carlo values, credits and first-error flags of one trajectory for one
    user, whole (every step, not one page of them), from one query."""

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

    def __post_init__(self) -> None:
        self.by_step = {step.pk: step for step in self.steps}

    @property
    def scorer_listed(self) -> bool:
        """The scorer shown has scores on this trajectory (is among ``scorers``)."""
        return self.scorer is not None and any(c.pk == self.scorer["id"] for c in self.scorers)

    @property
    def credit_scale(self) -> float:
        """The largest |credit|: the diverging colour scale runs from -scale to +scale."""
        magnitudes = [abs(s.credit) for s in self.steps if s.credit is not None]
        return max(magnitudes, default=0.0) or 1.0

    @property
    def score_map(self) -> dict[int, float | None]:
        return {s.pk: s.score for s in self.steps}

    @property
    def mc_map(self) -> dict[int, float | None]:
        return {s.pk: s.mc for s in self.steps}

    @property
    def scorer_runs_a_model(self) -> bool:
        """Whether token saliency can be asked of the scorer shown (a PRM, not imported
        scores or a generative judge)."""
        kind = (self.scorer or {}).get("kind")
        return bool(self.scorer) and kind not in (prm.EXTERNAL, prm.LLM_JUDGE)

    @property
    def has_scores(self) -> bool:
        return any(s.score is not None for s in self.steps)

    @property
    def has_mc(self) -> bool:
        return any(s.mc is not None for s in self.steps)

    @property
    def has_credits(self) -> bool:
        return any(s.credit is not None for s in self.steps)


_EVIDENCE_SQL = """
WITH st AS (
    SELECT s.id, s.index, s.labelable FROM trajectories_step s WHERE s.trajectory_id = %(t)s
), choice AS (
    SELECT c.scorer_id, c.credit_run_id FROM scoring_evidencechoice c
    WHERE c.user_id = %(me)s AND c.project_id = %(p)s
), scored AS (
    SELECT ss.scorer_id AS id, count(*) AS steps FROM scoring_stepscore ss
    JOIN st ON st.id = ss.step_id WHERE %(show)s GROUP BY ss.scorer_id
), scorer AS (
    -- The address's scorer, else the user's pick; else, by default, the last finished
    -- scorer among those with scores on this trajectory, before the project's last one.
    SELECT COALESCE((
        SELECT s.id FROM scoring_scorer s
        WHERE s.id = COALESCE(%(scorer)s::bigint, (SELECT scorer_id FROM choice))
          AND (s.project_id = %(p)s OR s.project_id IS NULL)
    ), (
        SELECT r.scorer_id FROM scoring_scoringrun r
        WHERE r.project_id = %(p)s AND r.status = 'done'
          AND r.kind IN ('score', 'import') AND r.scorer_id IS NOT NULL
        ORDER BY (r.scorer_id IN (SELECT id FROM scored)) DESC,
            r.finished_at DESC NULLS LAST, r.id DESC LIMIT 1
    )) AS id WHERE %(show)s
), credited AS (
    SELECT DISTINCT c.run_id FROM scoring_stepcredit c JOIN st ON st.id = c.step_id
    WHERE %(show)s
), runs AS (
    SELECT a.id, a.method, a.parameters, a.label_source, a.created_at, sc.name AS scorer
    FROM scoring_attributionrun a
    JOIN credited ON credited.run_id = a.id
    LEFT JOIN scoring_scorer sc ON sc.id = a.scorer_id
), chosen AS (
    SELECT id FROM runs
    ORDER BY (id = COALESCE(%(want)s::bigint, (SELECT credit_run_id FROM choice))) DESC NULLS LAST,
        created_at DESC, id DESC
    LIMIT 1
), mc AS (
    SELECT id FROM runs WHERE method = 'mc-prefix' ORDER BY created_at DESC, id DESC LIMIT 1
), agent_run AS (
    SELECT r.id FROM runs r
    WHERE r.method = 'shapley' AND EXISTS (
        SELECT 1 FROM scoring_stepcredit c JOIN st ON st.id = c.step_id
        WHERE c.run_id = r.id AND c.detail ? 'agent')
    ORDER BY (r.id = %(want)s) DESC NULLS LAST, r.created_at DESC, r.id DESC LIMIT 1
), agent_values AS (
    SELECT c.detail->>'agent' AS agent, max((c.detail->>'agent_value')::float) AS value,
           max((c.detail->>'agent_std_error')::float) AS std_error, min(st.index) AS first
    FROM scoring_stepcredit c JOIN st ON st.id = c.step_id
    WHERE c.run_id = (SELECT id FROM agent_run) AND c.detail ? 'agent'
    GROUP BY c.detail->>'agent'
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
    'steps', (SELECT json_agg(json_build_array(st.id, st.index, st.labelable, ss.value,
                  cc.value, cc.level, cc.detail, mm.value, mm.level) ORDER BY st.index)
              FROM st
              LEFT JOIN scoring_stepscore ss
                ON ss.step_id = st.id AND ss.scorer_id = (SELECT id FROM scorer)
              LEFT JOIN scoring_stepcredit cc
                ON cc.step_id = st.id AND cc.run_id = (SELECT id FROM chosen)
              LEFT JOIN scoring_stepcredit mm
                ON mm.step_id = st.id AND mm.run_id = (SELECT id FROM mc)),
    'labels', (SELECT json_agg(json_build_array(u.username, m.idx) ORDER BY m.idx, u.username)
               FROM (SELECT l.annotator_id, min(st.index) AS idx
                     FROM labeling_steplabel l JOIN st ON st.id = l.step_id
                     WHERE l.value < 0 AND (NOT %(blind)s OR l.annotator_id = %(me)s)
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
) -> TrajectoryEvidence:
    """Everything the trajectory page shows about scores and credit, in one query: the
    step scores of ``scorer_id`` (if the project may use it; else the user's pick in the
    project, ``EvidenceChoice``; else the scorer that last finished among those with scores
    on this trajectory, else the project's last finished one), the scorers with
    scores on this trajectory (the picker's choices), the attribution runs with credits
    on it and the credits of ``run_id`` (else the user's pick, else the newest), the
    Monte Carlo values of the newest ``mc-prefix`` run, and where labels, the PRM and the
    MC values put the first error.

    With ``show_scores`` False (annotators of a project that hides model scores, until
    they submit) only the label flags come back. With ``blind`` only the user's own labels
    count."""
    with connection.cursor() as cursor:
        cursor.execute(
            _EVIDENCE_SQL,
            {
                "t": trajectory.pk,
                "p": trajectory.project_id,
                "show": show_scores,
                "want": run_id,
                "scorer": scorer_id,
                "blind": blind,
                "me": user_id,
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
            mc=mc_level,
        )
        for pk, index, labelable, score, credit, level, detail, _mc_value, mc_level in (
            data.get("steps") or []
        )
    ]
    runs = [RunChoice(r["id"], r["method"], _run_label(r)) for r in data.get("runs") or []]
    chosen = next((r for r in runs if r.pk == data.get("chosen")), None)
    evidence = TrajectoryEvidence(
        visible=show_scores,
        steps=steps,
        scorer=data.get("scorer"),
        scorers=[
            ScorerChoice(r["id"], r["name"], r["revision"], r["steps"])
            for r in data.get("scorers") or []
        ],
        runs=runs,
        run=chosen,
        mc_run=data.get("mc"),
        agent_credits=[
            AgentCredit(agent, value, std_error)
            for agent, value, std_error in data.get("agent_credits") or []
            if value is not None
        ],
        agent_run=next((r for r in runs if r.pk == data.get("agent_run")), None),
    )
    by_index = {s.index: s for s in steps}
    scorer = data.get("scorer") or {}
    if show_scores and scorer.get("kind") == prm.LLM_JUDGE:
        _attach_critiques(trajectory, scorer["id"], steps, by_index)
    flags: list[tuple[str, int]] = [(name, index) for name, index in data.get("labels") or []]
    if show_scores:
        who = "Judge" if scorer.get("kind") == prm.LLM_JUDGE else "PRM"
        flags += _model_first_errors(steps, data.get("steps") or [], who)
    for who, index in flags:
        step = by_index.get(index)
        if step is not None:
            step.first_error.append(who)
            evidence.first_errors.append((who, index, step.pk))
    return evidence


def _attach_critiques(
    trajectory: Trajectory,
    scorer_id: int,
    steps: list[StepEvidence],
    by_index: dict[int, StepEvidence],
) -> None:
    """The judge's newest parsed critique of each step: a per-step (or step-by-step)
    reply's on its step, a trajectory (or all-at-once) reply's on the step it names. A
    binary-search reply names a half, not a step, and is left out."""
    by_pk = {s.pk: s for s in steps}
    replies = (
        JudgeReply.objects.filter(trajectory=trajectory, scorer_id=scorer_id, parse_error="")
        .exclude(key__contains=":b")
        .order_by("-id")
        .values_list("step_id", "verdict", "critique")
    )
    for step_id, verdict, critique in replies[:1000]:
        step = by_pk.get(step_id) if step_id is not None else by_index.get(verdict)
        if step is not None and not step.critique:
            step.critique = critique


def _model_first_errors(
    steps: list[StepEvidence], rows: list[list[Any]], who: str = "PRM"
) -> list[tuple[str, int]]:
    """First errors by the scorer (value under 0.5; ``who``: "PRM", or "Judge" for an LLM
    judge) and by the MC values (collapse to 0)."""
    found: list[tuple[str, int]] = []
    scored = [s for s in steps if s.score is not None]
    if scored:
        values = np.array([s.score for s in scored], dtype=np.float64)
        first = methods.first_error_prm(values, np.array([0, values.size]))
        if first[0] >= 0:
            found.append((who, scored[int(first[0])].index))
    valued = [(s, row) for s, row in zip(steps, rows, strict=True) if row[8] is not None]
    if valued:
        levels = np.array([row[8] for _, row in valued], dtype=np.float64)
        # The task's mean outcome is the first prefix's value minus its advantage.
        root = np.array([valued[0][1][8] - valued[0][1][7]], dtype=np.float64)
        first = methods.first_error_mc(levels, np.array([0, levels.size]), root)
        if first[0] >= 0:
            found.append(("MC", valued[int(first[0])][0].index))
    return found


def evidence_choice_resolve(
    user_id: int, project: Project, *, scorer_id: int | None, run_id: int | None
) -> tuple[Scorer | None, int | None]:
    """The scorer (None: the project's default) and the attribution run (None: the
    newest) a trajectory page of ``project`` shows to the user: those the page's address
    asks for, else those the user last picked in the project (``EvidenceChoice``). A
    scorer the project may not use counts as not asked for."""
    saved = EvidenceChoice.objects.filter(user_id=user_id, project=project).first()
    wanted = scorer_id if scorer_id is not None else (saved.scorer_id if saved else None)
    scorer = scorers_for_project(project).filter(pk=wanted).first() if wanted else None
    if run_id is None and saved is not None:
        run_id = saved.credit_run_id
    return scorer, run_id
