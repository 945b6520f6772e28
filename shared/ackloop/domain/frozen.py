"""JSON values no one can change: what a process shares of a conversation's history.

A model step sends the whole history on every call, and all of it but the newest turn is what
the previous step of the same process read. A process that keeps what it decoded
(:mod:`ackloop.docdb.decode_cache`) hands the same values to every step that reads them
instead of a copy each, and whatever is worked out from a value (its validation against
google-genai's models: :mod:`ackloop.model.validated`) is kept by the value's identity. Both
are exact only if nothing changes a value once decoded, so what is shared is frozen:

* :class:`FrozenDict` and :class:`FrozenList` are a ``dict`` and a ``list`` (``isinstance``,
  equality, ``json.dumps`` and Pydantic read them as such) whose every mutating method raises
  :class:`TypeError`. Code that wants to change a content builds a new one
  (``{**content, "parts": [...]}``), as ackloop's does.
* A copy (``copy.copy``, ``copy.deepcopy``, pickling, :func:`thawed`) is a plain ``dict`` or
  ``list``: the caller's own, to change at will.
"""

from __future__ import annotations

from typing import Any, NoReturn


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        f"a {type(self).__name__} is shared read-only history: build a new value to change it")


class FrozenDict(dict[str, Any]):
    """A ``dict`` whose items cannot change."""

    __slots__ = ()

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (thawed(self),)


class FrozenList(list[Any]):
    """A ``list`` whose items cannot change."""

    __slots__ = ()

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (thawed(self),)


FROZEN = (FrozenDict, FrozenList)


def freeze(value: Any) -> Any:
    """``value`` with every ``dict`` and ``list`` in it frozen (tuples become lists, as
    Firestore stores them); other values as they are."""
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if kind is list or kind is tuple or kind is FrozenList:
        return FrozenList(freeze(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A plain copy of ``value``: every ``dict`` and ``list`` in it new, frozen or not."""
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return value


__all__ = ["FROZEN", "FrozenDict", "FrozenList", "freeze", "thawed"]
