from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from stepscope import health
from trajectories import receiver

urlpatterns = [
    # Answered by health.HealthMiddleware before the Host check; named here for reverse().
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Before admin.site.urls, which would otherwise answer this path itself.
    path("admin/status/", health.status_page, name="admin-status"),
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("stepscope.api_urls")),
    # OTLP/HTTP, where OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:8000 sends spans.
    path("v1/traces", receiver.traces_receive, name="otlp-traces"),
    path("", include("home.urls")),
    path("", include("accounts.urls")),
    path("", include("trajectories.urls")),
    path("", include("labeling.urls")),
    path("", include("scoring.urls")),
    path("", include("rollouts.urls")),
    path("", include("exports.urls")),
    path("", include("evaluation.urls")),
    path("", include("discovery.urls")),
    path("", include("automation.urls")),
]
