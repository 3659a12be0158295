"""The row and cancel views of every job kind. A job's row polls itself while the job
is active; Cancel (for those allowed to manage the job's project) swaps in the row as
the cancel left it. Without htmx both go back to the page that lists the rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

View = Callable[[HttpRequest, int], HttpResponse]


@dataclass(frozen=True)
class JobRows:
    """One job kind's rows: how a user gets a job (404 for outsiders), who may cancel it,
    the cancel service, the row template, the URL name of the page that lists the rows
    (by project slug), and what the template calls the job."""

    get_for_user: Callable[[Any, int], Any]
    can_manage: Callable[[Any, Any], bool]
    cancel: Callable[[Any], Any]
    template: str
    page: str
    name: str = "run"

    def render(self, request: HttpRequest, job: Any) -> HttpResponse:
        context = {self.name: job, "can_manage": self.can_manage(request.user, job.project)}
        return render(request, self.template, context)

    def _answer(self, request: HttpRequest, job: Any) -> HttpResponse:
        if not getattr(request, "htmx", False):
            return redirect(reverse(self.page, args=[job.project.slug]))
        return self.render(request, job)

    def row_view(self) -> View:
        @login_required
        def row(request: HttpRequest, pk: int) -> HttpResponse:
            return self._answer(request, self.get_for_user(request.user, pk))

        return row

    def cancel_view(self) -> View:
        @login_required
        @require_POST
        def cancel(request: HttpRequest, pk: int) -> HttpResponse:
            job = self.get_for_user(request.user, pk)
            if not self.can_manage(request.user, job.project):
                raise PermissionDenied("Cancelling needs the researcher or admin role.")
            return self._answer(request, self.cancel(job))

        return cancel
