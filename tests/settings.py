"""Settings for the test suite and for the worker, watchdog and web processes it starts."""

import os
import tempfile

from tests.helpers.redis_server import session_redis_url

os.environ.setdefault("SECRET_KEY", "test-suite-only")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/continuity")
os.environ["REDIS_URL"] = session_redis_url()
os.environ.setdefault("CONTINUITY_BUILTIN_TOKEN_DELAY", "0")

from continuity.settings import *  # noqa: E402, F403

INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]  # noqa: F405
CONTINUITY_FAULT_INJECTION = True
CONTINUITY_BRAINS = {**CONTINUITY_BRAINS, "faulty": "tests.helpers.brains.FaultyBrain"}  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if DATABASES["default"]["ENGINE"] == "continuity.database.sqlite":  # noqa: F405
    # A file in WAL mode, as `make run` has it, rather than Django's shared in-memory database,
    # whose table locks fail a read at once while another connection writes.
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": os.path.join(tempfile.gettempdir(), f"continuity-test-{os.getpid()}.sqlite3")
    }
