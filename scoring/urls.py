from django.urls import path

from scoring import views

urlpatterns = [
    path("p/<slug:slug>/scoring/", views.scoring_section, name="scoring-section"),
    path("p/<slug:slug>/scoring/runs/", views.scoring_run_start, name="scoring-run-start"),
    path("p/<slug:slug>/scoring/train/", views.scorer_train, name="scorer-train"),
    path("p/<slug:slug>/scoring/scorers/", views.scorer_create, name="scorer-create"),
    path("scoring-runs/<int:pk>/", views.scoring_run_row, name="scoring-run-row"),
    path("scoring-runs/<int:pk>/cancel/", views.scoring_run_cancel, name="scoring-run-cancel"),
    path(
        "p/<slug:slug>/attribution/runs/",
        views.attribution_run_start,
        name="attribution-run-start",
    ),
    path("attribution-runs/<int:pk>/", views.attribution_run_row, name="attribution-run-row"),
    path(
        "attribution-runs/<int:pk>/cancel/",
        views.attribution_run_cancel,
        name="attribution-run-cancel",
    ),
    path("steps/<int:pk>/saliency/", views.step_saliency, name="step-saliency"),
    path("t/<int:pk>/evidence/", views.trajectory_evidence, name="trajectory-evidence"),
    path(
        "t/<int:pk>/evidence/choose/",
        views.trajectory_evidence_choose,
        name="trajectory-evidence-choose",
    ),
]
