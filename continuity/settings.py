"""Settings for Continuity, read from the environment (see docs/operations.md, "Configuration")."""

from __future__ import annotations

import os
import time
import urllib.parse
from datetime import timedelta
from pathlib import Path

import dj_database_url
import psycopg.conninfo

from continuity.live.layer_connection import Connection as LayerConnection
from continuity.live.layer_connection import SentinelConnection as LayerSentinelConnection

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONTINUITY_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, "1" if default else "0").strip().lower() in {"1", "true", "yes"}


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


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


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY") or local_secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
# Behind TLS, set SECURE_COOKIES=1 so session and CSRF cookies never travel in clear text.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
# HTTPS: off by default so that `make run` works over plain http; see docs/operations.md,
# "Security".
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# "HTTP_X_FORWARDED_PROTO,https" behind a TLS proxy that sets that header (and strips the
# client's own); trusting it without such a proxy would let anyone claim HTTPS.
SECURE_PROXY_SSL_HEADER = tuple(env_list("SECURE_PROXY_SSL_HEADER", "")) or None

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "axes",
    "csp",
    "channels",
    "django_htmx",
    "template_partials",
    "continuity",
    "chat",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "chat.middleware.DatabaseUnavailableMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last but one: django-axes turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
    "chat.middleware.SyncChainMiddleware",
]

ROOT_URLCONF = "continuity.urls"
ASGI_APPLICATION = "continuity.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# PostgreSQL in production and in the test suite; SQLite in WAL mode when nothing is configured,
# so that `make run` works on a bare machine.
def database_from_url(url: str) -> dict:
    """DATABASE_URL as dj-database-url reads it, and libpq's multi-host form, which it cannot:
    `postgres://user@primary:5432,standby:5432/db?target_session_attrs=read-write` connects to
    the first host that answers as a primary (docs/several-hosts.md). HOST and PORT are then
    libpq's comma-separated lists, which Django hands to psycopg as they are."""
    hosts = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    one_host = url.replace(hosts, hosts.split(",")[0], 1)
    config = dj_database_url.parse(
        one_host, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60), conn_health_checks=True
    )
    if "," in hosts:
        conninfo = psycopg.conninfo.conninfo_to_dict(url)
        config["HOST"], config["PORT"] = conninfo["host"], conninfo.get("port", "")
    return config


DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'continuity.sqlite3'}")
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, whose health check of a connection in steady use costs no round trip
    # (continuity/database).
    DATABASES["default"]["ENGINE"] = "continuity.database"
    # Fail fast instead of hanging when the database is away or a row stays locked: callers
    # treat these errors as an outage and retry (see docs/design.md).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "connect_timeout": env_int("DATABASE_CONNECT_TIMEOUT", 5),
            # A session left idle inside a transaction (its process frozen by SIGSTOP, swapped
            # out, stuck on something else) is ended by the server, and its locks with it: no
            # conversation stays locked for longer. Shorter than the lock timeout, so a send
            # that waits on a frozen holder gets the lock instead of failing.
            "options": f"-c lock_timeout={env_int('DATABASE_LOCK_TIMEOUT_MS', 10_000)} "
            f"-c statement_timeout={env_int('DATABASE_STATEMENT_TIMEOUT_MS', 60_000)} "
            "-c idle_in_transaction_session_timeout="
            f"{env_int('DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS', 5_000)}",
            # A connection whose peer vanished (a black-holed network, a host gone without a
            # reset) fails within seconds, as an outage, instead of waiting for the kernel's
            # two hours: keepalives for a quiet connection, a send timeout for a busy one.
            "keepalives": 1,
            "keepalives_idle": env_int("DATABASE_KEEPALIVES_IDLE", 5),
            "keepalives_interval": env_int("DATABASE_KEEPALIVES_INTERVAL", 2),
            "keepalives_count": env_int("DATABASE_KEEPALIVES_COUNT", 3),
            "tcp_user_timeout": env_int("DATABASE_TCP_USER_TIMEOUT_MS", 10_000),
            # Statements are prepared at their first run on a connection: parsed once, and
            # after five runs planned once where that plan is as good as one made for the
            # values (the engine's are written so that it is: `store.connection.cursor`). Only
            # the engine's hand-written hot path binds values on the server (continuity.store);
            # the ORM binds on the client, which psycopg never prepares. Not for a pooler in
            # transaction mode (PgBouncer): prepared statements belong to one server connection.
            "prepare_threshold": 0,
        }
    )
    if pool_size := env_int("DATABASE_POOL_SIZE", 0):
        # The web process (continuity/asgi.py sets it) runs each request and websocket call in
        # a thread of its own: persistent per-thread connections would pile up past
        # max_connections under a crowd and outlive their threads. A pool bounds them; a
        # request waits its turn for one (a crowd's burst queues here), and answers 503 when
        # none comes: the database is away, or the server is overloaded. Pooled connections
        # are checked before use (conn_health_checks).
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": pool_size,
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 10),
        }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("LOGIN_COOLOFF_MINUTES", 15))
