"""The project's URLs and one view that refuses, for the 403 page's test."""

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path

from stepscope.urls import urlpatterns as project_urlpatterns


def refuse(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("Only researchers and admins export data.")


urlpatterns = [*project_urlpatterns, path("test-refusal/", refuse)]
