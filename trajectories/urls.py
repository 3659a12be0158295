from django.urls import path

from trajectories import views

urlpatterns = [
    path("p/<slug:slug>/trajectories/", views.trajectory_list, name="trajectory-list"),
    path("p/<slug:slug>/tree/", views.task_tree, name="task-tree"),
    path("p/<slug:slug>/imports/new/", views.import_new, name="import-new"),
    path("imports/<int:pk>/", views.import_detail, name="import-detail"),
    path("imports/<int:pk>/cancel/", views.import_cancel, name="import-cancel"),
    path("steps/<int:pk>/content/", views.step_content, name="step-content"),
    path("t/<int:pk>/text/<str:field>/", views.trajectory_text, name="trajectory-text"),
]
