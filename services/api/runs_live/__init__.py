"""Live runs: the dry-run test of an agent version [004 §4.4 `:test`, D5] and a run's events as SSE.

Include with ``app.include_router(services.api.runs_live.endpoints.router)`` in
``services/api/app.py`` (see docs/runner.md, "Dry run and live events").
"""
