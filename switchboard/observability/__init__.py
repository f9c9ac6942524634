"""Logs, metrics and health: the same three things in every service."""
