from django.urls import path

from evaluation.views import alignment, compare, failures, review, rubrics

urlpatterns = [
    # Model against humans, and where failed rollouts go wrong.
    path("p/<slug:slug>/compare/", compare.compare_page, name="compare"),
    path("p/<slug:slug>/compare/steps/", compare.compare_steps, name="compare-steps"),
    path(
        "p/<slug:slug>/compare/first-errors/",
        compare.compare_first_errors,
        name="compare-first-errors",
    ),
    path("p/<slug:slug>/compare/humans/", compare.compare_humans, name="compare-humans"),
    path("p/<slug:slug>/compare/decisive/", compare.compare_decisive, name="compare-decisive"),
    path("p/<slug:slug>/compare/rubrics/", rubrics.compare_rubrics, name="compare-rubrics"),
    path(
        "p/<slug:slug>/compare/disagreements/",
        compare.compare_disagreements,
        name="compare-disagreements",
    ),
    path(
        "p/<slug:slug>/compare/disagreements/queue/",
        compare.compare_disagreement_queue,
        name="compare-disagreement-queue",
    ),
    # The trajectories to adjudicate (labeling's review pages open each).
    path("p/<slug:slug>/review/", review.review_list, name="review-list"),
    path("p/<slug:slug>/failures/", failures.failure_overview, name="failure-overview"),
    path("p/<slug:slug>/failures/list/", failures.failure_list, name="failure-list"),
    # How far to trust each prompt version of an LLM judge.
    path(
        "p/<slug:slug>/judges/<int:pk>/alignment/",
        alignment.judge_alignment,
        name="judge-alignment",
    ),
    path(
        "p/<slug:slug>/judges/<int:pk>/alignment/examples/",
        alignment.judge_alignment_examples,
        name="judge-alignment-examples",
    ),
    path(
        "p/<slug:slug>/judges/<int:pk>/alignment/score/",
        alignment.judge_alignment_score,
        name="judge-alignment-score",
    ),
    # A rollout against another of its task.
    path("t/<int:pk>/compare/", failures.rollout_diff, name="rollout-diff"),
]
