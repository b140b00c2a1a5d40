from django.urls import path

from . import dead_letter_views, history_views, takeover_views, tools, views, worker_views

app_name = "dashboard"
urlpatterns = [
    path("", views.index_view, name="index"),
    path("dead-letters/", dead_letter_views.dead_letter_list_view, name="dead_letters"),
    path("dead-letters/bulk/", dead_letter_views.dead_letter_bulk_view, name="dead_letters_bulk"),
    path("dead-letters/<int:pk>/", dead_letter_views.dead_letter_detail_view, name="dead_letter"),
    path(
        "dead-letters/<int:pk>/retry/",
        dead_letter_views.dead_letter_retry_view,
        name="dead_letter_retry",
    ),
    path(
        "dead-letters/<int:pk>/edit/",
        dead_letter_views.dead_letter_edit_view,
        name="dead_letter_edit",
    ),
    path(
        "dead-letters/<int:pk>/discard/",
        dead_letter_views.dead_letter_discard_view,
        name="dead_letter_discard",
    ),
    path("runs/<int:pk>/stop/", views.run_stop_view, name="run_stop"),
    path("messages/", views.message_find_view, name="message_find"),
    path("messages/<int:pk>/timeline/", views.message_timeline_view, name="message_timeline"),
    path("crashes/", views.crashes_view, name="crashes"),
    path("paused/", views.paused_view, name="paused"),
    path("waiting/", views.waiting_view, name="waiting"),
    path("tools/", tools.tools_view, name="tools"),
    path(
        "conversations/<int:pk>/retry-now/",
        views.conversation_retry_now_view,
        name="conversation_retry_now",
    ),
    path("conversations/<int:pk>/pause/", views.conversation_pause_view, name="conversation_pause"),
    path("conversations/<int:pk>/", views.conversation_detail_view, name="conversation"),
    path("conversations/<int:pk>/take-over/", takeover_views.take_over_view, name="take_over"),
    path("conversations/<int:pk>/reply/", takeover_views.staff_reply_view, name="staff_reply"),
    path("conversations/<int:pk>/hand-back/", takeover_views.hand_back_view, name="hand_back"),
    path("conversations/<int:pk>/thread/", takeover_views.thread_view, name="thread"),
    path(
        "conversations/<int:pk>/tool-calls/<int:call_pk>/answer/",
        takeover_views.tool_call_answer_view,
        name="tool_call_answer",
    ),
    path(
        "conversations/<int:pk>/resume/",
        views.conversation_resume_view,
        name="conversation_resume",
    ),
    path("history/", history_views.history_view, name="history"),
    path("workers/", worker_views.workers_view, name="workers"),
    path(
        "workers/<int:pk>/<slug:action>/",
        worker_views.worker_command_view,
        name="worker_command",
    ),
    path("alerts/", views.alerts_view, name="alerts"),
    path("alerts/<int:pk>/acknowledge/", views.alert_acknowledge_view, name="alert_acknowledge"),
]
