"""Ports for the local stack's processes: free, distinct, and out of the kernel's ephemeral range
(from which outgoing connections take their local port, and so could take a picked port before
the process it was picked for binds it)."""

from __future__ import annotations

import socket

from ackloop_dev.devstack.emulators import _ephemeral_low, free_port


def test_picked_ports_are_bindable_distinct_and_below_the_ephemeral_range() -> None:
    picked = [free_port() for _ in range(100)]
    assert len(set(picked)) == len(picked)
    low = _ephemeral_low()
    assert all(port < low for port in picked), (low, max(picked))
    with socket.socket() as s:
        s.bind(("127.0.0.1", picked[-1]))
