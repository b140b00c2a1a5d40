"""The services Continuity runs on: the database, Redis (and the Sentinels that watch it), the
channel layer, Celery's broker and worker, and mail (docs/operations.md, "Configuration")."""

from __future__ import annotations

import urllib.parse

import dj_database_url
import psycopg.conninfo

from .base import VAR_DIR
from .env import env


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
        one_host, conn_max_age=env("DATABASE_CONN_MAX_AGE", 60), conn_health_checks=True
    )
    if "," in hosts:
        conninfo = psycopg.conninfo.conninfo_to_dict(url)
        config["HOST"], config["PORT"] = conninfo["host"], conninfo.get("port", "")
    return config


DATABASES = {
    "default": database_from_url(env("DATABASE_URL", f"sqlite:///{VAR_DIR / 'continuity.sqlite3'}"))
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, whose health check of a connection in steady use costs no round trip
    # (continuity/database).
    DATABASES["default"]["ENGINE"] = "continuity.database"
    # Fail fast instead of hanging when the database is away or a row stays locked: callers
    # treat these errors as an outage and retry (see docs/design.md).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "connect_timeout": env("DATABASE_CONNECT_TIMEOUT", 5),
            # A session left idle inside a transaction (its process frozen by SIGSTOP, swapped
            # out, stuck on something else) is ended by the server, and its locks with it: no
            # conversation stays locked for longer. Shorter than the lock timeout, so a send
            # that waits on a frozen holder gets the lock instead of failing.
            "options": f"-c lock_timeout={env('DATABASE_LOCK_TIMEOUT_MS', 10_000)} "
            f"-c statement_timeout={env('DATABASE_STATEMENT_TIMEOUT_MS', 60_000)} "
            "-c idle_in_transaction_session_timeout="
            f"{env('DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS', 5_000)}",
            # A connection whose peer vanished (a black-holed network, a host gone without a
            # reset) fails within seconds, as an outage, instead of waiting for the kernel's
            # two hours: keepalives for a quiet connection, a send timeout for a busy one.
            "keepalives": 1,
            "keepalives_idle": env("DATABASE_KEEPALIVES_IDLE", 5),
            "keepalives_interval": env("DATABASE_KEEPALIVES_INTERVAL", 2),
            "keepalives_count": env("DATABASE_KEEPALIVES_COUNT", 3),
            "tcp_user_timeout": env("DATABASE_TCP_USER_TIMEOUT_MS", 10_000),
            # Statements are prepared at their first run on a connection: parsed once, and
            # after five runs planned once where that plan is as good as one made for the
            # values (the engine's are written so that it is: `store.connection.cursor`). Only
            # the engine's hand-written hot path binds values on the server (continuity.store);
            # the ORM binds on the client, which psycopg never prepares. Not for a pooler in
            # transaction mode (PgBouncer): prepared statements belong to one server connection.
            "prepare_threshold": 0,
        }
    )
    if pool_size := env("DATABASE_POOL_SIZE", 0):
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
            "timeout": env("DATABASE_POOL_TIMEOUT", 10),
        }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's backend, except that a worker never forks a pool process while one of its
    # threads holds SQLite's locks (continuity/database/sqlite).
    DATABASES["default"]["ENGINE"] = "continuity.database.sqlite"
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }

ADMINS = [tuple(pair.split(":", 1)) for pair in env("ADMINS", [])]
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
# Without a timeout, an SMTP server that accepts and never answers holds the sender for good.
EMAIL_TIMEOUT = env("EMAIL_TIMEOUT", 10.0)
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = env("EMAIL_PORT", 25)
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env("EMAIL_USE_TLS", False)
# With EMAIL_BACKEND=django.core.mail.backends.filebased.EmailBackend: a file per mail, here.
EMAIL_FILE_PATH = env("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "continuity@localhost")
# The address people reach this site at, for links in mail (a password reset's): never taken
# from a request's Host header, which its sender chooses.
SITE_URL = env("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

REDIS_URL = env("REDIS_URL", "redis://127.0.0.1:6379/0")
# Redis with failover (docs/several-hosts.md): the Sentinels that watch its primary, as
# `host:port,host:port,...`, and the name they know it by. Everything that uses Redis (the
# broker, the drain markers and heartbeat keys, the rate limiter, the live layer) then asks them
# where the primary is, and asks again after a failover. REDIS_URL gives only the database
# number and the password.
REDIS_SENTINELS = [
    (sentinel.rpartition(":")[0], int(sentinel.rpartition(":")[2]))
    for sentinel in env("REDIS_SENTINELS", [])
]
REDIS_SENTINEL_MASTER = env("REDIS_SENTINEL_MASTER", "continuity")
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
        # channels-redis's, on connections that keep a cancellation arriving during a
        # command's write (Python 3.11).
        "BACKEND": "continuity.live.layer.ChannelLayer",
        "CONFIG": {
            # Every page reconnects at once after a restart: redis-py's default cap of 100
            # connections per pool would fail the handshakes beyond it.
            "hosts": [
                {
                    **REDIS_LAYER_HOST,
                    "socket_timeout": 15,
                    "socket_connect_timeout": 5,
                    "max_connections": 1000,
                }
            ],
            "capacity": 1500,
            "expiry": 30,
            # A group forgets a member this long after it joined: open sockets join again
            # before that (chat/consumers.py), so a page open for days still receives.
            "group_expiry": env("CHANNEL_GROUP_EXPIRY_SECONDS", 86400),
        },
    }
}


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
CELERY_TASK_DEFAULT_QUEUE = env("CONTINUITY_QUEUE", "celery")
CELERY_TASK_ACKS_LATE = True
# How long the main process waits for the result of a job whose pool process died before it
# fails the job with WorkerLostError (Celery's default: 10 s). No result is ever kept here, and
# the failure is what ends the dead process's attempt at once (continuity/worker/pool.py).
CELERY_WORKER_LOST_WAIT = env("CELERY_WORKER_LOST_WAIT", 0.1)
# Celery's prefork pool, checking on its processes every 0.25 s instead of every 5 s.
CELERY_WORKER_POOL = "continuity.worker.prefork:TaskPool"
# Celery's consumer, asking for a broker that went away again every second at most; for ever,
# as a supervisor would start it again anyway (Celery's 100 tries were 45 minutes on its own
# ladder of waits, and would be under two on this one).
CELERY_WORKER_CONSUMER = "continuity.worker.consumer:Consumer"
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env("CELERY_TASK_SOFT_TIME_LIMIT", 300.0)
CELERY_TASK_TIME_LIMIT = env("CELERY_TASK_TIME_LIMIT", 330.0)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env("CELERY_VISIBILITY_TIMEOUT", 3600),
    "unacked_restore_interval": env("CELERY_UNACKED_RESTORE_INTERVAL", 60),
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
