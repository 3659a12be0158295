from django.urls import path

from automation import views

urlpatterns = [
    path("p/<slug:slug>/rules/", views.rule_list, name="rule-list"),
    path("p/<slug:slug>/rules/<int:pk>/", views.rule_detail, name="rule-detail"),
    path("p/<slug:slug>/rules/<int:pk>/active/", views.rule_active, name="rule-active"),
    path("p/<slug:slug>/rules/<int:pk>/backfill/", views.rule_backfill, name="rule-backfill"),
    path("p/<slug:slug>/webhooks/", views.webhook_list, name="webhook-list"),
    path("p/<slug:slug>/webhooks/<int:pk>/", views.webhook_detail, name="webhook-detail"),
    path("p/<slug:slug>/webhooks/<int:pk>/active/", views.webhook_active, name="webhook-active"),
    path("p/<slug:slug>/webhooks/<int:pk>/delete/", views.webhook_delete, name="webhook-delete"),
    path(
        "p/<slug:slug>/webhook-deliveries/<int:pk>/redeliver/",
        views.delivery_redeliver,
        name="webhook-redeliver",
    ),
]
