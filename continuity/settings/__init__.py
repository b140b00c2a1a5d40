"""Settings for Continuity, read from the environment (see docs/operations.md, "Configuration").

One module per reason to change: `base` (Django's apps, middleware, templates, static files,
logging), `security` (keys, hosts, cookies, HTTPS, logins, the content security policy),
`services` (the database, Redis and its Sentinels, the channel layer, Celery, mail) and
`engine` (every `CONTINUITY_*` setting). Each reads the environment through `env.env`, and
none imports the product's code: a class the settings name is named by its dotted path.
"""

from .base import *  # noqa: F403
from .engine import *  # noqa: F403
from .security import *  # noqa: F403
from .services import *  # noqa: F403
