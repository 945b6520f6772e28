"""Griffe extension: the docstrings' Sphinx roles as cross-references of the site.

The code's docstrings name other objects with Sphinx roles (a class role with the path
``~ackloop.tools.base.Toolbox``, a method role with ``ask``). Markdown has no roles, so each
becomes an optional cross-reference: a link when the site documents the object, else its name
as code (never a warning). A leading ``~`` shows the last part of the path only; a name without
a dot is looked up beside the object. A paragraph ending in ``::`` (a literal block follows)
ends in ``:``: the block, indented, is already Markdown's code block.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):`(?P<tilde>~?)(?P<path>[\w.]+)`")
LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None or ":" not in obj.docstring.value:
            return
        scope = obj.path if obj.is_class or obj.is_module else (
            obj.parent.path if obj.parent is not None else obj.path)
        value = ROLE.sub(lambda m: _reference(m, scope), obj.docstring.value)
        obj.docstring.value = LITERAL.sub(":", value)


def _reference(match: re.Match[str], scope: str) -> str:
    path = match["path"].lstrip(".")
    shown = path.rsplit(".", 1)[-1] if match["tilde"] else path
    identifier = path if "." in path else f"{scope}.{path}"
    return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'
