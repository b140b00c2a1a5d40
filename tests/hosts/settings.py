"""Settings for the multi-host tests (`pytest tests/hosts --ds tests.hosts.settings`, as
`make test` runs them): the suite's, with the databases and Redis that the tests make on hosts
of their own instead of the machine's."""

import os

from tests.hosts.topology import DATABASE_URL, MASTER_NAME, REDIS_SENTINELS, REDIS_URL

os.environ["DATABASE_URL"] = DATABASE_URL
os.environ["CONTINUITY_TEST_REDIS_URL"] = REDIS_URL
os.environ["REDIS_SENTINELS"] = REDIS_SENTINELS
os.environ["REDIS_SENTINEL_MASTER"] = MASTER_NAME

from tests.settings import *  # noqa: E402, F403
