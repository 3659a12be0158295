"""Writes for the scoring app, by topic: PRM scores (scorers, scoring runs, imported
scores, the trained head) and credit attribution. The names below are the app's service
interface; callers import them from here."""

from scoring.services.attribution import (
    AttributionError,
    attribution_chunk_run,
    attribution_run_cancel,
    attribution_run_fail,
    attribution_run_plan,
    attribution_run_start,
    credits_write,
    read_tables,
)
from scoring.services.choices import evidence_choice_save
from scoring.services.scores import (
    IMPORT_BATCH,
    ImportProblem,
    ScoresRejected,
    ScoringError,
    _trajectory_inputs,
    scorer_check,
    scorer_create,
    scorer_spec,
    scores_import,
    scores_import_records,
    scores_upsert,
    scoring_chunk_score,
    scoring_run_cancel,
    scoring_run_fail,
    scoring_run_plan,
    scoring_run_start,
)
from scoring.services.training import NEUTRAL_CHOICES, scorer_train_run, scorer_train_start

__all__ = [
    "IMPORT_BATCH",
    "NEUTRAL_CHOICES",
    "AttributionError",
    "ImportProblem",
    "ScoresRejected",
    "ScoringError",
    "_trajectory_inputs",
    "attribution_chunk_run",
    "attribution_run_cancel",
    "attribution_run_fail",
    "attribution_run_plan",
    "attribution_run_start",
    "credits_write",
    "evidence_choice_save",
    "read_tables",
    "scorer_check",
    "scorer_create",
    "scorer_spec",
    "scorer_train_run",
    "scorer_train_start",
    "scores_import",
    "scores_import_records",
    "scores_upsert",
    "scoring_chunk_score",
    "scoring_run_cancel",
    "scoring_run_fail",
    "scoring_run_plan",
    "scoring_run_start",
]
