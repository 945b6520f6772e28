"""Evaluating infra/'s expressions with Terraform itself, offline.

`terraform validate` and `plan` need the google providers, which only the registry serves. What
decides which resources exist and what they say is mostly locals and variables, which Terraform
evaluates without any provider: this module copies every variable block and the locals an
expression needs into a module of its own, stands a stub in for each resource the expression
names (an object whose attributes say which resource and instance they are, e.g.
``google_service_account.service[steps].member``), applies it (outputs only, no resources) and
reads the values back. A resource's instances are evaluated the same way: its ``for_each`` (or
``count``) and the attributes asked for, with ``each.key``/``each.value`` bound per instance.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.infra.terraform import TerraformConfig, variable_block

_RESOURCE_REF = re.compile(r"\b(google_[a-z0-9_]+)\.([a-z0-9_]+)\b")
_LOCAL_REF = re.compile(r"\blocal\.(\w+)")
_ATTRIBUTE = re.compile(r"[ \t]*(\w+)[ \t]*=(?!=)")
# The attributes a resource stub answers for.
_STUB_ATTRIBUTES = ("id", "name", "email", "member", "uri", "secret_id", "location",
                    "repository_id")


def _scan(text: str) -> tuple[list[bool], list[bool]]:
    """For each character of HCL ``text``: whether it is in a comment, and whether it is code
    at the top level (outside every string and template interpolation)."""
    comment = [False] * len(text)
    top = [False] * len(text)
    stack: list[list[Any]] = [["code", 0, False]]  # kind, brace depth, is an interpolation
    index = 0
    while index < len(text):
        char, frame = text[index], stack[-1]
        if frame[0] == "string":
            if char == "\\" or text.startswith("$${", index):
                index += 2 if char == "\\" else 3
                continue
            if text.startswith("${", index):
                stack.append(["code", 0, True])
                index += 2
                continue
            if char == '"':
                stack.pop()
            index += 1
            continue
        if char == "#" or text.startswith("//", index):
            end = text.find("\n", index)
            end = len(text) if end < 0 else end
            for position in range(index, end):
                comment[position] = True
            index = end
            continue
        if char == '"':
            stack.append(["string", 0, False])
        elif char == "{":
            frame[1] += 1
        elif char == "}" and frame[2] and frame[1] == 0:
            stack.pop()
            index += 1
            continue
        elif char == "}":
            frame[1] -= 1
        top[index] = len(stack) == 1
        index += 1
    return comment, top


def locals_text(directory: Path) -> dict[str, str]:
    """Every local of ``directory``'s .tf files -> its expression's text (comments removed)."""
    found: dict[str, str] = {}
    for path in sorted(directory.glob("*.tf")):
        text = path.read_text(encoding="utf-8")
        comment, top = _scan(text)
        for match in re.finditer(r"^locals\s*\{", text, re.MULTILINE):
            if comment[match.start()]:
                continue
            depth, index, line_start = 1, match.end(), True
            name, start = None, 0
            while depth > 0 and index < len(text):
                char = text[index]
                if top[index] and char in "([{":
                    depth += 1
                elif top[index] and char in ")]}":
                    depth -= 1
                if line_start and depth == 1 and name is None:
                    attribute = _ATTRIBUTE.match(text, index)
                    if attribute is not None and not comment[index]:
                        name, start = attribute.group(1), attribute.end()
                        index = attribute.end()
                        line_start = False
                        continue
                if char == "\n" and top[index]:
                    if name is not None and depth == 1:
                        found[name] = "".join(
                            c for i, c in enumerate(text[start:index], start) if not comment[i]
                        ).strip()
                        name = None
                    line_start = True
                elif not char.isspace():
                    line_start = False
                index += 1
    return found


def hcl(value: Any) -> str:
    """A value python-hcl2 parsed (strings with their quotes stripped) as HCL source."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(hcl(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {hcl(item)}" for key, item in value.items()) + "}"
    text, out, index = str(value), [], 0
    while index < len(text):
        if text.startswith("${", index):
            depth, end = 0, index + 1
            while True:  # the interpolation, verbatim
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                if depth == 0:
                    break
                end += 1
            out.append(text[index:end + 1])
            index = end + 1
        else:
            out.append({'"': '\\"', "\\": "\\\\"}.get(text[index], text[index]))
            index += 1
    return '"' + "".join(out) + '"'


def _bind(text: str, key: str = "k", value: str = "v", index: str = "i") -> str:
    text = re.sub(r"\beach\.key\b", key, text)
    text = re.sub(r"\beach\.value\b", value, text)
    return re.sub(r"\bcount\.index\b", index, text)