# A username is locked at one address (the combination), not everywhere and not everyone there;
# an address failing for many usernames is locked at the much higher limit below.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
LOGIN_ADDRESS_FAILURE_LIMIT = env_int("LOGIN_ADDRESS_FAILURE_LIMIT", 100)
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "chat.lockout.lockout_response"
# Failed attempts are kept (they expire after the cool-off); a row per successful login would
# only grow, with addresses and user agents, and nothing here reads it.
AXES_DISABLE_ACCESS_LOG = True
# Behind reverse proxies, the client address comes from X-Forwarded-For (see chat/lockout.py);
# without it every client would share the proxy's address, and one lockout would hit them all.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
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

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

ADMINS = [tuple(pair.split(":", 1)) for pair in env_list("ADMINS", "")]
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
# Without a timeout, an SMTP server that accepts and never answers holds the sender for good.
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# Redis with failover (docs/several-hosts.md): the Sentinels that watch its primary, as
# `host:port,host:port,...`, and the name they know it by. Everything that uses Redis (the
# broker, the drain markers and heartbeat keys, the rate limiter, the live layer) then asks them
# where the primary is, and asks again after a failover. REDIS_URL gives only the database
# number and the password.
REDIS_SENTINELS = [
    (sentinel.rpartition(":")[0], int(sentinel.rpartition(":")[2]))
    for sentinel in env_list("REDIS_SENTINELS", "")
]
REDIS_SENTINEL_MASTER = os.environ.get("REDIS_SENTINEL_MASTER", "continuity")
_redis = urllib.parse.urlsplit(REDIS_URL)
REDIS_DB = int(_redis.path.strip("/") or 0)
REDIS_PASSWORD = urllib.parse.unquote(_redis.password) if _redis.password else None
# The rate limiter's storage (`limits`), beside its URI: its connection's own keywords.
RATE_LIMIT_STORAGE_OPTIONS: dict = {}
if REDIS_SENTINELS:
    # The primary's connection keywords, beside the Sentinels: redis-py's, as channels-redis
    # takes them (continuity/live/events.py `redis_of` reads the same).
    REDIS_LAYER_HOST = {
        "sentinels": REDIS_SENTINELS,
        "master_name": REDIS_SENTINEL_MASTER,
        "db": REDIS_DB,
        "password": REDIS_PASSWORD,
        "sentinel_kwargs": {"socket_timeout": 2, "socket_connect_timeout": 2},
    }
    _userinfo = f":{_redis.password}@" if _redis.password else ""
    REDIS_BROKER_URL = ";".join(
        f"sentinel://{_userinfo}{host}:{port}/{REDIS_DB}" for host, port in REDIS_SENTINELS
    )
    # The password and database go to the primary only (in the URI, limits would also send the
    # password to the Sentinels); reads too, not to a replica that may lag behind the window.
    RATE_LIMIT_STORAGE_URI = (
        "redis+sentinel://"
        + ",".join(f"{host}:{port}" for host, port in REDIS_SENTINELS)
        + f"/{REDIS_SENTINEL_MASTER}"
    )
    RATE_LIMIT_STORAGE_OPTIONS = {
        "db": REDIS_DB,
        "password": REDIS_PASSWORD,
        "use_replicas": False,
        # The Sentinels are asked without a password, as by the broker and the live layer.
        "sentinel_kwargs": {"password": None, "socket_timeout": 1, "socket_connect_timeout": 1},
    }
