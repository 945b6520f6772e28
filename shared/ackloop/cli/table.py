"""Tables as plain aligned lines: every cell whole, whatever the terminal's width.

A table fitted to the terminal (rich's) folds or crops cells in a narrow window, and a run id or
a message id cut in two cannot be pasted into the next command. These lines are never wrapped or
cut; a narrow terminal folds them on screen only, and a copy gets them whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import typer


def lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
            .rstrip() for row in (header, *rows)]


def echo(header: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> None:
    """Print the table on stdout, or ``empty`` when it has no rows."""
    typer.echo("\n".join(lines(header, rows)) if rows else empty)
