from django.urls import path

from home import follow, project_settings, views

urlpatterns = [
    path("", views.project_list, name="project-list"),
    path("p/<slug:slug>/", views.project_home, name="project-home"),
    path("p/<slug:slug>/settings/", project_settings.project_settings, name="project-settings"),
    path("p/<slug:slug>/delete/", project_settings.project_delete, name="project-delete"),
    path("p/<slug:slug>/follow/", follow.follow_sources, name="follow-sources"),
    path(
        "p/<slug:slug>/follow/<int:pk>/remove/",
        follow.follow_source_delete,
        name="follow-source-remove",
    ),
    path("deletions/<int:pk>/", project_settings.project_deletion, name="project-deletion"),
    path("p/<slug:slug>/members/", views.member_list, name="member-list"),
    path("p/<slug:slug>/members/<int:pk>/role/", views.member_role, name="member-role"),
    path("p/<slug:slug>/members/<int:pk>/remove/", views.member_remove_view, name="member-remove"),
    path("p/<slug:slug>/members/invites/", views.invite_new, name="invite-new"),
    path(
        "p/<slug:slug>/members/invites/<int:pk>/revoke/", views.invite_revoke, name="invite-revoke"
    ),
    path("invite/<str:secret>/", views.invite_accept_view, name="invite-accept"),
]
