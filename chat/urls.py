from django.urls import path

from . import (
    branch_views,
    conversation_views,
    memory_views,
    notes_views,
    recovery_views,
    tool_views,
    views,
)

app_name = "chat"
urlpatterns = [
    path("", views.home_view, name="home"),
    path("c/new/", views.conversation_new_view, name="conversation_new"),
    path("c/<int:pk>/", views.conversation_detail_view, name="conversation"),
    path("c/<int:pk>/messages/", views.message_send_view, name="message_send"),
    path("c/<int:pk>/retry-now/", views.retry_now_view, name="retry_now"),
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
    path(
        "c/<int:pk>/tool-calls/<int:call_pk>/decide/",
        tool_views.tool_call_decide_view,
        name="tool_call_decide",
    ),
    path(
        "c/<int:pk>/tool-calls/<int:call_pk>/answer/",
        tool_views.tool_call_answer_view,
        name="tool_call_answer",
    ),
    path("c/<int:pk>/exchanges/", branch_views.exchanges_older_view, name="exchanges_older"),
    path("c/<int:pk>/rename/", conversation_views.conversation_rename_view, name="rename"),
    path("c/<int:pk>/brain/", conversation_views.conversation_brain_view, name="brain"),
    path("c/<int:pk>/archive/", conversation_views.conversation_archive_view, name="archive"),
    path("c/<int:pk>/delete/", conversation_views.conversation_delete_view, name="delete"),
    path("c/<int:pk>/export.md", conversation_views.export_markdown_view, name="export_md"),
    path("c/<int:pk>/export.json", conversation_views.export_json_view, name="export_json"),
    path("conversations/", conversation_views.conversation_list_view, name="conversations"),
    path("search/", conversation_views.search_view, name="search"),
    path(
        "c/<int:pk>/recoveries/<int:recovery_pk>/",
        recovery_views.recovery_detail_view,
        name="recovery",
    ),
    path(
        "c/<int:pk>/recoveries/<int:recovery_pk>/correct/",
        recovery_views.recovery_correct_view,
        name="recovery_correct",
    ),
    path("c/<int:pk>/notes/", notes_views.conversation_notes_view, name="notes"),
    path(
        "c/<int:pk>/notes/correct/",
        notes_views.conversation_note_correct_view,
        name="notes_correct",
    ),
    path(
        "c/<int:pk>/notes/forget/", notes_views.conversation_note_forget_view, name="notes_forget"
    ),
    path("memory/", memory_views.memory_view, name="memory"),
    path("memory/<int:pk>/edit/", memory_views.memory_fact_edit_view, name="memory_edit"),
    path("memory/<int:pk>/forget/", memory_views.memory_fact_forget_view, name="memory_forget"),
    path("memory/<int:pk>/delete/", memory_views.memory_fact_delete_view, name="memory_delete"),
    path("reminders/<int:pk>/cancel/", memory_views.reminder_cancel_view, name="reminder_cancel"),
]
