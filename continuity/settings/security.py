"""Security: the secret key, the hosts and origins served, cookies and HTTPS, passwords and
login lockouts, and the content security policy (docs/operations.md, "Security")."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from .base import VAR_DIR
from .env import env


def local_secret_key(var_dir: Path = VAR_DIR) -> str:
    """A per-checkout key for `make run`; deployments with several hosts must set SECRET_KEY."""
    path = var_dir / "secret_key"
    var_dir.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: of several processes starting at once, exactly one creates the key, and the
        # file is owner-only from its first byte (no window in which it is world-readable).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_secret_key(path)
    import secrets

    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as file:
        file.write(key)
    return key


def read_secret_key(path: Path) -> str:
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)  # a key written by an older version was world-readable
    # The creator may not have written its key yet; it does so right after creating the file.
    for _ in range(50):
        if key := path.read_text().strip():
            return key
        time.sleep(0.1)
    raise RuntimeError(f"{path} is empty; delete it to generate a new key")


SECRET_KEY = env("SECRET_KEY", "") or local_secret_key()
ALLOWED_HOSTS = env("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env("CSRF_TRUSTED_ORIGINS", [])
# HTTPS: off by default so that `make run` works over plain http; see docs/operations.md,
# "Security". Behind TLS, SECURE_COOKIES=1 says the site is served over HTTPS only: session and
# CSRF cookies never travel in clear text, browsers are told to use HTTPS for a year (HSTS), and
# plain http is redirected. Each can be set apart.
HTTPS_ONLY = env("SECURE_COOKIES", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS_ONLY
SECURE_HSTS_SECONDS = env("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS_ONLY else 0)
SECURE_SSL_REDIRECT = env("SECURE_SSL_REDIRECT", HTTPS_ONLY)
# Both reach beyond this site (every subdomain; browsers' built-in lists, hard to leave), so
# they are a deployer's choice, off unless set, and `check --deploy` does not ask for them.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = ["security.W005", "security.W021"]
# "HTTP_X_FORWARDED_PROTO,https" behind a TLS proxy that sets that header (and strips the
# client's own); trusting it without such a proxy would let anyone claim HTTPS.
SECURE_PROXY_SSL_HEADER = tuple(env("SECURE_PROXY_SSL_HEADER", [])) or None

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login brute force: django-axes counts failed logins (on /accounts/login/ and the admin's) per
# username at each client address, and chat.lockout adds a much higher limit per address for
# password spraying; either locks until the cool-off has passed with no attempt. See
# docs/operations.md, "Security".
AUTHENTICATION_BACKENDS = [
    "chat.lockout.LoginLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env("LOGIN_COOLOFF_MINUTES", 15.0))
# A username is locked at one address (the combination), not everywhere and not everyone there;
# an address failing for many usernames is locked at the much higher limit below.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
LOGIN_ADDRESS_FAILURE_LIMIT = env("LOGIN_ADDRESS_FAILURE_LIMIT", 100)
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "chat.lockout.lockout_response"
# Failed attempts are kept (they expire after the cool-off); a row per successful login would
# only grow, with addresses and user agents, and nothing here reads it.
AXES_DISABLE_ACCESS_LOG = True
# Behind reverse proxies, the client address comes from X-Forwarded-For (see chat/lockout.py);
# without it every client would share the proxy's address, and one lockout would hit them all.
TRUSTED_PROXY_COUNT = env("TRUSTED_PROXY_COUNT", 0)
AXES_CLIENT_IP_CALLABLE = "chat.lockout.client_ip"

# Content Security Policy: scripts, styles, images and connections (including the page's
# websocket, which 'self' covers) only from this origin; no inline script or style, so a markup
# injection can neither run code nor load a tracking image.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# A password reset link works once (Django's token changes with the password), within this.
PASSWORD_RESET_TIMEOUT = 3 * 24 * 3600  # the pages and the mail say "3 days"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat:home"
LOGOUT_REDIRECT_URL = "login"
