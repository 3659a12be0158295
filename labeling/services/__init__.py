"""Writes for labeling, by topic: step labels, undo from history and final (adjudicated)
labels (``labels.py``), submitting a trajectory (``submit.py``), the decisive failure
(``decisive.py``), many labels in one request (``bulk.py``), schemas, project labeling
settings and guidelines (``schemas.py``), queues and their leases (``queues.py``), and
what they share (``common.py``). The names below are the app's service interface;
callers import them from here.

Every function here is a ``<thing>_<verb>`` service with keyword-only arguments that runs
in one transaction. A request that breaks a rule raises :class:`LabelingError` with an
HTTP status and a sentence for the annotator, before anything is written.
"""

from labeling.services.bulk import (
    LABEL_BATCH_MAX,
    BulkLabelsRejected,
    BulkLabelsResult,
    step_labels_set,
)
from labeling.services.common import (
    MAX_CORRECTION_CHARS,
    MAX_RATIONALE_CHARS,
    MAX_TIME_SPENT_MS,
    LabelingError,
    LeaseLost,
    NotAllowed,
    StaleSchema,
)
from labeling.services.decisive import (
    AgentSteps,
    agent_steps,
    agent_steps_many,
    decisive_failure_set,
)
from labeling.services.labels import (
    StepLabelResult,
    final_label_set,
    step_label_set,
    step_label_undo,
)
from labeling.services.queues import (
    queue_assignment_release,
    queue_create,
    queue_item_take,
    queue_items_insert,
    queue_order_set,
    queue_set_active,
    queue_uncertainty_refresh,
    queues_uncertainty_refresh,
)
from labeling.services.schemas import (
    label_schema_create,
    label_schema_save,
    labeling_settings_set,
    project_guidelines_set,
)
from labeling.services.submit import trajectory_submit

__all__ = [
    "LABEL_BATCH_MAX",
    "MAX_CORRECTION_CHARS",
    "MAX_RATIONALE_CHARS",
    "MAX_TIME_SPENT_MS",
    "AgentSteps",
    "BulkLabelsRejected",
    "BulkLabelsResult",
    "LabelingError",
    "LeaseLost",
    "NotAllowed",
    "StaleSchema",
    "StepLabelResult",
    "agent_steps",
    "agent_steps_many",
    "decisive_failure_set",
    "final_label_set",
    "label_schema_create",
    "label_schema_save",
    "labeling_settings_set",
    "project_guidelines_set",
    "queue_assignment_release",
    "queue_create",
    "queue_item_take",
    "queue_items_insert",
    "queue_order_set",
    "queue_set_active",
    "queue_uncertainty_refresh",
    "queues_uncertainty_refresh",
    "step_label_set",
    "step_label_undo",
    "step_labels_set",
    "trajectory_submit",
]

# Span labels (``spans.py``).
from labeling.services.spans import (
    final_span_delete,
    final_span_pick,
    final_span_set,
    span_label_delete,
    span_label_set,
    span_label_undo,
    span_schema_of,
    span_schema_save,
    span_undo_is_next,
)

__all__ += [
    "final_span_delete",
    "final_span_pick",
    "final_span_set",
    "span_label_delete",
    "span_label_set",
    "span_label_undo",
    "span_schema_of",
    "span_schema_save",
    "span_undo_is_next",
]
