"""Tooling beside the gateway: the local stack, processes for tests and benchmarks."""
