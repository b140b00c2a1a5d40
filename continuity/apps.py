from django.apps import AppConfig


class ContinuityConfig(AppConfig):
    name = "continuity"
    verbose_name = "Continuity engine"

    def ready(self) -> None:
        from .worker import signals  # noqa: F401  (connects Celery worker lifecycle handlers)
