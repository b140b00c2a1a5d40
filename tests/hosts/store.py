"""The stateful parts, private to the test: a PostgreSQL cluster it makes with initdb and a
redis-server, each on a host of its network. The machine's own PostgreSQL and Redis are never
touched."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import redis

from devtools.processes import ChildProcess
from devtools.redis_server import RedisServer
from tests.helpers.processes import artifact
from tests.helpers.waiting import wait_for
from tests.hosts.network import SUBNET, Host
from tests.hosts.topology import (
    MASTER_NAME,
    POSTGRES_PORT,
    POSTGRES_USER,
    REDIS_PORT,
    SENTINEL_PORT,
)


def postgres_bin(program: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {program} is not installed")
    return found[-1]


def as_postgres(argv: list[str]) -> list[str]:
    """Run as the postgres account: setpriv execs (no child left behind, unlike su)."""
    return ["setpriv", f"--reuid={POSTGRES_USER}", f"--regid={POSTGRES_USER}", "--init-groups",
            *argv]  # fmt: skip


CLUSTER_PREFIX = "continuity-hosts-pg-"
SENTINEL_PREFIX = "continuity-hosts-sentinel-"


def remove_leftover_clusters() -> None:
    """The data directories of runs killed before their clean-up (their processes went with
    their hosts' namespaces): clusters and Sentinels'."""
    for directory in Path(tempfile.gettempdir()).glob("continuity-hosts-*"):
        shutil.rmtree(directory, ignore_errors=True)


class PrivatePostgres:
    """A cluster of the test's own in a temporary directory, serving `host`'s address.

    fsync is off: the tests kill processes, never the machine, and a killed PostgreSQL loses
    nothing the kernel already holds; the whole cluster is thrown away afterwards."""

    def __init__(self, host: Host, *, settings: dict[str, str] | None = None) -> None:
        self.host = host
        self.settings = settings or {}
        self.directory = ""
        self.process: ChildProcess | None = None
        self.replicas: list[PrivatePostgres] = []

    def initialize(self) -> PrivatePostgres:
        self.directory = tempfile.mkdtemp(prefix=CLUSTER_PREFIX)
        shutil.chown(self.directory, POSTGRES_USER, POSTGRES_USER)
        subprocess.run(
            as_postgres([postgres_bin("initdb"), "-D", self.directory, "-A", "trust", "-U",
                         POSTGRES_USER, "--no-sync"]),
            check=True, capture_output=True,
        )  # fmt: skip
        # Reached over the test's own network only: trust it, replication connections included.
        with (Path(self.directory) / "pg_hba.conf").open("a") as hba:
            for kind in ("all", "replication"):
                hba.write(f"host {kind} all {SUBNET}.0/24 trust\n")
        return self

    def start(self) -> PrivatePostgres:
        options = {
            "listen_addresses": self.host.address,
            "port": str(POSTGRES_PORT),
            # TCP only: a socket's lock file in the data directory would be copied to a
            # standby by pg_basebackup, and stop it from starting.
            "unix_socket_directories": "",
            "fsync": "off",
            "max_connections": "200",
            **self.settings,
        }
        argv = [postgres_bin("postgres"), "-D", self.directory]
        for name, value in options.items():
            argv += ["-c", f"{name}={value}"]
        log = artifact(f"postgres-{self.host.name}")
        self.process = ChildProcess(
            self.host.argv(as_postgres(argv)), env={"PATH": os.environ["PATH"]}, log_path=log
        )
        self.process.start()
        wait_for(
            self.ready,
            timeout=30,
            what=f"PostgreSQL on {self.host.name}\n{self.process.log()[-2000:]}",
        )
        return self

    def ready(self) -> bool:
        """Accepting connections: the port answers while the cluster is still starting up."""
        address = [
            "-h",
            self.host.address,
            "-p",
            str(POSTGRES_PORT),
            "-U",
            POSTGRES_USER,
            "-t",
            "1",
        ]
        return (
            subprocess.run([postgres_bin("pg_isready"), *address], capture_output=True).returncode
            == 0
        )

    def create_database(self, name: str) -> None:
        subprocess.run(
            [postgres_bin("createdb"), "-h", self.host.address, "-U", POSTGRES_USER, name],
            check=True, capture_output=True,
        )  # fmt: skip

    def query(self, sql: str) -> str:
        """One value, read by psql on the test's side of the network."""
        return subprocess.run(
            [postgres_bin("psql"), "-h", self.host.address, "-U", POSTGRES_USER, "-d", "postgres",
             "-AtXc", sql],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

    def standby(self, host: Host, *, name: str) -> PrivatePostgres:
        """A streaming standby of this cluster on `host`, copied by pg_basebackup, known to
        this primary as `name` (its application_name), and started. This primary then waits
        for it at every commit: `synchronous_commit = on` (the default) with it as the one
        synchronous standby. A commit is acknowledged once the standby has the WAL on disk, so
        promoting it loses no acknowledged commit. `remote_apply` would also make the commit
        visible there at once, which only reads from the standby would need; there are none.
        """
        replica = PrivatePostgres(
            host,
            settings={
                "primary_conninfo": f"host={self.host.address} port={POSTGRES_PORT} "
                f"user={POSTGRES_USER} application_name={name}",
                "hot_standby": "on",
            },
        )
        replica.directory = tempfile.mkdtemp(prefix=CLUSTER_PREFIX)
        shutil.chown(replica.directory, POSTGRES_USER, POSTGRES_USER)
        subprocess.run(
            as_postgres([postgres_bin("pg_basebackup"), "-h", self.host.address, "-U",
                         POSTGRES_USER, "-D", replica.directory, "-X", "stream", "-R",
                         "--checkpoint=fast", "--no-sync"]),
            check=True, capture_output=True,
        )  # fmt: skip
        self.replicas.append(replica)  # removed with this one, even if it fails to start
        replica.start()
        self.query(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        self.query("SELECT pg_reload_conf()")
        wait_for(
            lambda: (
                self.query(
                    f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'"
                )
                == "sync"
            ),
            timeout=30,
            what=f"the standby on {host.name} to replicate synchronously",
        )
        return replica

    def promote(self) -> None:
        """The standby becomes the primary, as Patroni would have it do (`pg_ctl promote`)."""
        subprocess.run(
            as_postgres([postgres_bin("pg_ctl"), "promote", "-w", "-t", "60", "-D",
                         self.directory]),
            check=True, capture_output=True,
        )  # fmt: skip

    def remove(self) -> None:
        for replica in self.replicas:
            replica.remove()
        if self.process is not None:
            self.process.kill_all()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


class HostRedis(RedisServer):
    """redis-server without persistence on `host`'s address; with `replica_of`, a replica of
    that one's (replication is asynchronous: a failover may lose its last writes)."""

    def __init__(self, host: Host, *, replica_of: Host | None = None) -> None:
        super().__init__(port=REDIS_PORT)
        self.host = host
        self.replica_of = replica_of
        self.url = f"redis://{host.address}:{REDIS_PORT}/0"

    def argv(self, *, bind: str = "") -> list[str]:
        # Reached from the other hosts, without a password: on the test's own network only.
        served = [*super().argv(bind=bind or self.host.address), "--protected-mode", "no"]
        if self.replica_of is not None:
            served += ["--replicaof", self.replica_of.address, str(REDIS_PORT)]
        return self.host.argv(served)


class HostSentinel(ChildProcess):
    """A Redis Sentinel on `host`, watching `primary` as MASTER_NAME: it takes a primary that
    answers nothing for a second as down, and with another Sentinel agreeing (a quorum of 2 of
    3) promotes a replica."""

    def __init__(self, host: Host, *, primary: Host) -> None:
        self.host = host
        self.directory = tempfile.mkdtemp(prefix=SENTINEL_PREFIX)
        config = Path(self.directory) / "sentinel.conf"  # Sentinel rewrites it as it learns
        config.write_text(
            f"port {SENTINEL_PORT}\n"
            f"bind {host.address}\n"
            "protected-mode no\n"
            f"dir {self.directory}\n"
            f"sentinel monitor {MASTER_NAME} {primary.address} {REDIS_PORT} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
        )
        binary = RedisServer().binary
        super().__init__(
            host.argv([binary, str(config), "--sentinel"]),
            env={"PATH": os.environ["PATH"]},
            log_path=artifact(f"sentinel-{host.name}"),
        )

    def client(self) -> redis.Redis:
        return redis.Redis(
            self.host.address, SENTINEL_PORT, socket_timeout=1, decode_responses=True
        )

    def primary(self) -> str | None:
        """The address this Sentinel names as the primary now."""
        try:
            answer = self.client().sentinel_get_master_addr_by_name(MASTER_NAME)
        except redis.RedisError:
            return None
        return answer[0] if answer else None

    def knows_a_replica(self) -> bool:
        try:
            return bool(self.client().sentinel_slaves(MASTER_NAME))
        except redis.RedisError:
            return False

    def remove(self) -> None:
        self.kill_all()
        shutil.rmtree(self.directory, ignore_errors=True)
