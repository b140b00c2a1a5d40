"""The multi-host tests run in a pytest process of their own, on a network they build (root
only): `pytest tests/hosts --ds tests.hosts.settings`, as `make test` runs them.

The test process sits on the bridge, with the browser and the front (the load balancer); the
web servers, the workers and the watchdog each run on a host of their own, and so do the
PostgreSQL primary, its synchronous standby and Redis, all private to these tests. Pages drive
the web hosts through Playwright, so ORM calls between page actions need
DJANGO_ALLOW_ASYNC_UNSAFE, as in tests/browser.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.core.management import call_command

from continuity.live.events import redis_configured
from tests.browser.launch import CHROMIUM_LAUNCH
from tests.helpers.processes import ARTIFACTS, WatchdogProcess, WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for
from tests.hosts.front import Front
from tests.hosts.network import BRIDGE_ADDRESS, Host, Network
from tests.hosts.pages import signed_in_context
from tests.hosts.store import HostRedis, HostSentinel, PrivatePostgres, remove_leftover_clusters
from tests.hosts.topology import ADDRESSES, DATABASE_NAME, HOSTS, SENTINELS, WEB_PORT

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

NOT_ROOT = "needs root to build network namespaces (CI runs as root)"


def pytest_collection_modifyitems(config, items):
    if settings.DATABASES["default"]["HOST"] != f"{ADDRESSES['pg-1']},{ADDRESSES['pg-2']}":
        raise pytest.UsageError("run the multi-host tests with --ds tests.hosts.settings")
    if os.geteuid() != 0:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=NOT_ROOT))
    # A failover leaves its pair with one server: those tests come after the rest.
    items.sort(key=lambda item: "failover" in item.module.__name__)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, **CHROMIUM_LAUNCH}


@pytest.fixture(scope="session")
def network():
    built = Network(HOSTS)
    try:
        yield built.build()
    finally:
        built.remove()


@dataclass
class Databases:
    primary: PrivatePostgres
    standby: PrivatePostgres


@pytest.fixture(scope="session")
def databases(network):
    """The private PostgreSQL on pg-1, with its synchronous standby on pg-2."""
    remove_leftover_clusters()
    primary = PrivatePostgres(network["pg-1"]).initialize()
    try:
        primary.start().create_database(DATABASE_NAME)
        yield Databases(primary, primary.standby(network["pg-2"], name="standby"))
    finally:
        primary.remove()  # and its standby


@dataclass
class Redises:
    primary: HostRedis
    replica: HostRedis
    sentinels: list[HostSentinel]


@pytest.fixture(scope="session")
def redises(network):
    """Redis on `redis`, its replica on `redis-2`, and the three Sentinels, once they all know
    the primary and its replica."""
    primary = HostRedis(network["redis"])
    replica = HostRedis(network["redis-2"], replica_of=network["redis"])
    sentinels = [HostSentinel(network[name], primary=network["redis"]) for name in SENTINELS]
    try:
        primary.start()
        replica.start()
        for sentinel in sentinels:
            sentinel.start()
        wait_for(
            lambda: all(sentinel.knows_a_replica() for sentinel in sentinels),
            timeout=30,
            what="the Sentinels to know the primary and its replica",
        )
        yield Redises(primary, replica, sentinels)
    finally:
        for sentinel in sentinels:
            sentinel.remove()
        replica.stop()
        primary.stop()


@pytest.fixture(scope="session")
def store(databases, redises):
    """The private PostgreSQL pair and Redis with its Sentinels."""
    return databases


@pytest.fixture(autouse=True)
def redis_emptied_after():
    """As the suite's (tests/conftest.py), through the Sentinels: each test leaves Redis empty."""
    yield
    with contextlib.suppress(redis.RedisError):
        redis_configured(timeout=2).flushdb()


@pytest.fixture(scope="session")
def django_db_setup(store, django_db_blocker):
    """The private cluster's database, migrated: it is the tests' own and goes with the
    cluster, so there is no test database to create or flush."""
    with django_db_blocker.unblock():
        call_command("migrate", verbosity=0)


@pytest.fixture(autouse=True)
def database(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        yield


# A reply streams for about a second and a half: long enough to be caught mid-way.
HOST_CLOCKS = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0.04"}


def skewed_clock_library() -> Path:
    """The LD_PRELOAD shim that moves a process's wall clock (skewed_clock.c), built here."""
    library = ARTIFACTS / "skewed_clock.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).resolve().parent / "skewed_clock.c"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"], check=True
    )
    return library


DEPLOYED = ("web-a", "web-b", "worker-c", "worker-d", "watchdog")


@dataclass
class Deployment:
    """Web hosts A and B, worker hosts C and D, the watchdog host, and two fronts: one that
    sends each connection to A while it answers (else B), one to B first."""

    network: Network
    started: list = field(default_factory=list)
    fronts: list[Front] = field(default_factory=list)

    def __post_init__(self) -> None:
        addresses = [self.network[name].address for name in HOSTS]
        self.env = {
            **HOST_CLOCKS,
            "ALLOWED_HOSTS": ",".join([BRIDGE_ADDRESS, *addresses]),
        }
        web_a, web_b = ((self.network[name].address, WEB_PORT) for name in ("web-a", "web-b"))
        self.front_a = Front(BRIDGE_ADDRESS, [web_a, web_b])
        self.front_b = Front(BRIDGE_ADDRESS, [web_b, web_a])
        self.fronts = [self.front_a.start(), self.front_b.start()]

    def host(self, name: str) -> Host:
        return self.network[name]

    def on(self, host: Host, process):
        process.argv = host.argv(process.argv)
        self.started.append(process)
        return process.start()

    def web(self, name: str, **overrides: str) -> WebProcess:
        host = self.host(name)
        env = {**self.env, **overrides}
        return self.on(host, WebProcess(port=WEB_PORT, address=host.address, **env))

    def worker(self, name: str, *, clock_skew: int = 0, **overrides: str) -> WorkerProcess:
        env = {**self.env, **overrides}
        if clock_skew:
            env |= {
                "LD_PRELOAD": str(skewed_clock_library()),
                "SKEWED_CLOCK_SECONDS": str(clock_skew),
            }
        return self.on(self.host(name), WorkerProcess(node=f"{name}@hosts", **env))

    def start(
        self, workers: tuple[str, ...] = ("worker-c", "worker-d"), **web_env: str
    ) -> Deployment:
        self.on(self.host("watchdog"), WatchdogProcess(**self.env))
        for name in ("web-a", "web-b"):
            self.web(name, **web_env)
        for name in workers:
            self.worker(name)
        return self

    def remove(self) -> None:
        for front in self.fronts:
            front.stop()
        for name in DEPLOYED:  # killed before healed: a partitioned host writes nothing more
            self.host(name).lose()
            self.network.heal(name)
        for process in self.started:
            if process.popen is not None:
                process.popen.wait()


@pytest.fixture
def deployment(network, store):
    made = Deployment(network)
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def signed_in(browser):
    """Browser contexts signed in as a person; closed after the test, so their pages do not
    reconnect to the next test's web hosts (the same addresses)."""
    contexts = []

    def make(user):
        contexts.append(signed_in_context(browser, user))
        return contexts[-1]

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def record(request):
    """Writes the scenario's verdict where the note's numbers come from."""

    def write(**verdict) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"scenario": request.node.name, **verdict}, default=str)
        with (ARTIFACTS / "hosts-verdicts.jsonl").open("a") as verdicts:
            verdicts.write(line + "\n")
        print(line)

    return write
