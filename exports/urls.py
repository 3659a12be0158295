from django.urls import path

from exports import views

urlpatterns = [
    path("p/<slug:slug>/exports/", views.export_list, name="export-list"),
    path("p/<slug:slug>/exports/preview/", views.export_preview, name="export-preview"),
    path("p/<slug:slug>/selections/", views.selection_list, name="selection-list"),
    path("p/<slug:slug>/batches/", views.batch_list, name="batch-list"),
    path("p/<slug:slug>/batches/<slug:name>/", views.batch_detail, name="batch-detail"),
    path("selections/<int:pk>/delete/", views.selection_remove, name="selection-delete"),
    path("exports/<int:pk>/", views.export_detail, name="export-detail"),
    path("exports/<int:pk>/files/<str:name>", views.export_download, name="export-download"),
]