else:
    REDIS_LAYER_HOST = {"address": REDIS_URL}
    REDIS_BROKER_URL = RATE_LIMIT_STORAGE_URI = REDIS_URL

# channels-redis waits for group messages with BZPOPMIN and a 5 s timeout, and redis-py 8 gives
# every socket a 5 s read timeout by default: the two raced, and idle websockets were closed with
# 1011 every few seconds. The socket timeout must stay well above that 5 s wait.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # Every page reconnects at once after a restart: redis-py's default cap of 100
            # connections per pool would fail the handshakes beyond it.
            "hosts": [
                {
                    **REDIS_LAYER_HOST,
                    "socket_timeout": 15,
                    "socket_connect_timeout": 5,
                    "max_connections": 1000,
                    # Keeps a cancellation that arrives during a command's write (Python 3.11).
                    "connection_class": (
                        LayerSentinelConnection if REDIS_SENTINELS else LayerConnection
                    ),
                }
            ],
            "capacity": 1500,
            "expiry": 30,
            # A group forgets a member this long after it joined: open sockets join again
            # before that (chat/consumers.py), so a page open for days still receives.
            "group_expiry": env_int("CHANNEL_GROUP_EXPIRY_SECONDS", 86400),
        },
    }
}

# Live updates are at-most-once and must not stall a reply: a publish waits at most about twice
# this for Redis, and after a failure live updates are dropped for the pause.
CONTINUITY_PUBLISH_TIMEOUT_SECONDS = env_float("CONTINUITY_PUBLISH_TIMEOUT_SECONDS", 1)
CONTINUITY_PUBLISH_PAUSE_SECONDS = env_float("CONTINUITY_PUBLISH_PAUSE_SECONDS", 5)
# A live update waits this long for the ones that follow it, to go out with them in one round
# trip: far below what a person notices, and a tenth of CONTINUITY_STREAM_FLUSH_SECONDS.
CONTINUITY_PUBLISH_LINGER_SECONDS = env_float("CONTINUITY_PUBLISH_LINGER_SECONDS", 0.01)
# Since live updates may be lost, an open page asks again for its queued and unfinished
# exchanges, each time at a random moment within this many seconds (full jitter, so pages that
# lost the same updates do not all ask at once); 0: only when the slow hint appears.
CONTINUITY_PAGE_RESYNC_SECONDS = env_float("CONTINUITY_PAGE_RESYNC_SECONDS", 15)

# Delivery: acks-late with rejection on worker loss, one prefetched message per process.
# The visibility timeout must exceed the hard time limit (no countdown tasks are used): the
# database watchdog, not the broker, drives fast recovery (docs/architecture.md).
CELERY_BROKER_URL = REDIS_BROKER_URL
# A redis:// broker goes through kombu's Redis transport with one client per channel
# (continuity/worker/broker.py). Naming a transport overrides the URL's scheme, so any other
# (rediss:// and its TLS, sentinel://) keeps the one kombu picks for it.
if CELERY_BROKER_URL.startswith("redis://"):
    CELERY_BROKER_TRANSPORT = "continuity-redis"
