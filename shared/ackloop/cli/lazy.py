"""Commands the ``ackloop`` CLI imports only when they are asked for.

``ackloop run`` is the container's entrypoint: every module imported before it serves is paid
at each cold start. So a command given here as ``"module:attribute"`` (a typer app or a command
function) is imported only when it is invoked or ``--help`` lists it, and so are the commands
other distributions add through the ``ackloop.commands`` entry points (``ackloop dev``,
``ackloop bench`` and ``ackloop chaos`` come from ``ackloop-dev``).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module, metadata

import typer
from typer import _click  # typer's own click: the types its groups are built on
from typer.core import TyperGroup

ENTRY_POINTS = "ackloop.commands"
# Commands the development tools add: without them, asking for one says what to install.
DEV_COMMANDS = ("dev", "bench", "chaos")
DEV_DISTRIBUTION = "ackloop-dev"


def lazy_group(targets: Mapping[str, str]) -> type[TyperGroup]:
    """A typer group class that also offers ``targets`` and the entry points' commands."""

    class LazyGroup(TyperGroup):
        def list_commands(self, ctx: _click.Context) -> list[str]:
            names = [*targets, *super().list_commands(ctx), *_entry_points()]
            return list(dict.fromkeys(names))

        def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
            command = super().get_command(ctx, cmd_name)
            if command is not None:
                return command
            target = targets.get(cmd_name) or _entry_points().get(cmd_name)
            if target is None:
                if cmd_name in DEV_COMMANDS:
                    typer.echo(f"ackloop {cmd_name} comes with the development tools, "
                               f"{DEV_DISTRIBUTION}: pip install -e CHECKOUT/devtools, or pip "
                               f"install --find-links CHECKOUT/dist {DEV_DISTRIBUTION} after "
                               "make dist in the checkout", err=True)
                    ctx.exit(2)
                return None
            command = _command(cmd_name, target)
            self.add_command(command, cmd_name)
            return command

    return LazyGroup


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINTS)}


def _command(name: str, target: str) -> _click.Command:
    module, _, attribute = target.partition(":")
    loaded = getattr(import_module(module), attribute)
    if isinstance(loaded, typer.Typer):
        group = typer.main.get_group(loaded)
        group.name = name  # an unnamed app's group has none: --help would list a blank row
        return group
    single = typer.Typer()
    single.command(name)(loaded)
    return typer.main.get_command(single)
