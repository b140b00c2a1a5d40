"""Django's database backend for PostgreSQL, with a health check that costs no round trip
(`DATABASES` names it as the engine: see settings)."""
