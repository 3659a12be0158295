"""/api/v1/: each app contributes its routes from its own ``api.py``."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from labeling.api import urlpatterns as labeling_urls
from rollouts.api import urlpatterns as rollouts_urls
from scoring.api import urlpatterns as scoring_urls
from trajectories.api import urlpatterns as trajectories_urls

urlpatterns = [
    *trajectories_urls,
    *labeling_urls,
    *scoring_urls,
    *rollouts_urls,
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]
