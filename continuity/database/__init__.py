"""Django's database backend for PostgreSQL, whose health check of a connection in steady use
costs no round trip (`DATABASES` names it as the engine: see settings)."""
