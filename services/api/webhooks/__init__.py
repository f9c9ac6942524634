"""Inbound channel webhooks (WAHA-compatible) [004 §4.6]."""
