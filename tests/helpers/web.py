"""The HTTP side of a signed-in browser, for tests that drive a real web server process
without a browser."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings
from django.test import Client

from tests.helpers.processes import WebProcess


class SignedInBrowser:
    """A browser's HTTP side: the session cookie of `user` and the CSRF cookie of a page."""

    def __init__(self, web: WebProcess, user, page: str) -> None:
        self.web = web
        client = Client()
        client.force_login(user)
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        self.cookies = {settings.SESSION_COOKIE_NAME: session}
        with urllib.request.urlopen(self.request(page)) as response:
            html = response.read().decode()
            csrf_cookie = re.search(r"csrftoken=([^;]+)", response.headers["Set-Cookie"])
        self.cookies["csrftoken"] = csrf_cookie.group(1)
        self.csrf = re.search(r'"X-CSRFToken": "([^"]+)"', html).group(1)

    def request(self, path: str, data: dict | None = None) -> urllib.request.Request:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if data is not None:
            headers |= {"HX-Request": "true", "X-CSRFToken": self.csrf, "Referer": self.web.url}
            data = urllib.parse.urlencode(data).encode()
        return urllib.request.Request(self.web.url + path, data=data, headers=headers)

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.request(path)) as response:
            return response.read().decode()

    def post(self, path: str, data: dict) -> tuple[int, str, dict]:
        try:
            with urllib.request.urlopen(self.request(path, data)) as response:
                return response.status, response.read().decode(), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), dict(error.headers)
