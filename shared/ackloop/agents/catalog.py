"""Where a deployment's agents come from: the user's package, or the built-in catalog.

In order: the ``ACKLOOP_AGENTS`` setting (``package.module:attribute``); else every entry point
an installed package declares in the ``ackloop.agents`` group; else the built-in agents
(:mod:`ackloop.agents.builtin`). The attribute is a list or tuple of
:class:`~ackloop.agents.agent.Agent` (and :class:`~ackloop.domain.schedules.Schedule`: the
deployment's schedules, beside the agents they name), or a function returning one, called with
what its signature asks for: a parameter typed :class:`~ackloop.config.settings.Settings` (or
named ``settings``) gets the process's settings, one typed ``httpx.AsyncClient`` (or named
``http``) the process-wide HTTP client. Every failure is one :class:`CatalogError` whose
message names the source, the module and the original exception, so a process that cannot load
its agents says why in one line and stops.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import httpx

from ackloop.agents.agent import Agent, AgentRegistry, MissingAgent
from ackloop.config.settings import Settings
from ackloop.domain.schedules import Schedule

ENTRY_POINT_GROUP = "ackloop.agents"


class CatalogError(Exception):
    """The agent catalog could not be loaded; the message says from where and why."""


Entry = Agent | Schedule


def load_agents(settings: Settings, http: httpx.AsyncClient) -> list[Agent]:
    """The deployment's agents, from the first source that names any (see the module doc)."""
    return load_catalog(settings, http)[0]


def load_registry(settings: Settings, http: httpx.AsyncClient) -> AgentRegistry:
    """The deployment's agents and schedules, checked."""
    return AgentRegistry(*load_catalog(settings, http))


def load_catalog(settings: Settings, http: httpx.AsyncClient
                 ) -> tuple[list[Agent], list[Schedule]]:
    """The deployment's agents and schedules, from the first source that names any agent."""
    if settings.agents:
        source = f"ACKLOOP_AGENTS={settings.agents}"
        return _checked(source, _build(source, _resolve(source, settings.agents), settings, http))
    declared = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    if declared:
        entries: list[Entry] = []
        for point in declared:
            source = f"entry point {point.name} = {point.value} (group {ENTRY_POINT_GROUP})"
            entries += _build(source, _load_entry_point(source, point), settings, http)
        return _checked(f"the {ENTRY_POINT_GROUP} entry points", entries)
    from ackloop.agents.builtin import builtin_agents

    return builtin_agents(settings, http), []


def _resolve(source: str, reference: str) -> Any:
    module_name, colon, attribute = reference.strip().partition(":")
    if not colon or not module_name or not attribute:
        raise CatalogError(f"{source}: expected 'package.module:attribute', e.g. "
                           "'myapp.agents:catalog'")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise CatalogError(
            f"{source}: cannot import module {module_name!r}: {_describe(exc)}") from exc
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError as exc:
            raise CatalogError(
                f"{source}: module {module_name!r} has no attribute {attribute!r}") from exc
    return value


def _load_entry_point(source: str, point: EntryPoint) -> Any:
    try:
        return point.load()
    except Exception as exc:
        raise CatalogError(
            f"{source}: cannot load module {point.module!r}: {_describe(exc)}") from exc


def _build(source: str, target: Any, settings: Settings, http: httpx.AsyncClient
           ) -> list[Entry]:
    """The agents (and schedules) ``target`` holds or returns."""
    value = target
    if callable(target) and not isinstance(target, (list, tuple)):
        arguments = _arguments(source, target, settings, http)
        try:
            value = target(**arguments)
        except Exception as exc:
            raise CatalogError(f"{source}: calling it failed: {_describe(exc)}") from exc
    if isinstance(value, Agent):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(a, Entry) for a in value):
        found = type(value).__name__ if not isinstance(value, (list, tuple)) else (
            "a list holding " + ", ".join(sorted({type(a).__name__ for a in value
                                                  if not isinstance(a, Entry)})))
        raise CatalogError(f"{source}: expected a list of Agent (and Schedule) or a function "
                           "returning one, "
                           f"got {found}")
    return list(value)


def _arguments(source: str, fn: Callable[..., Any], settings: Settings,
               http: httpx.AsyncClient) -> dict[str, Any]:
    """What ``fn``'s parameters ask for: the settings and/or the HTTP client, by type or name."""
    try:
        parameters = inspect.signature(fn, eval_str=True).parameters.values()
    except (NameError, TypeError, ValueError):
        parameters = inspect.signature(fn).parameters.values()
    arguments: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        hint = parameter.annotation
        if hint is Settings or parameter.name == "settings":
            arguments[parameter.name] = settings
        elif hint is httpx.AsyncClient or parameter.name == "http":
            arguments[parameter.name] = http
        elif parameter.default is parameter.empty:
            raise CatalogError(
                f"{source}: parameter {parameter.name!r} is neither the Settings "
                "(settings: Settings) nor the HTTP client (http: httpx.AsyncClient)")
    return arguments


def _checked(source: str, entries: list[Entry]) -> tuple[list[Agent], list[Schedule]]:
    agents = [e for e in entries if isinstance(e, Agent)]
    schedules = [e for e in entries if isinstance(e, Schedule)]
    if not agents:
        raise CatalogError(f"{source}: the catalog holds no agent")
    seen: set[str] = set()
    for agent in agents:
        if agent.name in seen:
            raise CatalogError(f"{source}: two agents are named {agent.name!r}")
        seen.add(agent.name)
    try:
        # a sub-agent or hand-off tool must reach an agent it holds; a schedule name one
        AgentRegistry(agents, schedules)
    except MissingAgent as exc:
        raise CatalogError(f"{source}: {exc}") from exc
    return agents, schedules


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
