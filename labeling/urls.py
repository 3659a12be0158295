from django.urls import path

from labeling.views import (
    decisive,
    labels,
    queues,
    review,
    rubrics,
    schemas,
    span_review,
    span_schemas,
    spans,
)

urlpatterns = [
    # The labeling surface: the trajectory page, and its writes and partials.
    path("t/<int:pk>/", labels.trajectory_detail, name="trajectory-detail"),
    path("steps/<int:pk>/label/", labels.step_label, name="step-label"),
    path("steps/<int:pk>/history/", labels.step_history, name="step-history"),
    path("t/<int:pk>/steps/", labels.trajectory_steps, name="trajectory-steps"),
    path("t/<int:pk>/undo/", labels.label_undo, name="label-undo"),
    path("t/<int:pk>/submit/", labels.trajectory_submit, name="trajectory-submit"),
    path("t/<int:pk>/decisive/", decisive.decisive_failure, name="decisive-failure"),
    path("p/<slug:slug>/guidelines/", labels.guidelines, name="guidelines"),
    # Queues.
    path("p/<slug:slug>/queues/", queues.queue_list, name="queue-list"),
    path("p/<slug:slug>/queues/new/", queues.queue_create, name="queue-create"),
    path("q/<int:pk>/", queues.queue_detail, name="queue-detail"),
    path("q/<int:pk>/next/", queues.queue_next, name="queue-next"),
    path("q/<int:pk>/skip/", queues.queue_skip, name="queue-skip"),
    path("q/<int:pk>/active/", queues.queue_active, name="queue-active"),
    # Review and schemas.
    path("t/<int:pk>/review/", review.review_trajectory, name="review-trajectory"),
    path("steps/<int:pk>/final/", review.final_label, name="final-label"),
    path("t/<int:pk>/review/spans/", span_review.review_spans, name="review-spans"),
    path("p/<slug:slug>/schema/", schemas.schema_edit, name="schema-edit"),
    # Span labels: the trajectory page's span panel, and removing one of yours.
    path("t/<int:pk>/spans/", spans.trajectory_spans, name="trajectory-spans"),
    path("spans/<int:pk>/delete/", spans.span_delete, name="span-delete"),
    path("p/<slug:slug>/span-schemas/", span_schemas.span_schemas, name="span-schemas"),
    # Rubrics and episode verdicts (labeling/views/rubrics.py).
    path("p/<slug:slug>/rubric/", rubrics.rubric_edit, name="rubric-edit"),
    path("t/<int:pk>/rubric/", rubrics.rubric_panel, name="rubric-panel"),
    path("t/<int:pk>/episode/", rubrics.episode_panel, name="episode-panel"),
]
