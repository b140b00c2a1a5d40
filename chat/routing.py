from channels.security.websocket import WebsocketDenier
from django.urls import path, re_path

from .consumers import ConversationConsumer

websocket_urlpatterns = [
    path("ws/c/<int:pk>/", ConversationConsumer.as_asgi()),
    # Any other path is refused (403) instead of failing in the router with a traceback.
    re_path(r"", WebsocketDenier.as_asgi()),
]