# The broker's queue: `manage.py serve` names one of its own when it shares the machine's Redis.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CONTINUITY_QUEUE", "celery")
CELERY_TASK_ACKS_LATE = True
# How long the main process waits for the result of a job whose pool process died before it
# fails the job with WorkerLostError (Celery's default: 10 s). No result is ever kept here, and
# the failure is what ends the dead process's attempt at once (continuity/worker/pool.py).
CELERY_WORKER_LOST_WAIT = env_float("CELERY_WORKER_LOST_WAIT", 0.1)
# Celery's prefork pool, checking on its processes every 0.25 s instead of every 5 s.
CELERY_WORKER_POOL = "continuity.worker.prefork:TaskPool"
# Celery's consumer, asking for a broker that went away again every second at most; for ever,
# as a supervisor would start it again anyway (Celery's 100 tries were 45 minutes on its own
# ladder of waits, and would be under two on this one).
CELERY_WORKER_CONSUMER = "continuity.worker.consumer:Consumer"
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_float("CELERY_TASK_SOFT_TIME_LIMIT", 300)
CELERY_TASK_TIME_LIMIT = env_float("CELERY_TASK_TIME_LIMIT", 330)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
    "unacked_restore_interval": env_int("CELERY_UNACKED_RESTORE_INTERVAL", 60),
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
}
if REDIS_SENTINELS:
    CELERY_BROKER_TRANSPORT_OPTIONS |= {
        "master_name": REDIS_SENTINEL_MASTER,
        "sentinel_kwargs": {"socket_timeout": 2, "socket_connect_timeout": 2},
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# On a broker reconnect Celery would otherwise SIGTERM every running acks-late task, turning each
# Redis blip into crashes that use up attempts and trip the crash-loop breaker. Attempts need the
# broker only for their final ack; a lost ack means one redelivery, which the lease and the
# unique reply absorb.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_IGNORE_RESULT = True
# No results are kept, so the (disabled) result backend holds no connection: one for every
# thread. Otherwise each new thread that sends a task builds its own, which looks up Celery's
# backend plugins on disk: the web process runs each request in a new thread.
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = False
# Staff may restart a worker's pool from the console (worker/control.py): each process
# ends after its current attempt and a fresh one takes its place.
CELERY_WORKER_POOL_RESTARTS = True
# Celery's Django fixup closes every database connection before and after each task (it no
# longer honours CONN_MAX_AGE): a fresh connection per message cost 6 ms, and the hot path's
# prepared statements with it. With this set, it closes them only every this many tasks; the
# worker instead checks its connections around each task as Django does around a request
# (worker/signals.py: CONN_MAX_AGE, and a health check after an error or a database restart).
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)

