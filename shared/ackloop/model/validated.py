"""Contents a process has validated against google-genai's models, kept by their JSON.

Every model call of a run sends the conversation's whole history, and all of it but the newest
turn is what the previous call of the same process sent. Validating each content again (a
Pydantic model of google-genai's: ``types.Content``, tens of microseconds a content) made a
model step's CPU grow with its turn. A warm process validates each distinct content once:

* **Keyed by content.** The key is the value's ``marshal`` bytes (format 2: no back-references,
  so they do not depend on which objects the value shares), with the model it was validated
  as. Those bytes load back to exactly the value, types included, so equal keys are equal
  values and a hit is exact whoever built the dict and whatever it was read from (the same
  value built otherwise, a string interned or not, may give other bytes: a miss, validated
  again). It costs about a fifth of the value's JSON (3 against 15 microseconds for a
  function call's content); a value marshal refuses (a dict subclass, a Pydantic model) is
  validated every time. A value that fails validation is not kept (its error is raised
  again).
* **Or by identity.** A content of the history a process decoded is shared frozen
  (:mod:`ackloop.domain.frozen`): no one can change it, so it is its own exact key, found by
  its ``id`` (the entry holds the value, so its ``id`` is not reused while kept) without
  reading it at all. marshal refuses a frozen value (a subclass), so it has no other key.
* **Shared.** The validated object is handed to every call that sends that content:
  google-genai reads the models it is given (to build the request's JSON) and never changes
  them, and neither does ackloop.
* **Bounded.** Least recently used entries go first past :data:`MAX_ENTRIES`.
"""

from __future__ import annotations

import marshal
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from ackloop.domain.frozen import FROZEN

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

_FORMAT = 2
"""marshal's format 2: a value's bytes without the back-references (format 3 on) that mark
objects it holds more than once."""

MAX_ENTRIES = 4096
"""Validated values kept per process (a 101-step run's view holds about 100 contents)."""


class ValueMemo:
    """A bounded memo of what ``make(value)`` gives, by ``(tag, marshal bytes of value)``:
    ``make`` must depend on the value alone (``tag`` names it)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._kept: OrderedDict[tuple[object, bytes], Any] = OrderedDict()
        self._frozen: OrderedDict[tuple[object, int], tuple[Any, Any]] = OrderedDict()
        self.made = 0
        """Values made so far (misses, and values marshal refuses)."""

    def __len__(self) -> int:
        return len(self._kept) + len(self._frozen)

    def get(self, tag: object, value: Any, make: Callable[[Any], T]) -> T:
        """``make(value)``, once per distinct value (what ``make`` raises is not kept)."""
        if type(value) in FROZEN:
            return self._by_identity(tag, value, make)
        try:
            key = (tag, marshal.dumps(value, _FORMAT))
        except ValueError:  # not marshallable: made every time
            self.made += 1
            return make(value)
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key]  # type: ignore[no-any-return]  # made by this tag's make
        self.made += 1
        made = make(value)
        if self.max_entries > 0:
            self._kept[key] = made
            while len(self._kept) > self.max_entries:
                self._kept.popitem(last=False)
        return made

    def _by_identity(self, tag: object, value: Any, make: Callable[[Any], T]) -> T:
        key = (tag, id(value))
        found = self._frozen.get(key)
        if found is not None and found[0] is value:
            self._frozen.move_to_end(key)
            return found[1]  # type: ignore[no-any-return]  # made by this tag's make
        self.made += 1
        made = make(value)
        if self.max_entries > 0:
            self._frozen[key] = (value, made)
            while len(self._frozen) > self.max_entries:
                self._frozen.popitem(last=False)
        return made


class Validated(ValueMemo):
    """A bounded memo of ``model.model_validate(value)`` by ``(model, value)``."""

    @property
    def validations(self) -> int:
        """Values validated so far (misses, and values marshal refuses)."""
        return self.made

    def validate(self, model: type[M], value: Any) -> M:
        """``value`` validated as ``model`` (raises :class:`pydantic.ValidationError`)."""
        return self.get(model, value, model.model_validate)


VALIDATED = Validated()
"""This process's memo: the Gemini client's and the scripted model's."""


def validated(model: type[M], value: Any) -> M:
    """``value`` validated as ``model``, once per distinct value per process (:data:`VALIDATED`)."""
    return VALIDATED.validate(model, value)


__all__ = ["MAX_ENTRIES", "VALIDATED", "Validated", "ValueMemo", "validated"]
