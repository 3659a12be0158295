from django.urls import path

from discovery import note_views, question_views, views

urlpatterns = [
    path("p/<slug:slug>/failures/modes/", views.failure_modes_page, name="failure-modes"),
    path(
        "p/<slug:slug>/failures/modes/run/", views.failure_modes_start, name="failure-modes-start"
    ),
    path("failure-modes/<int:pk>/queue/", views.failure_mode_queue, name="failure-mode-queue"),
    path(
        "failure-modes/<int:pk>/selection/",
        views.failure_mode_selection,
        name="failure-mode-selection",
    ),
    path("failure-modes/<int:pk>/judge/", views.failure_mode_judge, name="failure-mode-judge"),
    path("failure-modes/<int:pk>/export/", views.failure_mode_export, name="failure-mode-export"),
    path(
        "failure-mode-runs/<int:pk>/row/",
        views.failure_mode_run_row,
        name="failure-mode-run-row",
    ),
    path(
        "failure-mode-runs/<int:pk>/cancel/",
        views.failure_mode_run_cancel,
        name="failure-mode-run-cancel",
    ),
    path("p/<slug:slug>/failures/notes/run/", note_views.notes_start, name="notes-start"),
    path("note-groups/<int:pk>/tag/", note_views.note_group_tag, name="note-group-tag"),
    path("note-runs/<int:pk>/row/", note_views.note_run_row, name="note-run-row"),
    path("note-runs/<int:pk>/cancel/", note_views.note_run_cancel, name="note-run-cancel"),
    path("p/<slug:slug>/questions/", question_views.question_list, name="question-list"),
    path("questions/<int:pk>/", question_views.question_detail, name="question-detail"),
    path("questions/<int:pk>/row/", question_views.question_row, name="question-row"),
    path("questions/<int:pk>/cancel/", question_views.question_cancel, name="question-cancel"),
]
