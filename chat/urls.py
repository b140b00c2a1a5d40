from django.urls import path

from . import views

app_name = "chat"
urlpatterns = [
    path("", views.home, name="home"),
    path("c/new/", views.conversation_new, name="conversation_new"),
    path("c/<int:pk>/", views.conversation_detail, name="conversation"),
    path("c/<int:pk>/messages/", views.message_send, name="message_send"),
]
