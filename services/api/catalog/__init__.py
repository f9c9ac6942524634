"""Providers and the model catalog [004 §4.1]."""
