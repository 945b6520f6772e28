"""A tool's arguments model read from its function's signature.

``@tool`` accepts two forms. A function whose one argument parameter is annotated with a Pydantic
model takes the whole arguments as that model (the typed-model form). Any other function declares
its arguments as plain annotated parameters (``city: str, days: int = 1``); they become the fields
of a model built with :func:`pydantic.create_model`, so validation, defaults, ``Annotated[...,
Field(...)]`` constraints and the flat Gemini schema work the same in both forms.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from ackloop.tools.base import ToolContext


class NoArguments(BaseModel):
    """Arguments of a tool that takes none. Anything the model sends anyway is ignored."""

    model_config = ConfigDict(extra="ignore")


@dataclass(frozen=True)
class Parameters:
    """How to call a tool function: its arguments model and which parameter receives what."""

    model: type[BaseModel]
    model_parameter: str | None
    """The typed-model form's parameter, which receives the whole arguments model."""
    plain: tuple[str, ...]
    """The plain form's parameters, each receiving its field's value by keyword."""
    context_parameter: str | None

    def keywords(self, args: BaseModel, context: ToolContext) -> dict[str, Any]:
        """The keyword arguments to call the function with."""
        kwargs: dict[str, Any] = {name: getattr(args, name) for name in self.plain}
        if self.model_parameter is not None:
            kwargs[self.model_parameter] = args
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        return kwargs


def read_parameters(fn: Callable[..., Any], descriptions: Mapping[str, str]) -> Parameters:
    """Classify ``fn``'s parameters; ``descriptions`` (from its docstring) describe plain ones.

    Raises ``TypeError`` naming the parameter when the signature cannot be a tool's.
    """
    where = getattr(fn, "__qualname__", repr(fn))
    context_parameter: str | None = None
    models: list[inspect.Parameter] = []
    plain: list[inspect.Parameter] = []
    for param in _signature(where, fn).parameters.values():
        _refuse_kind(where, param)
        if _is_context(where, param):
            if context_parameter is not None:
                raise TypeError(
                    f"{where}: two ToolContext parameters, {context_parameter!r} "
                    f"and {param.name!r}; keep one"
                )
            context_parameter = param.name
        elif param.annotation is inspect.Parameter.empty:
            raise TypeError(
                f"{where}: parameter {param.name!r} has no annotation; annotate it (city: str) "
                "so the model knows what to send"
            )
        elif _is_model_class(param.annotation):
            models.append(param)
        else:
            plain.append(param)

    if len(models) == 1 and not plain:
        only = models[0]
        return Parameters(only.annotation, only.name, (), context_parameter)
    if models:
        _refuse_mix(where, models, plain)
    if not plain:
        return Parameters(NoArguments, None, (), context_parameter)
    model = _plain_model(fn, plain, descriptions)
    return Parameters(model, None, tuple(p.name for p in plain), context_parameter)


def _signature(where: str, fn: Callable[..., Any]) -> inspect.Signature:
    """The signature with string annotations (``from __future__ import annotations``) evaluated
    in the function's module, which cannot see names local to an enclosing function."""
    try:
        return inspect.signature(fn, eval_str=True)
    except NameError as exc:
        raise TypeError(
            f"{where}: the annotation {exc.name!r} cannot be resolved in the function's module; "
            "define it at module level"
        ) from exc


def _refuse_kind(where: str, param: inspect.Parameter) -> None:
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        star = "*" if param.kind is param.VAR_POSITIONAL else "**"
        raise TypeError(
            f"{where}: {star}{param.name} cannot be declared to the model; name each argument "
            "as its own annotated parameter"
        )
    if param.kind is param.POSITIONAL_ONLY:
        raise TypeError(
            f"{where}: parameter {param.name!r} is positional-only; tools are called by keyword, "
            "so remove the '/'"
        )
    if param.name.startswith("_"):
        raise TypeError(
            f"{where}: parameter {param.name!r} starts with '_', which Pydantic treats as "
            "private; rename it"
        )


def _is_context(where: str, param: inspect.Parameter) -> bool:
    if param.annotation is ToolContext:
        return True
    if param.name != "context":
        return False
    if param.annotation is not inspect.Parameter.empty:
        raise TypeError(
            f"{where}: parameter 'context' is the ToolContext's name; annotate it ToolContext "
            "or rename the argument"
        )
    return True


def _is_model_class(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _refuse_mix(
    where: str, models: list[inspect.Parameter], plain: list[inspect.Parameter]
) -> None:
    first = models[0]
    others = ", ".join(repr(p.name) for p in [*models[1:], *plain])
    model_name = first.annotation.__name__
    raise TypeError(
        f"{where}: parameter {first.name!r} is annotated with the Pydantic model {model_name} "
        f"beside {others}. A lone model parameter is the whole arguments model; to make "
        f"{first.name!r} one nested argument among others, annotate it "
        f'Annotated[{model_name}, "what it is"]; otherwise move the other arguments into '
        f"{model_name}"
    )


def _plain_model(
    fn: Callable[..., Any], params: list[inspect.Parameter], descriptions: Mapping[str, str]
) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for param in params:
        annotation, description = _split_annotation(param.annotation)
        default = ... if param.default is inspect.Parameter.empty else param.default
        description = description or descriptions.get(param.name)
        if description is None or _describes_itself(annotation):
            fields[param.name] = (annotation, default)
        else:
            fields[param.name] = (annotation, Field(default, description=description))
    name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]", fn.__name__)) + "Args"
    with warnings.catch_warnings():
        # A parameter named like a BaseModel method ("json", "copy") is still read as a field.
        warnings.filterwarnings("ignore", message=".*shadows an attribute in parent")
        model: type[BaseModel] = create_model(
            name,
            __config__=ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )
    return model


def _split_annotation(annotation: Any) -> tuple[Any, str | None]:
    """``Annotated[T, "text", ...]``: the text is the description, the rest stays for Pydantic."""
    if get_origin(annotation) is not Annotated:
        return annotation, None
    base, *metadata = get_args(annotation)
    texts = [item for item in metadata if isinstance(item, str)]
    kept = tuple(item for item in metadata if not isinstance(item, str))
    rebuilt = Annotated[(base, *kept)] if kept else base
    return rebuilt, (texts[-1] if texts else None)


def _describes_itself(annotation: Any) -> bool:
    """An ``Annotated[..., Field(description=...)]`` keeps its own description."""
    if get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(item, FieldInfo) and item.description for item in get_args(annotation))
