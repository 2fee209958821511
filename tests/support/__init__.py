"""Helpers shared by the test suite: processes, metrics, a fake engine."""
