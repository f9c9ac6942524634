"""services.api — the REST gateway, WhatsApp webhook ingest and SSE streams (SPEC §4)."""
