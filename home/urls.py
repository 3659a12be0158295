from django.urls import path

from home import views

urlpatterns = [
    path("", views.project_list, name="project-list"),
    path("p/<slug:slug>/", views.project_home, name="project-home"),
]
