"""infra/*.tf parsed with python-hcl2 into something tests can ask questions of.

Expressions stay strings ("${var.x}"): the tests compare references, and evaluate only variable
defaults (including the optional(type, default) attributes of object variables).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

_OPTIONAL_ATTR = re.compile(
    r'(\w+)\s*=\s*optional\(\s*\w+\s*(?:,\s*("(?:[^"\\]|\\.)*"|[^,)]+?))?\s*\)'
)
_VAR_REF = re.compile(r"\bvar\.(\w+)(?:\.(\w+))?")


def _literal(text: str | None) -> Any:
    if text is None or text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"'):
        return json.loads(text)
    number = float(text)
    return int(number) if number.is_integer() else number


def is_expression(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("${") and value.endswith("}")


def expression(value: Any) -> str:
    """The HCL expression inside "${...}", or the value itself when it is a literal."""
    assert is_expression(value), f"expected an expression, got {value!r}"
    return str(value)[2:-1]


@dataclass
class TerraformConfig:
    files: dict[str, dict[str, Any]]
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    locals_file: dict[str, str] = field(default_factory=dict)
    resources: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    resource_file: dict[tuple[str, str], str] = field(default_factory=dict)

    def resource(self, kind: str, name: str) -> dict[str, Any]:
        assert (kind, name) in self.resources, f"infra/ declares no {kind}.{name}"
        return self.resources[(kind, name)]

    def resources_of(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: body for (k, name), body in self.resources.items() if k == kind}

    def variable_default(self, name: str, attribute: str | None = None) -> Any:
        """Default of var.name (or of var.name.attribute for an object with optional attributes)."""
        assert name in self.variables, f"variables.tf declares no variable {name!r}"
        variable = self.variables[name]
        default = variable.get("default")
        if attribute is None:
            return default
        explicit = default or {}
        if attribute in explicit:
            return explicit[attribute]
        optional = self.object_optional_defaults(name)
        assert attribute in optional, f"var.{name} has no optional attribute {attribute!r}"
        return optional[attribute]

    def object_optional_defaults(self, name: str) -> dict[str, Any]:
        type_text = str(self.variables[name].get("type", ""))
        return {m.group(1): _literal(m.group(2)) for m in _OPTIONAL_ATTR.finditer(type_text)}

    def default_of_reference(self, text: str) -> Any:
        """Default of the single variable an expression like tostring(var.a.b) refers to."""
        refs = set(_VAR_REF.findall(text))
        assert len(refs) == 1, f"{text!r} does not refer to exactly one variable"
        name, attribute = refs.pop()
        return self.variable_default(name, attribute or None)


def load_terraform(directory: Path, hcl2: ModuleType) -> TerraformConfig:
    options = hcl2.SerializationOptions(
        with_comments=False, explicit_blocks=False, strip_string_quotes=True
    )
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        with path.open(encoding="utf-8") as handle:
            files[path.name] = hcl2.load(handle, serialization_options=options)

    config = TerraformConfig(files=files)
    for filename, parsed in files.items():
        for variable in parsed.get("variable", []):
            config.variables.update(variable)
        for block in parsed.get("locals", []):
            for name, value in block.items():
                assert name not in config.locals, f"local.{name} is declared twice"
                config.locals[name] = value
                config.locals_file[name] = filename
        for kinds in parsed.get("resource", []):
            for kind, named in kinds.items():
                for name, body in named.items():
                    config.resources[(kind, name)] = body
                    config.resource_file[(kind, name)] = filename
    return config


def delivery_numbers() -> dict[str, Any]:
    """The delivery numbers infra/pubsub.tf reads (``local.delivery``): shared/ackloop's file."""
    path = Path(__file__).resolve().parents[2] / "shared" / "ackloop" / "delivery.json"
    numbers: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return numbers


def block(body: dict[str, Any], name: str) -> dict[str, Any]:
    """The single nested block `name` of a resource body."""
    blocks = body.get(name)
    assert isinstance(blocks, list) and len(blocks) == 1, f"expected one {name!r} block"
    value = blocks[0]
    assert isinstance(value, dict)
    return value


def dynamic_blocks(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every `dynamic "name"` block of a body (for_each + content)."""
    found = []
    for item in body.get("dynamic", []):
        if name in item:
            found.append(item[name])
    return found


__all__ = [
    "TerraformConfig",
    "block",
    "delivery_numbers",
    "dynamic_blocks",
    "expression",
    "is_expression",
    "load_terraform",
]


def variable_block(directory: Path, name: str) -> str:
    """The source text of ``variable "name" { ... }`` in ``directory``'s .tf files."""
    opening = re.compile(r'^variable\s+"' + re.escape(name) + r'"\s*\{', re.MULTILINE)
    for path in sorted(directory.glob("*.tf")):
        text = path.read_text(encoding="utf-8")
        match = opening.search(text)
        if match is None:
            continue
        depth = 0
        for index in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                return text[match.start():index + 1]
    raise AssertionError(f"no variable {name!r} in {directory}")
