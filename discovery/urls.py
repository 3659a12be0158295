from django.urls import path

from discovery import question_views

urlpatterns = [
    path("p/<slug:slug>/questions/", question_views.question_list, name="question-list"),
    path("questions/<int:pk>/", question_views.question_detail, name="question-detail"),
    path("questions/<int:pk>/row/", question_views.question_row, name="question-row"),
    path("questions/<int:pk>/cancel/", question_views.question_cancel, name="question-cancel"),
]
