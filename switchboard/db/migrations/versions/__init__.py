"""Revision scripts, applied in order by ``switchboard.db.migrate``."""
