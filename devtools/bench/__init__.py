"""`manage.py bench`: the engine measured with real workers, Redis and PostgreSQL.

One module per section (baseline, throughput, latency, growth, recovery, streaming, memory),
on top of `rig` (the run's own database, Redis and processes), `counting` (statements,
transactions and Redis commands), `stats` and `report`. `run.bench_run` ties them together.
Kept free of imports: workers import `tasks` from here, and need nothing else.
"""
