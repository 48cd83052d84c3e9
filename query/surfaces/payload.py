"""JSON request bodies for every HTTP surface: parsed once, and refused if they cannot be stored.

JSON may carry lone UTF-16 surrogates (`"\\ud800"`) that no UTF-8 store, hash or tokenizer accepts,
numbers no column holds (`1e309` parses as infinity; any number past 2^53 either side) and nesting deep enough to
exhaust Python's stack; all are refused at the door with one sentence instead of failing deep inside with a 500.
A field's type and range are read afterwards, by the typed readers every surface shares (indexer/fields.py).
"""

from __future__ import annotations

import difflib
import json
import math
import re

from indexer.fields import MAX_INT

SURROGATE_RE = re.compile("[\ud800-\udfff]")
MAX_DEPTH = 32  # no request of any surface nests deeper than a few levels; Python's stack ends near 1000


class PayloadError(ValueError):
    pass


def _check(value, where: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise PayloadError(f"the body nests deeper than {MAX_DEPTH} levels; no request needs that")
    if isinstance(value, str):
        if SURROGATE_RE.search(value):
            raise PayloadError(f"{where} holds a lone surrogate, which is not text")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{where} is not a finite number")
        if abs(value) > MAX_INT:  # as an integer would be: no field of any surface needs a number that large
            raise PayloadError(f"{where} is a number out of range (at most {MAX_INT} either side of 0)")
    elif isinstance(value, int):
        if abs(value) > MAX_INT:
            raise PayloadError(f"{where} is an integer out of range")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _check(item, f"{where}[{n}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key, f"{where} key", depth + 1)
            _check(item, f"{where}.{key}", depth + 1)


def parse(raw: bytes) -> dict:
    """A JSON object from a request body, or PayloadError saying what is wrong with it."""
    try:
        data = json.loads(raw or b"{}")
    except RecursionError:
        raise PayloadError(f"the body nests deeper than {MAX_DEPTH} levels; no request needs that") from None
    except ValueError as exc:
        raise PayloadError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PayloadError("the body must be a JSON object")
    _check(data, "body")
    return data


def known_fields(data: dict, fields: tuple[str, ...], noun: str = "field") -> None:
    """Refuse a field the operation does not take, naming the nearest one it does (a typo is not ignored)."""
    for name in data:
        if name not in fields:
            guess = difflib.get_close_matches(name, fields, 1)
            hint = f"; did you mean {guess[0]!r}?" if guess else f"; accepted {noun}s: {', '.join(fields)}"
            raise PayloadError(f"unknown {noun} {name!r}{hint}")
