"""Settings for the developer tools' commands (`manage.py bench`, `manage.py chaos`, which
manage.py runs with these): the product's, with the devtools app installed."""

from continuity.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]  # noqa: F405
