"""JSON request bodies for every HTTP surface: parsed once, and refused if they cannot be stored.

JSON may carry lone UTF-16 surrogates (`"\\ud800"`) that no UTF-8 store, hash or tokenizer accepts;
they are refused at the door instead of failing deep inside with a 500.
"""

from __future__ import annotations

import json
import re

SURROGATE_RE = re.compile("[\ud800-\udfff]")
MAX_INT = 2**53  # JSON's safe integers; SQLite and Arrow columns take them


class PayloadError(ValueError):
    pass


def _check(value, where: str) -> None:
    if isinstance(value, str):
        if SURROGATE_RE.search(value):
            raise PayloadError(f"{where} holds a lone surrogate, which is not text")
    elif isinstance(value, bool) or value is None or isinstance(value, float):
        return
    elif isinstance(value, int):
        if abs(value) > MAX_INT:
            raise PayloadError(f"{where} is an integer out of range")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _check(item, f"{where}[{n}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key, f"{where} key")
            _check(item, f"{where}.{key}")


def parse(raw: bytes) -> dict:
    """A JSON object from a request body, or PayloadError saying what is wrong with it."""
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        raise PayloadError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PayloadError("the body must be a JSON object")
    _check(data, "body")
    return data
