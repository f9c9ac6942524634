"""services.dispatcher: the dispatcher service.

Picks exactly one agent per inbound message and holds the single active run per
conversation (SPEC §5).
"""
