from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (closes sockets when a session ends)
