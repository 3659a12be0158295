"""What every job kind's API viewset shares: ``POST /<kind>/{id}/cancel/``, answered
with the job as the cancel left it. Who may cancel and how are the kind's own."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response


class JobViewSet(viewsets.GenericViewSet[Any]):
    """The base of a job kind's viewset: ``may_cancel`` and ``job_cancel`` name its
    permission check and its cancel service; the answer is its serializer's."""

    def may_cancel(self, user: Any, job: Any) -> bool:
        raise NotImplementedError

    def job_cancel(self, job: Any) -> Any:
        raise NotImplementedError

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        job = self.get_object()
        if not self.may_cancel(request.user, job):
            raise PermissionDenied("Cancelling needs the researcher or admin role.")
        job = self.job_cancel(job)
        return Response(self.get_serializer(job).data)
