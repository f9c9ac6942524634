"""``/api/v1/memory``: what the agents remember, for the people who answer for it."""
