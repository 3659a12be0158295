"""Label sources: which labels stand as the reference in a comparison or an export.

    human:<username>    one annotator's submitted labels
    human:majority      the value most human annotators gave (a tie gives no label)
    human:adjudicated   a reviewer's final label
    import:<source>     labels that came with imported data, e.g. import:processbench
    model:<scorer>      a scorer's step scores, >= threshold good (+1), else bad (-1)
    consensus           human:majority where there is one, else model:<scorer>
    mc[:<policy>][:hard|:soft]
                        Monte Carlo values from rollouts (rollouts.models.StepMC): hard
                        (default: +1 when any continuation succeeded) or soft >= threshold;
                        one policy's, or each step's newest value of any policy

Each source resolves to SQL yielding ``(step_id, value)`` rows for one project, so
comparisons and exports can join it with steps and scores inside PostgreSQL instead of
loading labels into Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trajectories.models import Project

IMPORTED_PREFIX = "import:"
KINDS = ("human", "import", "model", "consensus", "mc")
MC_ESTIMATES = ("hard", "soft")


@dataclass(frozen=True)
class LabelSource:
    kind: str
    name: str = ""
    threshold: float = 0.5
    scorer: str = ""  # for consensus: the model that fills in where humans did not label

    def __str__(self) -> str:
        if self.kind == "consensus":
            return f"consensus({self.scorer})"
        return f"{self.kind}:{self.name}"


def label_source_parse(text: str, *, threshold: float = 0.5, scorer: str = "") -> LabelSource:
    """Parse ``--labels``; a ValueError names what is wrong and what is accepted."""
    text = text.strip()
    if text == "consensus":
        if not scorer:
            raise ValueError("consensus needs a scorer to fill in where humans did not label")
        return LabelSource("consensus", threshold=threshold, scorer=scorer)
    kind, _, name = text.partition(":")
    if kind == "mc":
        # The name holds what follows "mc:" as written, so str() gives the text back.
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold {threshold} is outside 0..1")
        return LabelSource("mc", name, threshold=threshold)
    if kind not in KINDS or not name:
        raise ValueError(
            f"unknown label source {text!r}; use human:<username>, human:majority,"
            " human:adjudicated, import:<source>, model:<scorer>, consensus or"
            " mc[:<policy>][:hard|:soft]"
        )
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold {threshold} is outside 0..1")
    return LabelSource(kind, name, threshold=threshold)


def label_source_sql(
    project: Project, source: LabelSource, *, scoped: bool = True
) -> tuple[str, list[Any]]:
    """SQL selecting ``(step_id, value)`` for every step of ``project`` that the source
    labels; raises ValueError when the named annotator or scorer does not exist.

    ``scoped=False`` is for a caller that joins the rows on its own steps of the project:
    the joins that keep other projects' steps out are left out where that saves a pass
    over the steps (their rows can never match), so the result may hold such rows."""
    project_steps = (
        " JOIN trajectories_step s ON s.id = {table}.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE t.project_id = %s AND "
    )
    if source.kind == "human" and source.name == "majority":
        return _majority_sql(project)
    if source.kind == "human" and source.name == "adjudicated":
        if not scoped:
            return "SELECT f.step_id, f.value FROM labeling_finallabel f", []
        return (
            "SELECT f.step_id, f.value FROM labeling_finallabel f"
            + project_steps.format(table="f").removesuffix(" AND "),
            [project.pk],
        )
    if source.kind in ("human", "import"):
        username = source.name if source.kind == "human" else IMPORTED_PREFIX + source.name
        if source.kind == "human" and username.startswith(IMPORTED_PREFIX):
            raise ValueError(f"{username!r} is an import source; use {username}")
        select = (
            "SELECT l.step_id, l.value FROM labeling_steplabel l"
            " JOIN auth_user u ON u.id = l.annotator_id"
        )
        where = "u.username = %s AND l.status = 'submitted'"
        if not scoped:
            return f"{select} WHERE {where}", [username]
        return f"{select}{project_steps.format(table='l')}{where}", [project.pk, username]
    if source.kind == "model":
        return _model_sql(project, source.name, source.threshold, scoped=scoped)
    if source.kind == "mc":
        return _mc_sql(project, source.name, source.threshold)
    majority, majority_params = _majority_sql(project)
    model, model_params = _model_sql(project, source.scorer, source.threshold, scoped=scoped)
    return (
        f"SELECT COALESCE(h.step_id, m.step_id) AS step_id, COALESCE(h.value, m.value) AS value"
        f" FROM ({majority}) h FULL OUTER JOIN ({model}) m ON m.step_id = h.step_id",
        [*majority_params, *model_params],
    )


def _majority_sql(project: Project) -> tuple[str, list[Any]]:
    # Kept per step by triggers on the step labels (labeling.models.StepMajority): the
    # value with the strictly highest count among human annotators' submitted labels,
    # NULL on a tie. Reading it is an index scan in step order, where counting the votes
    # here cost a second of CPU per million labels (bench/compare.py).
    return (
        "SELECT m.step_id, m.value FROM labeling_stepmajority m"
        " WHERE m.project_id = %s AND m.value IS NOT NULL",
        [project.pk],
    )


def _model_sql(
    project: Project, scorer_name: str, threshold: float, *, scoped: bool = True
) -> tuple[str, list[Any]]:
    scorer_id = scorer_id_for(project, scorer_name)
    select = (
        "SELECT sc.step_id, CASE WHEN sc.value >= %s THEN 1 ELSE -1 END AS value"
        " FROM scoring_stepscore sc"
    )
    if not scoped:
        return f"{select} WHERE sc.scorer_id = %s", [threshold, scorer_id]
    return (
        f"{select}"
        " JOIN trajectories_step s ON s.id = sc.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE t.project_id = %s AND sc.scorer_id = %s",
        [threshold, project.pk, scorer_id],
    )


def mc_source_parts(name: str) -> tuple[str, str]:
    """(policy, estimate) from what follows ``mc:``: ``""``, ``soft``, ``p``, ``p:soft``."""
    policy, _, estimate = name.rpartition(":")
    if estimate not in MC_ESTIMATES:
        policy, estimate = name, "hard"
    return policy, estimate


def _mc_sql(project: Project, name: str, threshold: float) -> tuple[str, list[Any]]:
    from django.db.models import F, Q

    from rollouts.models import Policy

    policy_name, estimate = mc_source_parts(name)
    good = "mc.hard" if estimate == "hard" else "mc.soft >= %s"
    params: list[Any] = [] if estimate == "hard" else [threshold]
    policy_filter = ""
    policy = None
    if policy_name:
        policy = (
            Policy.objects.filter(Q(project=project) | Q(project__isnull=True), name=policy_name)
            .order_by(F("project_id").desc(nulls_last=True))
            .first()
        )
        if policy is None:
            raise ValueError(f"no policy named {policy_name!r} in project {project.slug!r}")
        policy_filter = " AND mc.policy_id = %s"
    # Without a policy, each step's newest value, whichever policy gave it.
    sql = (
        f"SELECT DISTINCT ON (mc.step_id) mc.step_id, CASE WHEN {good} THEN 1 ELSE -1 END"
        " AS value FROM rollouts_stepmc mc"
        " JOIN trajectories_step s ON s.id = mc.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        f" WHERE t.project_id = %s{policy_filter}"
        " ORDER BY mc.step_id, mc.updated_at DESC, mc.id DESC"
    )
    params.append(project.pk)
    if policy is not None:
        params.append(policy.pk)
    return sql, params


def scorer_id_for(project: Project, name: str) -> int:
    """The newest scorer called ``name`` usable in ``project`` (its own, or global)."""
    from django.db.models import Q

    from scoring.models import Scorer

    scorer = (
        Scorer.objects.filter(Q(project=project) | Q(project__isnull=True), name=name)
        .order_by("-id")
        .first()
    )
    if scorer is None:
        raise ValueError(f"no scorer named {name!r} in project {project.slug!r}")
    return scorer.pk
