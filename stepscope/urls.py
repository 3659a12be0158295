from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("stepscope.api_urls")),
    path("", include("trajectories.urls")),
    path("", include("labeling.urls")),
    path("", include("scoring.urls")),
    path("", include("rollouts.urls")),
]
