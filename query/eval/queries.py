"""Labelled queries from a JSONL file: one {"query", "expected": [path or path:lines], "repo"?} per line."""

from __future__ import annotations

import json
from pathlib import Path

from query.eval import EvalError
from query.eval.metrics import Case


def load_queries(path: Path) -> list[Case]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            expected = tuple(str(e).split(":", 1)[0] for e in item["expected"])
            cases.append(Case(query=str(item["query"]), expected=expected, repo=item.get("repo")))
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalError(f'{path}:{n}: each line must be {{"query", "expected": [paths], "repo"?}} ({exc})') from exc
    if not cases:
        raise EvalError(f"{path} holds no queries")
    return cases
