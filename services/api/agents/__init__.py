"""Agents and their versions: CRUD, save, publish, pause, duplicate [004 §4.3-4.5]."""
