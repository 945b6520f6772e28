"""The ``ackloop`` command."""
