"""Reads of the exports app: access helpers (404 for outsiders) and lists."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from exports.models import ExportJob, Selection
from trajectories.models import Project
from trajectories.selectors import AnyUser, projects_for_user


def export_job_get_for_user(user: AnyUser, pk: int) -> ExportJob:
    job = (
        ExportJob.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if job is None:
        raise Http404("No such export.")
    return job


def selection_get_for_user(user: AnyUser, pk: int) -> Selection:
    selection = (
        Selection.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if selection is None:
        raise Http404("No such selection.")
    return selection


def selections_for_project(project: Project) -> QuerySet[Selection]:
    return Selection.objects.filter(project=project).select_related("created_by").order_by("name")
