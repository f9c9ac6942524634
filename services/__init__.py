"""Switchboard's deployable services, one package each, plus the operator CLI.

Services talk to each other only through Kafka topics; none imports another
(checked by import-linter). Shared code lives in the ``switchboard`` package.
"""
