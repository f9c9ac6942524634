"""services.brief.

Materializes the Home digest and the monthly usage rollups from the run and insight
streams (SPEC §8).
"""