# Continuity engine.
CONTINUITY_BRAIN = os.environ.get("CONTINUITY_BRAIN", "builtin")
CONTINUITY_BRAINS = {
    "builtin": "chat.brains.builtin.BuiltinBrain",
    "openai": "chat.brains.openai.OpenAIBrain",
}
# The brains a person may pick for a conversation (the first is the default for new ones);
# a conversation without a choice uses CONTINUITY_BRAIN.
CONTINUITY_BRAIN_CHOICES = env_list("CONTINUITY_BRAIN_CHOICES", CONTINUITY_BRAIN)
# The `openai` brain: any OpenAI-compatible /v1/chat/completions server (docs/model-backends.md).
CONTINUITY_OPENAI_BASE_URL = os.environ.get(
    "CONTINUITY_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"
)
CONTINUITY_OPENAI_API_KEY = os.environ.get("CONTINUITY_OPENAI_API_KEY", "")
CONTINUITY_OPENAI_MODEL = os.environ.get("CONTINUITY_OPENAI_MODEL", "llama3.2")
CONTINUITY_OPENAI_TEMPERATURE = env_float("CONTINUITY_OPENAI_TEMPERATURE", 0.7)
CONTINUITY_OPENAI_REQUEST_TIMEOUT = env_float("CONTINUITY_OPENAI_REQUEST_TIMEOUT", 60)
CONTINUITY_OPENAI_IDLE_TIMEOUT = env_float("CONTINUITY_OPENAI_IDLE_TIMEOUT", 30)
CONTINUITY_OPENAI_MAX_RETRIES = env_int("CONTINUITY_OPENAI_MAX_RETRIES", 2)
# The most tokens a reply may take (sent as `max_tokens`; room kept for it in the window). A
# reply that reaches it is kept, marked as cut off, and may be continued.
CONTINUITY_OPENAI_MAX_TOKENS = env_int("CONTINUITY_OPENAI_MAX_TOKENS", 1024)
# The model's context window in tokens; 0: asked of the server where it says (vLLM's /v1/models,
# llama.cpp's /props), else only CONTINUITY_CONTEXT_TOKENS bounds the prompt.
CONTINUITY_OPENAI_CONTEXT_TOKENS = env_int("CONTINUITY_OPENAI_CONTEXT_TOKENS", 0)
# How many requests the model server gets at once, counted across every worker (a semaphore
# in Redis); 0: no limit. For a small local server (llama.cpp, Ollama with OLLAMA_NUM_PARALLEL),
# its number of parallel slots: conversations then queue instead of interrupting each other.
CONTINUITY_OPENAI_CONCURRENCY = env_int("CONTINUITY_OPENAI_CONCURRENCY", 0)
# Summaries (compaction) and titles are bounded in length and time, and not retried by the
# client: neither may hold a worker process for a minute. A summary that fails gives the
# attempt back (the server's fault); a title that fails falls back to the built-in one.
CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS = env_int("CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS", 512)
CONTINUITY_OPENAI_SUMMARY_TIMEOUT = env_float("CONTINUITY_OPENAI_SUMMARY_TIMEOUT", 30)
CONTINUITY_OPENAI_TITLE_TIMEOUT = env_float("CONTINUITY_OPENAI_TITLE_TIMEOUT", 10)
# A model server that cannot answer (refused, 5xx, 429, silent before the first token) gives
# the attempt back and waits its own backoff, longer after each failure in a row (or what its
# Retry-After asks); after this many in a row it is marked unavailable, staff are alerted, and
# its conversations wait for its next try instead of trying (docs/model-backends.md).
CONTINUITY_BACKEND_BACKOFF_SECONDS = [
    float(s) for s in env_list("CONTINUITY_BACKEND_BACKOFF_SECONDS", "5,10,30,60,120,300")
]
CONTINUITY_BACKEND_UNAVAILABLE_AFTER = env_int("CONTINUITY_BACKEND_UNAVAILABLE_AFTER", 3)
CONTINUITY_BUILTIN_TOKEN_DELAY = env_float("CONTINUITY_BUILTIN_TOKEN_DELAY", 0.03)
CONTINUITY_MAX_MESSAGE_CHARS = env_int("CONTINUITY_MAX_MESSAGE_CHARS", 16_000)
# Exchanges (a question and its reply) that compaction keeps verbatim. (Its earlier name,
# CONTINUITY_HISTORY_TURNS, is still read: it counted exchanges too.)
CONTINUITY_HISTORY_EXCHANGES = env_int(
    "CONTINUITY_HISTORY_EXCHANGES", env_int("CONTINUITY_HISTORY_TURNS", 20)
)
# The context budget: past CONTINUITY_COMPACT_AT of it, exchanges older than the last
# CONTINUITY_HISTORY_EXCHANGES are summarized by the brain (see continuity/context/compaction.py).
CONTINUITY_CONTEXT_TOKENS = env_int("CONTINUITY_CONTEXT_TOKENS", 8000)
CONTINUITY_COMPACT_AT = env_float("CONTINUITY_COMPACT_AT", 0.8)
# The share of the budget a summary may take: past it, its oldest points are dropped (it grows
# with every compaction, each made from the one before).
CONTINUITY_SUMMARY_SHARE = env_float("CONTINUITY_SUMMARY_SHARE", 0.25)
# What a brain's budget leaves aside from its model's window (beyond the reply's room) for what
# the token estimate may miss: an estimate is not the model's tokenizer.
CONTINUITY_TOKEN_MARGIN = env_float("CONTINUITY_TOKEN_MARGIN", 0.2)
CONTINUITY_TOKEN_ESTIMATOR = os.environ.get(
    "CONTINUITY_TOKEN_ESTIMATOR", "continuity.context.tokens.chars_per_token_estimate"
)
CONTINUITY_IDENTITY = os.environ.get(
    "CONTINUITY_IDENTITY",
    "You are Continuity, an assistant that helps one person work toward their goals. "
    "You survive restarts: the working memory below is yours, written before the last stop. "
    "Never invent facts about the user; say when you do not know. "
    "Never reveal other users' data. Tell the user when a restart interrupted your work.",
)
CONTINUITY_MAX_ATTEMPTS = env_int("CONTINUITY_MAX_ATTEMPTS", 3)
# A whole worker or host lost is found within 2 beats and a sweep (about 3 s); a pool process
# that dies is acted on by its worker at once (continuity/worker/pool.py).
CONTINUITY_HEARTBEAT_SECONDS = env_float("CONTINUITY_HEARTBEAT_SECONDS", 1)
CONTINUITY_STREAM_FLUSH_SECONDS = env_float("CONTINUITY_STREAM_FLUSH_SECONDS", 0.1)
CONTINUITY_CRASH_BACKOFF_SECONDS = [
    float(s) for s in env_list("CONTINUITY_CRASH_BACKOFF_SECONDS", "5,30,120,600")
]
CONTINUITY_PAUSE_AFTER_CRASHES = env_int("CONTINUITY_PAUSE_AFTER_CRASHES", 3)
CONTINUITY_CRASH_WINDOW_SECONDS = env_float("CONTINUITY_CRASH_WINDOW_SECONDS", 3600)
CONTINUITY_REQUEUE_AFTER_SECONDS = env_float("CONTINUITY_REQUEUE_AFTER_SECONDS", 30)
CONTINUITY_WATCHDOG_SECONDS = env_float("CONTINUITY_WATCHDOG_SECONDS", 1)
CONTINUITY_CHECKPOINT_RETENTION_DAYS = env_float("CONTINUITY_CHECKPOINT_RETENTION_DAYS", 14)
CONTINUITY_PRUNE_EVERY_SECONDS = env_float("CONTINUITY_PRUNE_EVERY_SECONDS", 3600)
# Attempts, resolved crashes, acknowledged alerts, handled dead letters and departed workers.
CONTINUITY_HISTORY_RETENTION_DAYS = env_float("CONTINUITY_HISTORY_RETENTION_DAYS", 90)
# How often the watchdog samples the queue depth and rolls finished five minutes up into the
# history (delivery/history.py); those buckets are kept whatever the retention.
CONTINUITY_HISTORY_EVERY_SECONDS = env_float("CONTINUITY_HISTORY_EVERY_SECONDS", 15)
# A drain task waiting in the queue is marked in Redis, so a conversation has at most one: a
# flood in one conversation cannot push everyone else's messages to the back of the queue. The
# marker expires after this long in case its task was lost after the marker was set.
CONTINUITY_DRAIN_MARKER_SECONDS = env_float("CONTINUITY_DRAIN_MARKER_SECONDS", 600)
# A drain's slice: it keeps answering its conversation's queued messages while it has run less
# than this, then sends a drain for the rest to the back of the queue, so conversations share
# the workers fairly. A reply of a model takes longer: one message per drain. Quick replies
# skip a queue round trip. (Its earlier name, CONTINUITY_DRAIN_TURN_SECONDS, is still read.)
CONTINUITY_DRAIN_SLICE_SECONDS = env_float(
    "CONTINUITY_DRAIN_SLICE_SECONDS", env_float("CONTINUITY_DRAIN_TURN_SECONDS", 0.5)
)
# Attempts given back (planned shutdown, database outage) before a message is dead-lettered.
CONTINUITY_MAX_INTERRUPTIONS = env_int("CONTINUITY_MAX_INTERRUPTIONS", 10)
# How long an attempt that lost the database keeps trying to record how it ended.
CONTINUITY_DATABASE_RETRY_SECONDS = env_float("CONTINUITY_DATABASE_RETRY_SECONDS", 60)
# How long a send (a new message or conversation) that meets a database that cannot serve is
# made again before it answers 503: a restart or a failover costs a slower send, not an error.
CONTINUITY_SEND_OUTAGE_SECONDS = env_float("CONTINUITY_SEND_OUTAGE_SECONDS", 5)
# Per-user limits on the web side ("N/second|minute|hour", several separated by ";").
CONTINUITY_SEND_RATE = os.environ.get("CONTINUITY_SEND_RATE", "10/10 seconds;60/minute")
CONTINUITY_NEW_CONVERSATION_RATE = os.environ.get(
    "CONTINUITY_NEW_CONVERSATION_RATE", "5/minute;60/hour"
)
# Bearer token that lets Prometheus read GET /metrics; empty: only signed-in staff can.
CONTINUITY_METRICS_TOKEN = os.environ.get("CONTINUITY_METRICS_TOKEN", "")
# Test-only fault injection. Deliberately not read from the environment: only tests/settings.py
# turns it on, so no production deployment can enable it.
CONTINUITY_FAULT_INJECTION = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
