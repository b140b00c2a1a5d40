"""Django's database backend for SQLite, safe across a fork (see base.py)."""
