from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "continuity.settings")
# This process serves requests and websockets from many threads: its database connections are
# pooled (settings read DATABASE_POOL_SIZE as they load, here). Only this process's: a process
# that imports this module with its settings already loaded (the test suite) must not pass it
# on to the workers it starts, whose heartbeats must never wait for a pooled connection.
pool_size_given = "DATABASE_POOL_SIZE" in os.environ
os.environ.setdefault("DATABASE_POOL_SIZE", "20")
django_asgi_app = get_asgi_application()
if not pool_size_given:
    del os.environ["DATABASE_POOL_SIZE"]

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.origins import SameOriginValidator  # noqa: E402
from chat.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
