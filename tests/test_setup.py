"""The set-up that `make run` and `make test` do themselves on a fresh machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

# The suite's session fixtures expect the test database; these tests do not touch it.
pytestmark = [pytest.mark.django_db, pytest.mark.processes]
BASE_DIR = Path(settings.BASE_DIR)
ENSURE = BASE_DIR / "scripts" / "ensure-test-services"


def run(argv: list[str], cwd: Path = BASE_DIR, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", **env},
    )  # fmt: skip


def test_make_test_runs_the_set_up_before_pytest():
    recipe = run(["make", "-n", "test"]).stdout.splitlines()
    assert recipe.index("scripts/ensure-test-services") < next(
        i for i, line in enumerate(recipe) if "pytest" in line
    )


def test_make_bench_sets_up_the_services_first_and_is_not_part_of_make_test():
    bench = run(["make", "-n", "bench"]).stdout
    assert bench.index("scripts/ensure-test-services") < bench.index("manage.py bench")
    assert "manage.py bench" not in run(["make", "-n", "test"]).stdout


def test_ci_calls_make_test_then_the_llama_lane():
    lines = (BASE_DIR / ".ci" / "run").read_text().splitlines()
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["make test test-llm"]


def test_make_test_leaves_the_llama_lane_to_make_test_llm():
    suite = [line for line in run(["make", "-n", "test"]).stdout.splitlines() if "pytest" in line]
    own_lanes = ("tests/browser", "tests/hosts")
    assert all(
        "--ignore=tests/llm" in line or any(lane in line for lane in own_lanes) for line in suite
    )
    assert "pytest tests/llm" in run(["make", "-n", "test-llm"]).stdout


def test_make_run_passes_the_port():
    assert "serve --port 8123" in run(["make", "-n", "run", "PORT=8123"]).stdout


def test_with_postgres_up_and_chromium_there_the_set_up_does_nothing():
    result = run([str(ENSURE)], CONTINUITY_CHROMIUM="/bin/sh")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv to drop root")
def test_without_chromium_and_not_root_it_says_what_to_install():
    # A copy in a directory anyone may enter: a clone under `mktemp -d` (mode 0700), as CI
    # makes, is closed to the unprivileged user.
    with tempfile.TemporaryDirectory() as where:
        os.chmod(where, 0o755)
        script = Path(shutil.copy(ENSURE, where))
        result = run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(script)],
            cwd=Path(where),
            CONTINUITY_CHROMIUM="/nonexistent/chromium",
            DATABASE_URL="postgres://elsewhere.invalid:5432/db",  # not ours to start
        )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "apt-get install chromium" in result.stderr
