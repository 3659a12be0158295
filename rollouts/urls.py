from django.urls import path

from rollouts import views

urlpatterns = [
    path("p/<slug:slug>/rollouts/", views.rollouts_section, name="rollouts-section"),
    path("p/<slug:slug>/rollouts/jobs/", views.rollout_job_start, name="rollout-job-start"),
    path("p/<slug:slug>/rollouts/policies/", views.policy_create, name="policy-create"),
    path("rollout-jobs/<int:pk>/", views.rollout_job_row, name="rollout-job-row"),
    path("rollout-jobs/<int:pk>/cancel/", views.rollout_job_cancel, name="rollout-job-cancel"),
    path("steps/<int:pk>/rollouts/", views.step_rollouts, name="step-rollouts"),
    path("t/<int:pk>/policy-mc/", views.trajectory_policy_mc, name="trajectory-policy-mc"),
    path("steps/<int:pk>/rollouts/start/", views.step_rollout_start, name="step-rollout-start"),
]
