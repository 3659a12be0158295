"""Writes for the scoring app, by topic: PRM scores (scorers, scoring runs, imported
scores, the trained head), credit attribution and models' failure attributions
(``verdicts.py``). The names below are the app's service
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
from scoring.services.failure_attributions import VerdictInput, failure_verdicts_write
from scoring.services.imported import (
    IMPORT_BATCH,
    ImportProblem,
    ScoresRejected,
    scores_import,
    scores_import_records,
)
from scoring.services.judges import (
    JudgeStopped,
    judge_create,
    judge_prompt_create,
    judge_spec,
)
from scoring.services.runners import ScoringError, kind_runner, scorer_spec, trajectory_inputs
from scoring.services.scores import (
    scorer_check,
    scorer_chunk_steps,
    scorer_create,
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
    "JudgeStopped",
    "ScoresRejected",
    "ScoringError",
    "VerdictInput",
    "attribution_chunk_run",
    "attribution_run_cancel",
    "attribution_run_fail",
    "attribution_run_plan",
    "attribution_run_start",
    "credits_write",
    "evidence_choice_save",
    "failure_verdicts_write",
    "judge_create",
    "judge_prompt_create",
    "judge_spec",
    "kind_runner",
    "read_tables",
    "scorer_check",
    "scorer_chunk_steps",
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
    "trajectory_inputs",
]
