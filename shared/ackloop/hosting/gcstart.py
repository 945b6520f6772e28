"""No cyclic garbage collection while a process starts: imports create hundreds of thousands of
objects (google-genai's types alone define 500 Pydantic models), and the collector, triggered
every 700 allocations, scans them again and again while almost none is garbage: 15-20% of a
step function's start-up CPU (0.1 s in the model step).

``ackloop run`` pauses it before it imports anything (:func:`pause`) and resumes it once the
process's dependencies are built, before it serves (:func:`resume`): what start-up created is
frozen (moved to the permanent generation, never scanned again: it lives as long as the
process) and later garbage is collected as usual. The few cycles start-up left unreachable stay
in memory (about 1 MB measured in the model step).
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Stop automatic collection until :func:`resume` (if it is on)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze what exists now and collect automatically again, if :func:`pause` stopped it."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False
