"""services.runner.

The agent runtime: a bounded tool-calling loop per run, many runs in flight per process
(SPEC §6).
"""
