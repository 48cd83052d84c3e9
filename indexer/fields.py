"""Typed readers for the fields a client sends (a parsed JSON body, one object inside it, or a query string), shared
by the HTTP surfaces of both servers: a field of the wrong type or out of range is refused with one sentence that
names the field, says what it must be and shows what was given (FieldError, 400), which each surface answers in
its own contract's error body. No web framework is imported here: the readers take any mapping.

A null reads as an absent field, so an optional field may be sent as null; a required one may not.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

from indexer.errors import BlobdexError

MAX_INT = 2**53  # JSON's safe integers; SQLite and Arrow columns take them
ABSENT = object()  # a field the object does not hold (or holds as null)
SHOWN_CHARS = 80  # how much of a refused value a message repeats


class FieldError(BlobdexError):
    """A request field of the wrong type or out of range (400); the message names the field, what it must be and
    what was given."""


def shown(value: Any) -> str:
    """A refused value as the message repeats it: JSON, cut short, and ASCII, so no text of the caller's can pass
    for an action a message names (indexer.errors.said)."""
    return "nothing" if value is ABSENT else json.dumps(value, default=str)[:SHOWN_CHARS]


class Fields:
    """The fields of one object. `where` names the object inside its request (`chunks[3]`: its fields are then
    named `chunks[3].path`); `quoted` names fields as 'name', the /v1 API's wording, rather than name.

    Each reader takes `must`, the words for what the field must be, where a contract's documentation words it
    its own way; the default is the type's."""

    def __init__(self, data: Mapping, where: str = "", quoted: bool = False):
        self.data, self.where, self.quoted = data, where, quoted

    def name(self, key: str) -> str:
        named = f"{self.where}.{key}" if self.where else key
        return f"'{named}'" if self.quoted else named

    def fail(self, key: str, must: str, value: Any = ABSENT) -> NoReturn:
        """Refuse the field: required and absent, or `value`, which is not what it `must` be."""
        if value is ABSENT:
            raise FieldError(f"{self.name(key)} is required: it must be {must}")
        raise FieldError(f"{self.name(key)} must be {must}, got {shown(value)}")

    def _get(self, key: str, required: bool, must: str) -> Any:
        value = self.data.get(key)
        if value is None and required:
            self.fail(key, must)
        return ABSENT if value is None else value

    def text(self, key: str, required: bool = False, nonempty: bool = False, must: str | None = None) -> str | None:
        """A string; None when absent. `nonempty`: "" is refused too."""
        must = must or ("a non-empty string" if nonempty else "a string")
        value = self._get(key, required, must)
        if value is ABSENT:
            return None
        if not isinstance(value, str) or (nonempty and not value):
            self.fail(key, must, value)
        return value

    def flag(self, key: str, default: bool = False, loose: bool = False) -> bool:
        """true or false; `default` when absent. `loose`: a query string's true|false|1|0 too, and "" reads as
        absent (as `integer` reads it)."""
        value = self.data.get(key)
        if value is None or (loose and value == ""):
            return default
        if loose and isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if not isinstance(value, bool):
            self.fail(key, "true or false", value)
        return value

    def choice(self, key: str, choices: tuple[str, ...], must: str | None = None) -> str:
        """One of `choices`; the first when absent or empty."""
        value = self.data.get(key)
        if value is None or value == "":
            return choices[0]
        if value not in choices:
            self.fail(key, must or f"one of {', '.join(choices)}", value)
        return value

    def number(self, key: str, low: float, high: float, must: str | None = None) -> float | None:
        """A finite number from `low` to `high`; None when absent."""
        value = self.data.get(key)
        if value is None:
            return None
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if not number or not low <= value <= high:
            self.fail(key, must or f"a number from {low} to {high}", value)
        return float(value)

    def integer(
        self,
        key: str,
        default: int | None = None,
        low: int | None = None,
        high: int | None = None,
        required: bool = False,
        loose: bool = False,
    ) -> int | None:
        """A whole number (within `low`..`high` when they are given; 2.0 is one, as JSON counts numbers); `default`
        when absent. `loose`: written as text too ("2", a query string's), and "" reads as absent."""
        ranged = low is not None and high is not None
        must = f"an integer from {low} to {high}" if ranged else "an integer"
        value = self._get(key, required, must)
        if value is ABSENT or (loose and value == ""):
            return default
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if loose and isinstance(value, str):
            with contextlib.suppress(ValueError):  # int() reads what a person writes: " 7", "+7"
                value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or (ranged and not low <= value <= high):
            self.fail(key, must, value)
        if abs(value) > MAX_INT:  # no id, line or limit is that large; numpy and SQLite overflow on it
            raise FieldError(
                f"{self.name(key)} is out of range: give a whole number up to {MAX_INT}, not {shown(value)}"
            )
        return value

    def strs(self, key: str, one: bool = False, must: str | None = None) -> tuple[str, ...]:
        """An array of strings; () when absent or "". `one`: a single string reads as an array of it."""
        value = self.data.get(key)
        if value is None or value == "":
            return ()
        if one and isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            self.fail(key, must or "an array of strings", value)
        return tuple(value)

    def array(self, key: str, required: bool = False, must: str = "an array") -> list:
        """An array of anything (its items are read with Fields of their own); [] when absent."""
        value = self._get(key, required, must)
        if value is ABSENT:
            return []
        if not isinstance(value, list):
            self.fail(key, must, value)
        return value

    def mapping(self, key: str, values: type | None = None, must: str = "an object") -> dict:
        """An object, each of its values of type `values` when one is given; {} when absent."""
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict) or (
            values is not None and not all(isinstance(v, values) for v in value.values())
        ):
            self.fail(key, must, value)
        return value
