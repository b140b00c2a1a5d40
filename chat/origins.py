"""Websockets are opened only by this site's own pages: the origin check Django's CSRF
protection makes for forms, applied to the websocket handshake."""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


class SameOriginValidator:
    """Refuses (403) a handshake whose Origin is not the scheme, host and port the socket was
    opened on, or whose host is not allowed. CSRF_TRUSTED_ORIGINS are let in too: behind a TLS
    proxy the socket arrives as plain ws while the page's origin is https."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if socket_origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)


def socket_origin_allowed(scope: dict) -> bool:
    headers = dict(scope.get("headers", []))
    origin = headers.get(b"origin", b"").decode("latin1")
    host = headers.get(b"host", b"").decode("latin1")
    if not origin or not host:
        return False
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    domain, port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    return origin_parts(origin) == (scheme, domain, int(port or DEFAULT_PORTS[scheme]))


def origin_parts(origin: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(origin)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.scheme, parts.hostname.lower(), port
