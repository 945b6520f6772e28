"""A serving process runs on asyncio only: trio stays out of its start-up.

httpcore (under httpx, the tools' client) and httpcore2 (under google-genai's) import trio
whenever it is installed, to pick their locks under a trio event loop, which no ackloop
service runs: about 50 ms of start-up CPU, and attrs' class building with it, for nothing.
``ackloop run`` hides trio from imports before it imports anything (:func:`hide`), so both
find it absent, and shows it again once the process has started (:func:`show`): code a
request imports later (a tool's) finds trio as installed.
"""

from __future__ import annotations

import sys

HIDDEN = ("trio",)
"""The packages a starting service does without."""

_hidden: list[str] = []


def hide() -> None:
    """Make importing :data:`HIDDEN` raise ImportError, for those not imported yet."""
    for name in HIDDEN:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
            _hidden.append(name)


def show() -> None:
    """Undo :func:`hide`."""
    while _hidden:
        name = _hidden.pop()
        if sys.modules.get(name, "") is None:
            del sys.modules[name]
