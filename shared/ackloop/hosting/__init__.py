"""Serving a process: its start-up, its clients (``runtime``), the push edge, the local stack's
state, and the loop in one process (``inprocess``, ``testing``)."""
