"""Scheduled follow-ups fired as ``followUp`` wakes (docs/memory.md, "Scheduled follow-ups")."""
