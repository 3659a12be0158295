"""What the evaluation pages share: the project lookup for those who may compare, links
that keep a list's parameters, and the context every page starts from."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.urls import reverse

from labeling import selectors
from stepscope.web import HtmxHttpRequest
from trajectories.models import Project
from trajectories.selectors import membership_role, project_get_for_user


def compare_project(request: HtmxHttpRequest, slug: str) -> Project:
    """The project, for a user who may compare in it: outsiders get a 404, annotators a
    403 where it hides labels or scores from them."""
    project = project_get_for_user(request.user, slug)
    if not selectors.can_compare(request.user, project):
        raise PermissionDenied(
            "This project hides labels or model scores from annotators until they submit."
        )
    return project


def query_url(name: str, project: Project, params: dict[str, Any]) -> str:
    query = {k: v for k, v in params.items() if v is not None and v != ""}
    return reverse(name, args=[project.slug]) + ("?" + urlencode(query) if query else "")


def page_links(request: HtmxHttpRequest, page: int, more: bool) -> dict[str, str]:
    """Links to the previous and next page of a list, keeping every other parameter."""
    links = {}
    for name, number, show in (("previous", page - 1, page > 1), ("next", page + 1, more)):
        if show:
            params = request.GET.copy()
            params["page"] = str(number)
            links[name] = "?" + params.urlencode()
    return links


def base_context(request: HtmxHttpRequest, project: Project) -> dict[str, Any]:
    return {
        "project": project,
        "reviewer": selectors.is_reviewer(membership_role(request.user, project)),
    }


def form_errors(form: Any, *others: Any) -> list[str]:
    """What is wrong with a page's form (its form-wide errors, then each field's, with the
    field's name) and with the forms beside it (their fields')."""
    return [
        *(str(error) for error in form.non_field_errors()),
        *(
            f"{name}: {' '.join(str(e) for e in errors)}"
            for each in (form, *others)
            for name, errors in each.errors.items()
            if name != "__all__"
        ),
    ]
