"""Benchmarks: run by hand (``make bench``); the test suite checks only their report format."""
