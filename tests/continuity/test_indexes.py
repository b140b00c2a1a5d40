"""The partial indexes of the message table and the hand-written statements that rely on them
state the same condition: one written for the ORM (`continuity.models`), one written out in SQL
(`continuity.store.messages`). A statement whose condition drifted from its index's would no
longer be served by it, and no result would change: only the plan, at scale."""

from __future__ import annotations

import pytest
from django.db import connection

from continuity.models import Message
from continuity.store.messages import ANSWERED_QUESTION, WAITING

pytestmark = [pytest.mark.django_db, pytest.mark.postgresql("reads pg_indexes")]


def index_condition(name: str) -> str:
    """The condition of a partial index, as PostgreSQL holds it (normalized: casts, parentheses
    and `IN` lists written its way)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        (definition,) = cursor.fetchone()
    return definition.split(" WHERE ", 1)[1]


def condition_as_indexed(condition: str) -> str:
    """`condition` as PostgreSQL holds it once it is an index's (the index is rolled back with
    the test's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX condition_probe ON continuity_message (id) WHERE {condition}")
    return index_condition("condition_probe")


def conjuncts(condition: str) -> set[str]:
    """The terms of a condition's top-level AND, in any order (the planner proves an index
    usable whatever the order of its terms)."""
    while condition.startswith("(") and closing(condition, 0) == len(condition) - 1:
        condition = condition[1:-1]
    terms, depth, start = set(), 0, 0
    for position, character in enumerate(condition):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0 and condition.startswith(" AND ", position):
            terms.add(condition[start:position])
            start = position + len(" AND ")
    return terms | {condition[start:]}


def closing(text: str, opening: int) -> int:
    depth = 0
    for position in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[position], 0)
        if depth == 0:
            return position
    raise ValueError(f"unbalanced: {text}")


@pytest.mark.parametrize(
    ("index", "statements_condition"),
    [("message_waiting", WAITING), ("message_answered_question", ANSWERED_QUESTION)],
)
def test_each_partial_index_has_the_condition_its_statements_state(index, statements_condition):
    assert conjuncts(condition_as_indexed(statements_condition)) == conjuncts(
        index_condition(index)
    )


@pytest.mark.parametrize(
    ("index", "rows"),
    [
        ("message_waiting", Message.objects.waiting),
        ("message_answered_question", Message.objects.answered_questions),
    ],
)
def test_each_partial_index_has_the_condition_of_its_queryset_method(index, rows):
    query, params = rows().order_by().query.sql_with_params()
    where = query.split(" WHERE ", 1)[1]
    with connection.cursor() as cursor:
        literal = cursor.mogrify(where, params)  # the values as SQL literals, as an index has them
    indexed = condition_as_indexed(literal.replace('"continuity_message".', ""))
    assert conjuncts(indexed) == conjuncts(index_condition(index))
