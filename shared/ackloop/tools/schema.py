"""Gemini function parameters from a Pydantic model: one flat JSON schema, no ``$ref``.

Gemini accepts an OpenAPI-like subset of JSON schema. Pydantic emits more (``$defs``, ``title``,
``const``, ``exclusiveMinimum``, ``additionalProperties``, string formats such as ``ipvanyaddress``)
and google-genai's ``Schema`` forbids unknown keys. This module inlines references, turns
``X | None`` into ``nullable``, moves what Gemini cannot express into the description (so the model
still reads it) and drops the rest.
"""

from __future__ import annotations

from pydantic import BaseModel

from ackloop.domain.jsondict import JsonDict

# Keys copied unchanged when present (google-genai ``Schema`` fields, in their JSON spelling).
_KEPT = (
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
)
# Gemini rejects other string formats ("only 'enum' and 'date-time' are supported for STRING").
_FORMATS = {
    "string": {"enum", "date-time"},
    "integer": {"int32", "int64"},
    "number": {"float", "double"},
}
_MAX_DEPTH = 12


class SchemaError(ValueError):
    """The model cannot be expressed as a Gemini schema (a recursive model, say)."""


def parameters_schema(model: type[BaseModel]) -> JsonDict | None:
    """The ``parameters`` of a function declaration for ``model``; None when it has no fields.

    Gemini rejects an ``object`` with no properties, so a tool without arguments declares none.
    """
    return json_schema_parameters(model.model_json_schema())


def json_schema_parameters(raw: JsonDict) -> JsonDict | None:
    """The ``parameters`` of a function declaration for an object's JSON schema (a Pydantic
    model's, or an MCP tool's ``inputSchema``); None when it has no properties."""
    defs = raw.get("$defs", {})
    # A self-referencing model's schema is itself a $ref into $defs.
    top = _resolve(raw, defs)
    if not top.get("properties"):
        return None
    flat = _flatten(top, defs, depth=0)
    # The top-level description repeats the tool's own description; keep the declaration small.
    flat.pop("description", None)
    return flat


def _flatten(node: JsonDict, defs: JsonDict, depth: int) -> JsonDict:
    if depth > _MAX_DEPTH:
        raise SchemaError("schema nests too deeply (is the model recursive?)")
    node = _resolve(node, defs)
    if node.get("anyOf") or node.get("oneOf"):
        return _flatten_variants(node, defs, depth)

    out: JsonDict = {}
    if "const" in node:
        node = {**node, "enum": [node["const"]]}
    kind = _kind(node, out)
    notes = _constraints(node, kind, out)
    if kind == "object" and "properties" in node:
        out["properties"] = {
            name: _flatten(child, defs, depth + 1) for name, child in node["properties"].items()
        }
        if node.get("required"):
            out["required"] = list(node["required"])
    if kind == "array" and "items" in node:
        out["items"] = _flatten(node["items"], defs, depth + 1)

    description = node.get("description", "").strip()
    if notes:
        description = f"{description} ({'; '.join(notes)})" if description else "; ".join(notes)
    if description:
        out["description"] = description
    return out


def _flatten_variants(node: JsonDict, defs: JsonDict, depth: int) -> JsonDict:
    """An ``anyOf``/``oneOf``: ``X | None`` is a nullable ``X``; other unions stay ``anyOf``."""
    variants = node.get("anyOf") or node["oneOf"]
    non_null = [v for v in variants if v.get("type") != "null"]
    out: JsonDict
    if len(non_null) == 1:
        out = _flatten({**non_null[0], **_siblings(node)}, defs, depth + 1)
    else:
        out = {"anyOf": [_flatten(v, defs, depth + 1) for v in non_null]}
        if "description" in node:
            out["description"] = node["description"]
    if len(non_null) < len(variants):
        out["nullable"] = True
    return out


def _kind(node: JsonDict, out: JsonDict) -> str | None:
    """The node's one type, written into ``out`` (with ``nullable`` for ``["x", "null"]``)."""
    kind = node.get("type")
    if isinstance(kind, list):  # ["string", "null"]
        kinds = [k for k in kind if k != "null"]
        if "null" in kind:
            out["nullable"] = True
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and "enum" in node:
        kind = "string"
    if kind is not None:
        out["type"] = kind
    return kind


def _constraints(node: JsonDict, kind: str | None, out: JsonDict) -> list[str]:
    """The node's constraints Gemini takes, written into ``out``; the others in words."""
    notes: list[str] = []
    if "enum" in node:
        if all(isinstance(value, str) for value in node["enum"]):
            out["enum"] = list(node["enum"])
        else:
            notes.append("one of " + ", ".join(repr(v) for v in node["enum"]))
    fmt = node.get("format")
    if fmt:
        if fmt in _FORMATS.get(str(kind), set()):
            out["format"] = fmt
        else:
            notes.append(f"format: {fmt}")
    for key in _KEPT:
        if key in node:
            out[key] = node[key]
    # Gemini has no exclusive bounds: an integer's become inclusive, a number's become words.
    for key, inclusive, step, words in (
        ("exclusiveMinimum", "minimum", 1, "greater than"),
        ("exclusiveMaximum", "maximum", -1, "less than"),
    ):
        if key not in node:
            continue
        if kind == "integer" and isinstance(node[key], int):
            out[inclusive] = node[key] + step
        else:
            notes.append(f"must be {words} {node[key]}")
    return notes


def _resolve(node: JsonDict, defs: JsonDict) -> JsonDict:
    """Inline a ``$ref`` (or a single-item ``allOf``), keeping the field's own description."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
    ref = node.get("$ref")
    if ref is None:
        return node
    name = ref.rsplit("/", 1)[-1]
    if not ref.startswith("#/$defs/") or name not in defs:
        raise SchemaError(f"cannot resolve {ref}")
    # The field's description (sibling of $ref) wins over the referenced model's docstring.
    return {**defs[name], **_siblings(node)}


def _siblings(node: JsonDict) -> JsonDict:
    return {k: v for k, v in node.items() if k in ("description", "default")}
