"""Where and on what the figures were taken: machine, versions, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection

PACKAGES = ("Django", "celery", "kombu", "redis", "psycopg", "channels", "channels-redis", "daphne")


def machine() -> dict[str, str]:
    return {
        "CPU": cpu_model(),
        "cores": str(os.cpu_count()),
        "RAM": f"{memory_total_gib():.1f} GiB",
        "OS": f"{platform.system()} {platform.release()}",
        # Anything else busy on the machine skews every figure: said with them.
        "load average at the start": f"{os.getloadavg()[0]:.2f}",
    }


def cpu_model() -> str:
    for line in read_lines("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_total_gib() -> float:
    for line in read_lines("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def versions(redis_url: str) -> dict[str, str]:
    found = {"Python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        found["PostgreSQL"] = cursor.fetchone()[0].split()[0]
    found["Redis"] = redis.Redis.from_url(redis_url).info("server")["redis_version"]
    return found


def git_commit() -> str:
    """The commit measured, and whether the work tree had changes on top of it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{commit}{' with uncommitted changes' if dirty else ''}"
