"""MkDocs hook: the HTTP API's reference page, generated from its OpenAPI document.

At build time it builds the API's FastAPI app (``ackloop.api.app.create_app``, with the shipped
settings whatever the environment holds), asks it for its OpenAPI document and adds two files
to the site: ``reference/http-api.md``, every path and method with its summary, description,
parameters, request body and responses, then every schema; and ``openapi.json``, the document
itself. The page needs nothing from another host to be read.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "reference/http-api.md"
DOCUMENT = "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch")

Json = dict[str, Any]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    spec = openapi_document()
    files.append(File.generated(config, PAGE, content=render(spec)))
    files.append(File.generated(config, DOCUMENT, content=json.dumps(spec, indent=2) + "\n"))
    return files


def openapi_document() -> Json:
    """The API's OpenAPI document, from the app the shipped settings build."""
    from ackloop.api.app import create_app
    from ackloop.config.settings import Settings

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ACKLOOP_")}
    quiet = logging.getLogger("ackloop")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the local-only auth notice is not the document's business
    try:
        spec: Json = create_app(Settings()).openapi()
    finally:
        quiet.setLevel(level)
        os.environ.update(saved)
    return spec


def render(spec: Json) -> str:
    """The reference page: the operations by tag, then the schemas."""
    info = spec.get("info", {})
    lines = [
        "# HTTP API reference",
        "",
        f"Generated from the OpenAPI document of `{info.get('title', 'ackloop')}` "
        f"{info.get('version', '')} when this site was built, so it matches the code. The "
        f"document itself: [`openapi.json`](../{DOCUMENT}); the API serves the same one at "
        "`/openapi.json`. How to use the API, with examples: the [HTTP API guide](../http-api.md).",
        "",
        *_description(info.get("description", "")),
    ]
    for tag, operations in _by_tag(spec):
        lines += ["", f"## {tag.capitalize()}", ""]
        for path, method, operation in operations:
            lines += _operation(path, method, operation)
    lines += ["", "## Schemas", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += _schema(name, schema)
    return "\n".join(lines) + "\n"


def _description(text: str) -> list[str]:
    """A description's Markdown, its headings pushed below the page's."""
    return [f"###{line}" if line.startswith("#") else line for line in text.splitlines()]


def _by_tag(spec: Json) -> Iterator[tuple[str, list[tuple[str, str, Json]]]]:
    """The operations grouped by their first tag, in the document's order."""
    grouped: dict[str, list[tuple[str, str, Json]]] = {}
    for path, item in spec.get("paths", {}).items():
        for method, operation in item.items():
            if method in METHODS:
                tag = (operation.get("tags") or ["other"])[0]
                grouped.setdefault(tag, []).append((path, method, operation))
    yield from grouped.items()


def _operation(path: str, method: str, operation: Json) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    if summary := operation.get("summary"):
        lines += [f"**{summary}**", ""]
    if description := operation.get("description"):
        lines += [*_description(description), ""]
    if parameters := operation.get("parameters"):
        lines += ["Parameters:", "", "| name | in | type | required | description |",
                  "|---|---|---|---|---|"]
        for parameter in parameters:
            schema = parameter.get("schema", {})
            lines.append("| " + " | ".join([
                f"`{parameter['name']}`", parameter.get("in", ""), _type(schema),
                "yes" if parameter.get("required") else "no",
                _cell(parameter.get("description") or schema.get("description", "")),
            ]) + " |")
        lines.append("")
    if body := operation.get("requestBody"):
        for media, content in body.get("content", {}).items():
            required = " (required)" if body.get("required") else ""
            lines += [f"Request body{required}: `{media}`, {_type(content.get('schema', {}))}",
                      ""]
    lines += ["Responses:", "", "| status | description | body |", "|---|---|---|"]
    for status, response in sorted(operation.get("responses", {}).items()):
        bodies = ", ".join(f"`{media}` {_type(content.get('schema', {}))}"
                           for media, content in response.get("content", {}).items())
        lines.append(f"| {status} | {_cell(response.get('description', ''))} | {bodies} |")
    return [*lines, ""]


def _schema(name: str, schema: Json) -> list[str]:
    lines = [f"### {name}", ""]
    if description := schema.get("description"):
        lines += [*_description(description), ""]
    properties = schema.get("properties")
    if not properties:
        return [*lines, f"Type: {_type(schema)}", ""]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | description |", "|---|---|---|---|"]
    for field, value in properties.items():
        lines.append(f"| `{field}` | {_type(value)} | {'yes' if field in required else 'no'} | "
                     f"{_cell(value.get('description', ''))} |")
    return [*lines, ""]


def _type(schema: Json) -> str:
    """A schema's type in a few words, a referenced schema linked to its section."""
    if ref := schema.get("$ref"):
        name = ref.rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_type(option) for option in schema[key])
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return f"`{kind}`"


def _cell(text: str) -> str:
    """Text that fits one cell of a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")
