"""JSON schemas as every MCP session reads them (tools/list is in every agent's context): pydantic's schemas without
what says nothing to a client (titles that repeat the field's name, `null` branches of optional arguments, `null`
and `false` defaults, JSON's own integer ceiling), and an answer's schema one level deep."""

from __future__ import annotations

from typing import Any

from indexer.fields import MAX_INT

NOISE = ("title",)


def _noise(key: str, value: Any) -> bool:
    """Says nothing a client needs: a flag left out is off, an optional value left out is absent, and no JSON
    client sends an integer past 2^53 (MAX_INT) anyway."""
    if key in ("minimum", "maximum"):
        return value in (-MAX_INT, MAX_INT)
    return key in NOISE or (key == "default" and (value is None or value is False))


def compact(schema: Any, nullable: bool = False) -> Any:
    """`schema` without its noise (_noise), and `anyOf: [X, {"type": "null"}]` written shorter: as X for
    arguments (an optional argument is one a client may leave out; null is still accepted), as X with "null" among
    its types for answers (`nullable`), where null is a value a client must accept."""
    if isinstance(schema, list):
        return [compact(x, nullable) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: compact(v, nullable) for k, v in schema.items() if not _noise(k, v)}
    branches = out.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1 and len(kept) < len(branches):
            rest = {k: v for k, v in out.items() if k != "anyOf"}
            if not nullable:
                out = {**kept[0], **rest}
            elif isinstance(kept[0].get("type"), str):
                out = {**kept[0], "type": [kept[0]["type"], "null"], **rest}
    return out


def shallow(schema: dict | None) -> dict | None:
    """An answer's schema with its own fields typed and whatever they hold (a hit, a commit) as an object: a
    client sees every field of the answer, and the tools' list stays small."""
    if schema is None:
        return None
    defs = schema.get("$defs", {})

    def flat(node: Any) -> Any:
        if isinstance(node, list):
            return [flat(x) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
            return {"type": target.get("type", "object")}
        return {k: flat(v) for k, v in node.items() if k != "description"}

    # additionalProperties goes too: the model refuses an undeclared field before an answer leaves.
    top = compact({k: v for k, v in schema.items() if k not in ("$defs", "additionalProperties")}, nullable=True)
    top["properties"] = {name: flat(prop) for name, prop in top.get("properties", {}).items()}
    return top
