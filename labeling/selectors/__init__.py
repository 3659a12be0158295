"""Named read queries for labeling, by topic: the labeling surface, its settings, a step's
history and who sees labels (``surface.py``), queues (``queues.py``), review
(``review.py``). Lookups that start from a request go through a ``*_for_user`` helper,
which raises 404 for anything outside the user's projects. The names below are the
app's selector interface; callers import them from here."""

from labeling.selectors.queues import (
    QUEUE_ITEMS_PAGE_SIZE,
    AnnotatorProgress,
    SpanProgress,
    queue_annotators,
    queue_get_for_user,
    queue_items_page,
    queue_progress,
    queue_span_progress,
    queues_for_project,
    queues_for_user,
)
from labeling.selectors.review import (
    REVIEW_PAGE_SIZE,
    REVIEW_SHOWS,
    ReviewRow,
    ReviewTable,
    review_candidates,
    review_table,
)
from labeling.selectors.state import (
    QUEUE_PROGRESS_SQL,
    labeling_state_flag_register,
    labeling_state_for_user,
    labeling_states_reread,
    labeling_states_reread_rows,
    labeling_states_reread_statement,
)
from labeling.selectors.surface import (
    REVIEWER_ROLES,
    STEPS_PAGE_SIZE,
    AnyUser,
    HistoryEntry,
    LabelingSettings,
    LabelingState,
    Lease,
    QueueProgress,
    active_schema,
    can_compare,
    is_reviewer,
    labelled_step_count,
    labels_visible_to,
    step_label_history,
    step_rows,
    visible_labels,
)

__all__ = [
    "QUEUE_ITEMS_PAGE_SIZE",
    "QUEUE_PROGRESS_SQL",
    "REVIEWER_ROLES",
    "REVIEW_PAGE_SIZE",
    "REVIEW_SHOWS",
    "STEPS_PAGE_SIZE",
    "AnnotatorProgress",
    "AnyUser",
    "HistoryEntry",
    "LabelingSettings",
    "LabelingState",
    "Lease",
    "QueueProgress",
    "ReviewRow",
    "ReviewTable",
    "SpanProgress",
    "active_schema",
    "can_compare",
    "is_reviewer",
    "labeling_state_flag_register",
    "labeling_state_for_user",
    "labeling_states_reread",
    "labeling_states_reread_rows",
    "labeling_states_reread_statement",
    "labelled_step_count",
    "labels_visible_to",
    "queue_annotators",
    "queue_get_for_user",
    "queue_items_page",
    "queue_progress",
    "queue_span_progress",
    "queues_for_project",
    "queues_for_user",
    "review_candidates",
    "review_table",
    "step_label_history",
    "step_rows",
    "visible_labels",
]

# Span labels (``spans.py``).
from labeling.selectors.spans import (
    SpanHistoryEntry,
    SpanReview,
    final_spans_visible,
    span_agreement_by_schema,
    span_history,
    span_review,
    span_schemas_active,
    spans_visible,
)

__all__ += [
    "SpanHistoryEntry",
    "SpanReview",
    "final_spans_visible",
    "span_agreement_by_schema",
    "span_history",
    "span_review",
    "span_schemas_active",
    "spans_visible",
]
