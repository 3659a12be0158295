"""/api/v1/: each app contributes its routes from its own ``api.py``."""

from django.urls import URLPattern, URLResolver, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from accounts.api import urlpatterns as accounts_urls
from automation.api import urlpatterns as automation_urls
from discovery.api import urlpatterns as discovery_urls
from discovery.question_api import urlpatterns as question_urls
from evaluation.api import urlpatterns as evaluation_urls
from exports.api import router as exports_router
from exports.api import urlpatterns as exports_urls
from labeling.api import urlpatterns as labeling_urls
from rollouts.api import urlpatterns as rollouts_urls
from scoring.api import urlpatterns as scoring_urls
from trajectories.api import router as trajectories_router
from trajectories.api import urlpatterns as trajectories_urls

# The API root (``api-root``, with its format suffixes) lists the routes it listed when
# exports lived in trajectories; it comes first, so trajectories' own root is never reached.
_root = DefaultRouter()
_root.registry = [*trajectories_router.registry, *exports_router.registry]
_root_urls = [url for url in _root.urls if getattr(url, "name", None) == "api-root"]

urlpatterns: list[URLPattern | URLResolver] = [
    *_root_urls,
    *trajectories_urls,
    *labeling_urls,
    *scoring_urls,
    *rollouts_urls,
    *exports_urls,
    *evaluation_urls,
    *discovery_urls,
    *question_urls,
    *automation_urls,
    *accounts_urls,
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]