class Evaluator:
    """Evaluates expressions of infra/ (``config``, its parsed form) for given variable values."""

    def __init__(self, terraform_bin: str, config: TerraformConfig, directory: Path) -> None:
        self.terraform_bin = terraform_bin
        self.config = config
        self.directory = directory
        self.locals = locals_text(directory)

    def _stubbed(self, text: str) -> str:
        return _RESOURCE_REF.sub(lambda m: f"local.stub__{m.group(1)}__{m.group(2)}", text)

    def _stub(self, kind: str, name: str) -> str:
        body = self.config.resource(kind, name)

        def attributes(key: str) -> str:
            return "{" + ", ".join(
                f'{attribute} = "{kind}.{name}{key}.{attribute}"'
                for attribute in _STUB_ATTRIBUTES
            ) + "}"

        if "for_each" in body:
            over = self._stubbed(hcl(body["for_each"]))
            return f"{{ for k, v in {over} : k => {attributes('[${k}]')} }}"
        if "count" in body:
            over = self._stubbed(hcl(body["count"]))
            return f"[ for i in range({over}) : {attributes('[${i}]')} ]"
        return attributes("")

    def instances(self, kind: str, name: str, attributes: dict[str, Any]) -> str:
        """An expression of a resource's instances, by the key of their address (the for_each
        key, the count index, "" for a single one); each holds ``attributes`` (label -> parsed
        value)."""
        body = self.config.resource(kind, name)
        fields = "{" + ", ".join(
            f"{label} = {_bind(hcl(value))}" for label, value in attributes.items()
        ) + "}"
        if "for_each" in body:
            return f"{{ for k, v in {hcl(body['for_each'])} : k => {fields} }}"
        if "count" in body:
            return f"{{ for i in range({hcl(body['count'])}) : tostring(i) => {fields} }}"
        return f'{{ "" = {fields} }}'

    def evaluate(self, expressions: dict[str, str], values: dict[str, str]) -> dict[str, Any]:
        """Each expression (label -> HCL) evaluated with the variables ``values`` gives (name ->
        HCL); resources they name are stubs."""
        wanted = {label: self._stubbed(text) for label, text in expressions.items()}
        stubs: dict[str, str] = {}
        needed: set[str] = {"delivery"}  # the variables' validations read local.delivery
        pending = list(wanted.values())
        while pending:
            text = pending.pop()
            for match in re.finditer(r"\blocal\.stub__(google_[a-z0-9_]+?)__([a-z0-9_]+)\b", text):
                kind, name = match.group(1), match.group(2)
                label = f"stub__{kind}__{name}"
                if label not in stubs:
                    stubs[label] = self._stub(kind, name)
                    pending.append(stubs[label])
            for local in _LOCAL_REF.findall(text):
                if local.startswith("stub__") or local in needed:
                    continue
                assert local in self.locals, f"infra/ declares no local {local!r}"
                needed.add(local)
                pending.append(self._stubbed(self.locals[local]))
        lines = [variable_block(self.directory, name) for name in self.config.variables]
        lines.append("locals {")
        lines += [f"  {name} = {self._stubbed(self.locals[name])}" for name in sorted(needed)]
        lines += [f"  {label} = {text}" for label, text in sorted(stubs.items())]
        lines.append("}")
        lines.append("output \"values\" {\n  value = {")
        lines += [f"    {label} = {text}" for label, text in wanted.items()]
        lines.append("  }\n}")
        with tempfile.TemporaryDirectory() as workdir:
            module = Path(workdir) / self.directory.name
            module.mkdir()
            # local.delivery reads ../shared/ackloop/delivery.json.
            shared = Path(workdir) / "shared" / "ackloop"
            shared.mkdir(parents=True)
            source = self.directory.parent / "shared" / "ackloop" / "delivery.json"
            shutil.copy(source, shared / "delivery.json")
            (module / "main.tf").write_text("\n".join(lines) + "\n", encoding="utf-8")
            (module / "values.auto.tfvars").write_text(
                "".join(f"{name} = {value}\n" for name, value in values.items()), encoding="utf-8"
            )
            env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}
            output = ""
            for command in (["init", "-input=false", "-backend=false"],
                            ["apply", "-input=false", "-no-color", "-auto-approve"],
                            ["output", "-json", "values"]):
                result = subprocess.run([self.terraform_bin, *command], cwd=module,
                                        capture_output=True, text=True, timeout=120,
                                        check=False, env=env)
                assert result.returncode == 0, (
                    f"terraform {command[0]}:\n{result.stdout}{result.stderr}"
                )
                output = result.stdout
        values_out: dict[str, Any] = json.loads(output)
        return values_out
