"""Scheduled analysis agents: the daily fan-out and the insights API (docs/analysis.md)."""
