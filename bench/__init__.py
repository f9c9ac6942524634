"""Benchmarks: measured by hand (``make bench``), never run by the test suite."""
