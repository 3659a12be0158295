from django.urls import path

from evaluation import alignment_views, views

urlpatterns = [
    # Model against humans, and where failed rollouts go wrong.
    path("p/<slug:slug>/compare/", views.compare_page, name="compare"),
    path("p/<slug:slug>/compare/steps/", views.compare_steps, name="compare-steps"),
    path(
        "p/<slug:slug>/compare/first-errors/",
        views.compare_first_errors,
        name="compare-first-errors",
    ),
    path("p/<slug:slug>/compare/humans/", views.compare_humans, name="compare-humans"),
    path("p/<slug:slug>/compare/decisive/", views.compare_decisive, name="compare-decisive"),
    path(
        "p/<slug:slug>/compare/disagreements/",
        views.compare_disagreements,
        name="compare-disagreements",
    ),
    path(
        "p/<slug:slug>/compare/disagreements/queue/",
        views.compare_disagreement_queue,
        name="compare-disagreement-queue",
    ),
    path("p/<slug:slug>/failures/", views.failure_overview, name="failure-overview"),
    path("p/<slug:slug>/failures/list/", views.failure_list, name="failure-list"),
    # How far to trust each prompt version of an LLM judge.
    path(
        "p/<slug:slug>/judges/<int:pk>/alignment/",
        alignment_views.judge_alignment,
        name="judge-alignment",
    ),
    path(
        "p/<slug:slug>/judges/<int:pk>/alignment/examples/",
        alignment_views.judge_alignment_examples,
        name="judge-alignment-examples",
    ),
    path(
        "p/<slug:slug>/judges/<int:pk>/alignment/score/",
        alignment_views.judge_alignment_score,
        name="judge-alignment-score",
    ),
    # A rollout against another of its task.
    path("t/<int:pk>/compare/", views.rollout_diff, name="rollout-diff"),
]
