from django.urls import path

from accounts import views

urlpatterns = [
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<str:key>/revoke/", views.token_revoke, name="token-revoke"),
]
