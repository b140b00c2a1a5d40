from django.urls import path

from . import (
    branch_views,
    conversation_views,
    memory_views,
    notes_views,
    recovery_views,
    views,
)

app_name = "chat"
urlpatterns = [
    path("", views.home, name="home"),
    path("c/new/", views.conversation_new, name="conversation_new"),
    path("c/<int:pk>/", views.conversation_detail, name="conversation"),
    path("c/<int:pk>/messages/", views.message_send, name="message_send"),
    path("c/<int:pk>/retry-now/", views.retry_now, name="retry_now"),
    path("c/<int:pk>/messages/<int:message_pk>/stop/", views.reply_stop_view, name="stop"),
    path("c/<int:pk>/messages/<int:message_pk>/retry/", views.message_retry_view, name="retry"),
    path("c/<int:pk>/messages/<int:message_pk>/edit/", branch_views.message_edit_view, name="edit"),
    path(
        "c/<int:pk>/messages/<int:message_pk>/regenerate/",
        branch_views.reply_regenerate_view,
        name="regenerate",
    ),
    path(
        "c/<int:pk>/messages/<int:message_pk>/continue/",
        branch_views.reply_continue_view,
        name="continue",
    ),
    path(
        "c/<int:pk>/messages/<int:message_pk>/show/",
        branch_views.version_show_view,
        name="version_show",
    ),
    path("c/<int:pk>/exchanges/", branch_views.exchanges_older, name="exchanges_older"),
    path("c/<int:pk>/rename/", conversation_views.conversation_rename_view, name="rename"),
    path("c/<int:pk>/brain/", conversation_views.conversation_brain_view, name="brain"),
    path("c/<int:pk>/archive/", conversation_views.conversation_archive_view, name="archive"),
    path("c/<int:pk>/delete/", conversation_views.conversation_delete_view, name="delete"),
    path("c/<int:pk>/export.md", conversation_views.export_markdown_view, name="export_md"),
    path("c/<int:pk>/export.json", conversation_views.export_json_view, name="export_json"),
    path("conversations/", conversation_views.conversation_list, name="conversations"),
    path("search/", conversation_views.search, name="search"),
    path(
        "c/<int:pk>/recoveries/<int:recovery_pk>/",
        recovery_views.recovery_detail,
        name="recovery",
    ),
    path(
        "c/<int:pk>/recoveries/<int:recovery_pk>/correct/",
        recovery_views.recovery_correct,
        name="recovery_correct",
    ),
    path("c/<int:pk>/notes/", notes_views.conversation_notes, name="notes"),
    path("c/<int:pk>/notes/correct/", notes_views.conversation_note_correct, name="notes_correct"),
    path("c/<int:pk>/notes/forget/", notes_views.conversation_note_forget, name="notes_forget"),
    path("memory/", memory_views.memory, name="memory"),
    path("memory/<int:pk>/edit/", memory_views.memory_fact_edit, name="memory_edit"),
    path("memory/<int:pk>/forget/", memory_views.memory_fact_forget, name="memory_forget"),
    path("memory/<int:pk>/delete/", memory_views.memory_fact_delete_view, name="memory_delete"),
]
