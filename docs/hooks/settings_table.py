"""MkDocs hook: the table of every setting, generated from ``ackloop.config.settings.Settings``.

A page that holds the line ``<!-- settings-table -->`` gets, in its place, one row per field of
the settings model: the environment variables that set it, its type, its default and its
description, as the code declares them.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = "<!-- settings-table -->"


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_table())


def settings_table() -> str:
    from pydantic import AliasChoices

    from ackloop.config.settings import Settings

    prefix = str(Settings.model_config.get("env_prefix", ""))
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names = [str(choice) for choice in alias.choices]
        else:
            names = [str(alias) if alias else f"{prefix}{name}".upper()]
        default = field.get_default(call_default_factory=True)
        rows.append("| " + " | ".join([
            " / ".join(f"`{n}`" for n in names),
            _cell(_type(field.annotation)),
            "none" if default is None else _cell(f"`{default!r}`" if default != "" else '`""`'),
            _cell(field.description or ""),
        ]) + " |")
    return "\n".join(rows)


def _type(annotation: Any) -> str:
    """A field's type as a reader writes it: ``int``, ``str | None``, ``'a' | 'b'``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(value) for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    if origin is not None:
        args = ", ".join(_type(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', origin)}[{args}]"
    return re.sub(r"^typing\.", "", getattr(annotation, "__name__", str(annotation)))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
