"""Benchmarks that measure ackloop side by side with its peers.

Nothing here is imported by the core package: the peer engines (Temporal) are an optional
``bench`` extra and are imported lazily by the modules that need them.
"""
