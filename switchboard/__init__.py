"""Switchboard's shared package: what every service needs and no service owns.

Sub-packages, one job each:

- ``contracts``     Avro topic contracts: the topic registry, typed records, the serde.
- ``kafka``         producing, consuming with an error policy, dead letters, topic admin.
- ``db``            SQLAlchemy models, Alembic migrations, tenant-scoped sessions.
- ``observability`` structured logs that scrub secrets, Prometheus metrics, health.
- ``settings``      typed settings shared by services (Kafka, database, runtime).

Nothing here imports ``services``: dependencies flow one way (checked by import-linter).
"""
