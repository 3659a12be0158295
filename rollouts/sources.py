"""The ``mc[:<policy>][:hard|:soft]`` label source: Monte Carlo values from rollouts
(``StepMC``), hard (+1 when any continuation succeeded) or soft >= threshold, one
policy's or each step's newest value of any policy. Registered with labeling's label
sources by ``RolloutsConfig.ready()``, since it reads rollouts' tables."""

from __future__ import annotations

from typing import Any

from django.db.models import F, Q

from labeling.sources import LabelSource, label_source_register
from rollouts.models import Policy
from trajectories.models import Project

MC_ESTIMATES = ("hard", "soft")


def mc_source_parts(name: str) -> tuple[str, str]:
    """(policy, estimate) from what follows ``mc:``: ``""``, ``soft``, ``p``, ``p:soft``."""
    policy, _, estimate = name.rpartition(":")
    if estimate not in MC_ESTIMATES:
        policy, estimate = name, "hard"
    return policy, estimate


@label_source_register("mc")
def mc_source_sql(project: Project, source: LabelSource, scoped: bool) -> tuple[str, list[Any]]:
    threshold = source.threshold
    policy_name, estimate = mc_source_parts(source.name)
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
