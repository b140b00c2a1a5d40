"""The multi-host tests' network: who is where. Read by their settings before Django starts,
so the test process itself reaches the private PostgreSQL and Redis over the bridge."""

from tests.hosts.network import SUBNET

# Host name → the last byte of its address.
HOSTS = {
    "redis": 2,
    "pg-1": 3,
    "pg-2": 4,
    "redis-2": 5,
    "sentinel-1": 6,
    "sentinel-2": 7,
    "sentinel-3": 8,
    "web-a": 11,
    "web-b": 12,
    "worker-c": 13,
    "worker-d": 14,
    "watchdog": 15,
}
ADDRESSES = {name: f"{SUBNET}.{last}" for name, last in HOSTS.items()}
POSTGRES_PORT = 5432
REDIS_PORT = 6379
# PostgreSQL refuses to run as root; the Debian package's account owns the test's clusters.
POSTGRES_USER = "postgres"
DATABASE_NAME = "continuity"
# pg-1 starts as the primary, with pg-2 its synchronous standby; libpq takes whichever of the
# two answers as the primary, in this order (docs/several-hosts.md).
DATABASE_URL = (
    f"postgres://{POSTGRES_USER}@{ADDRESSES['pg-1']}:{POSTGRES_PORT},"
    f"{ADDRESSES['pg-2']}:{POSTGRES_PORT}/{DATABASE_NAME}?target_session_attrs=read-write"
)
# Redis on `redis`, replicated to `redis-2`, with three Sentinels that the deployment asks
# where the primary is (REDIS_SENTINELS); REDIS_URL then gives only the database.
REDIS_URL = f"redis://{ADDRESSES['redis']}:{REDIS_PORT}/0"
SENTINEL_PORT = 26379
SENTINELS = [f"sentinel-{n}" for n in (1, 2, 3)]
REDIS_SENTINELS = ",".join(f"{ADDRESSES[name]}:{SENTINEL_PORT}" for name in SENTINELS)
MASTER_NAME = "continuity"
WEB_PORT = 8000
