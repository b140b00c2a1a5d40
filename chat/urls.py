from django.urls import path

from . import memory_views, recovery_views, views

app_name = "chat"
urlpatterns = [
    path("", views.home, name="home"),
    path("c/new/", views.conversation_new, name="conversation_new"),
    path("c/<int:pk>/", views.conversation_detail, name="conversation"),
    path("c/<int:pk>/messages/", views.message_send, name="message_send"),
    path("c/<int:pk>/retry-now/", views.retry_now, name="retry_now"),
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
    path("memory/", memory_views.memory, name="memory"),
    path("memory/<int:pk>/edit/", memory_views.memory_fact_edit, name="memory_edit"),
    path("memory/<int:pk>/forget/", memory_views.memory_fact_forget, name="memory_forget"),
    path("memory/<int:pk>/delete/", memory_views.memory_fact_delete_view, name="memory_delete"),
]
