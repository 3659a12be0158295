"""Writes of the exports app, by topic: an export's request (``requests.py``) resolved
once into its plan (``plan.py``), reading its trajectories in one snapshot
(``reading.py``, and ``bulk.py`` for the formats read in one statement), writing it and
running it as a job (``exports.py``), versioned batches (``batches.py``), the preview
(``preview.py``), saved selections (``selections.py``). The names below are the app's
service interface; callers import them from here."""

from exports.services.batches import (
    batch_name_check,
    batch_version_add,
    export_batch_get_or_create,
)
from exports.services.exports import (
    export_cancel,
    export_job_run,
    export_manifest,
    export_start,
    export_write,
    manifest_json,
)
from exports.services.plan import ExportPlan, export_plan_build, export_plan_of
from exports.services.preview import ExportPreview, export_preview
from exports.services.reading import ExportCancelled, export_trajectories
from exports.services.requests import ExportRequest
from exports.services.selections import selection_delete, selection_save

__all__ = [
    "ExportCancelled",
    "ExportPlan",
    "ExportPreview",
    "ExportRequest",
    "batch_name_check",
    "batch_version_add",
    "export_batch_get_or_create",
    "export_cancel",
    "export_job_run",
    "export_manifest",
    "export_plan_build",
    "export_plan_of",
    "export_preview",
    "export_start",
    "export_trajectories",
    "export_write",
    "manifest_json",
    "selection_delete",
    "selection_save",
]
