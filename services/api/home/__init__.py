"""The Home: the daily digest the brief materializes, the owner's to-do items, usage and budget incidents."""
