"""BYO provider credentials, encrypted at rest [004 §4.2, §7]."""
