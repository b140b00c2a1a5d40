"""Only a database that cannot serve answers 503 "try again": a refused or lost connection. A
wrong statement is a bug, answered 500 and logged with its traceback, never blamed on the
database (on SQLite both are OperationalError)."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from django.db import OperationalError, connection, connections
from django.http import HttpResponse
from django.urls import path

from continuity.database.outages import database_unreachable
from devtools.redis_server import free_port

pytestmark = pytest.mark.django_db


def another_connection(settings: dict):
    """A connection of the request's kind, apart from the request's own."""
    return type(connections[connection.alias])(settings, alias=connection.alias)


def unreachable_database():
    """A second connection, like the request's, to a database that is not there: nothing
    listens on its port (PostgreSQL), or its file cannot be opened (SQLite)."""
    settings = {**connection.settings_dict}
    if connection.vendor == "postgresql":
        settings["PORT"] = free_port()
    else:
        settings["NAME"] = "/nonexistent/directory/continuity.sqlite3"
    return another_connection(settings)


def refused_view(request):
    unreachable_database().ensure_connection()
    return HttpResponse("unreachable")


def wrong_statement_view(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY 1) FROM WHERE")
    return HttpResponse("unreachable")


def lost_connection_view(request):
    """The request's own kind of connection, ended by the server while in use."""
    victim = another_connection(connection.settings_dict)
    with victim.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
        with connection.cursor() as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
        cursor.execute("SELECT 1")
    return HttpResponse("unreachable")


urlpatterns = [
    path("refused/", refused_view),
    path("wrong-statement/", wrong_statement_view),
    path("lost-connection/", lost_connection_view),
]


@pytest.fixture
def app(client, settings):
    settings.ROOT_URLCONF = __name__
    client.raise_request_exception = False
    return client


def test_a_refused_connection_answers_503_with_when_to_try_again(app):
    response = app.get("/refused/")

    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    assert "Nothing you already sent is lost" in response.content.decode()


@pytest.mark.postgresql("PostgreSQL's server ends the connection; SQLite has no server")
def test_a_connection_the_server_ends_answers_503(app):
    assert app.get("/lost-connection/").status_code == 503


def test_a_wrong_statement_is_a_500_logged_with_its_traceback_not_an_outage(app, caplog):
    with caplog.at_level(logging.WARNING):
        response = app.get("/wrong-statement/")

    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()
    assert "Briefly unavailable" not in response.content.decode()
    errors = [record for record in caplog.records if record.name == "django.request"]
    assert [record.levelno for record in errors] == [logging.ERROR]
    assert errors[0].exc_info and "syntax error" in str(errors[0].exc_info[1])
    assert not any("Database unavailable" in record.getMessage() for record in caplog.records)


def test_sqlite_busy_is_an_outage_and_its_syntax_error_is_not(tmp_path):
    """SQLite reports both as OperationalError; only its error name tells them apart."""
    database = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(database, timeout=0)

    def raised(statement: str) -> OperationalError:
        try:
            waiter.execute(statement)
        except sqlite3.Error as cause:
            error = OperationalError(str(cause))  # as Django's wrapper raises it
            error.__cause__ = cause
            return error
        raise AssertionError(f"{statement!r} did not fail")

    assert database_unreachable(raised("INSERT INTO t VALUES (1)"))
    assert not database_unreachable(raised("SELECT FROM WHERE"))
