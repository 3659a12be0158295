"""Cursor paging for the API lists: newest first by id, so a page stays stable while new
rows arrive."""

from __future__ import annotations

from rest_framework import pagination


class ByIdCursor(pagination.CursorPagination):
    ordering = "-id"
