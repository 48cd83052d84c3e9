"""Per-blob preparation: one blob's bytes into what an index keeps of them (a skip reason, or chunks with
credentials held back, and structural facts).

The indexer prepares every new blob with it and session overlays prepare every synced file with it, so an
uncommitted edit is skipped, chunked and held back exactly as its commit will be. What a path rules out
(`ignore.skip_for_path`, the repo's globs) is decided before: an entry depends on the bytes and the
language only (and the lines released at its path, rare, which join the key), which is why the cache can key it
by blob_id.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from indexer.chunk import Chunk, chunk_and_parse
from indexer.extract import extract
from indexer.ignore import SkipReason, skip_for_content
from indexer.languages import script_language
from indexer.secrets import screen, scrub_facts


@dataclass(frozen=True, kw_only=True)
class BlobEntry:
    """What one blob (read as one language) yields: a skip reason, or its chunks. The cache stores it as JSON,
    field by field in this order: adding a field needs a default, and changing one a tool version bump."""

    size: int
    skip: str | None = None
    fallback: str | None = None  # `parse_timeout` when tree-sitter gave up and line windows were used
    secrets_held_back: int = 0
    chunks: tuple[Chunk, ...] = ()
    sha256: str | None = None  # of the bytes: what clients that hash files compare against
    facts: dict | None = None  # extract.Facts.to_json()
    syntax_error: bool = False  # parsed with errors: chunks and facts are what could be recovered
    held_back: tuple[tuple[int, int, str], ...] = ()  # (line_start, line_end, kind) of each chunk held back
    lang: str | None = None  # the language its content names (a script's #! line) where its path names none


def prepare(
    data: bytes,
    lang: str,
    max_bytes: int,
    *,
    facts: bool = True,
    seconds: dict[str, float] | None = None,
    released: frozenset[str] = frozenset(),
) -> BlobEntry:
    """Skip -> chunk -> hold back secrets (-> extract facts, scrubbed of what was held back).

    `facts=False` leaves extraction out (overlays search chunks only); `seconds["extract"]`, when given,
    gains the time extraction took (the run report shows it apart from chunking). `released`: fingerprints of
    lines the config releases at the blob's path (config `[[release]]`), so the entry depends on them too and
    its cache key carries their digest (indexer/build/rows.py entry_key)."""
    skip = skip_for_content(data, max_bytes)
    if skip is not None:
        return BlobEntry(size=len(data), skip=skip.value)
    script = script_language(data) if lang == "text" else None  # `bin/deploy` with `#!/usr/bin/env python3`
    lang = script or lang
    text = data.decode("utf-8", "replace")
    chunks, fallback, parsed = chunk_and_parse(text, lang)
    screened = screen(text, chunks, released)
    kept, held = screened.kept, screened.held
    found = None
    if facts:
        started = time.monotonic()
        found = scrub_facts(extract(parsed, lang).to_json(), held, screened.released_lines)
        if seconds is not None:
            seconds["extract"] += time.monotonic() - started
    return BlobEntry(
        size=len(data),
        fallback=fallback,
        secrets_held_back=len(held),
        chunks=tuple(kept),
        sha256=hashlib.sha256(data).hexdigest(),
        facts=found,
        syntax_error=parsed is not None and parsed[0].root_node.has_error,
        held_back=tuple((h.line_start, h.line_end, h.kind) for h in held),
        lang=script,
    )


def prepare_batch(
    items: list[tuple], max_bytes: int, seconds: dict | None = None
) -> tuple[list[tuple[str, BlobEntry]], list[str]]:
    """Each (cache key, bytes, lang[, released lines]) blob's entry, and what went wrong: a blob that fails to
    prepare (a parser or extractor bug on hostile content) is marked unreadable, never aborts a repo, and is said
    in a sentence the run logs (on a Ray worker the worker's own log is not the run's)."""
    out, problems = [], []
    for key, data, lang, *released in items:  # released lines: optional, none when left out
        try:
            out.append((key, prepare(data, lang, max_bytes, seconds=seconds, released=frozenset(*released))))
        except Exception as exc:
            problems.append(f"cannot chunk blob {key} ({lang}): {exc}")
            out.append((key, BlobEntry(size=0, skip=SkipReason.UNREADABLE.value)))
    return out, problems
