"""REST endpoints of this app, mounted under /api/v1/ by stepscope/api_urls.py."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
