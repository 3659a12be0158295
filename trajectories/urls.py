from django.urls import path

from trajectories import views

urlpatterns = [
    path("", views.project_list, name="project-list"),
    path("p/<slug:slug>/", views.project_home, name="project-home"),
    path("p/<slug:slug>/trajectories/", views.trajectory_list, name="trajectory-list"),
    path("p/<slug:slug>/tree/", views.task_tree, name="task-tree"),
    path("p/<slug:slug>/imports/new/", views.import_new, name="import-new"),
    path("imports/<int:pk>/", views.import_detail, name="import-detail"),
    path("t/<int:pk>/compare/", views.trajectory_compare, name="trajectory-compare"),
    path("t/<int:pk>/", views.trajectory_detail, name="trajectory-detail"),
    path("steps/<int:pk>/content/", views.step_content, name="step-content"),
]
