"""Alembic migration environment and scripts (a package so that wheels ship them)."""
