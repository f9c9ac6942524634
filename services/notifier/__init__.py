"""services.notifier.

Delivers each reply at most once through the channel and notifies humans on handoff
(SPEC §7).
"""
