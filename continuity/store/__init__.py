"""The store: every hand-written SQL statement of the engine's hot path (one message's begin,
steps and finish), and the only importer of the helper that runs them (`connection`).

Why not the ORM there: building a query costs 0.3–1.5 ms of CPU per statement on the machines
this runs on, often more than the statement's round trip, and a message makes about twenty
(docs/decisions/0001-hand-written-sql-on-the-hot-path.md). Everything else uses the ORM.

Each statement is a function returning a `Query`: its SQL, its values, and how its rows are
read into a typed row (a NamedTuple or a model instance). `round_trip` runs several in one
round trip and returns what each found, looked up by its `Query`: nothing is read by
position. The modules are named for the rows they touch: `conversations`, `messages`, `runs`,
and `contexts` for the reads of an attempt's startup context and its record.
"""

from .query import Found, Query, execute, round_trip, unflushed_commit

__all__ = ["Found", "Query", "execute", "round_trip", "unflushed_commit"]
