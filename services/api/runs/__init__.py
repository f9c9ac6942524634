"""Run log and traces [004 §4, SPEC §4]."""
