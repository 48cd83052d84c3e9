"""The precise tier: a SCIP indexer (Sourcegraph's Code Intelligence Protocol: scip-python, scip-typescript, from
the npm registry) run over a temporary checkout of an indexed tree, and its index read back: where each symbol
is defined and where it is referenced. A call row whose callee the indexer resolved to a definition of the repo
takes that definition (`resolution` = `scip`); the run reports how often blobdex's own resolution agreed, which
is the figure that says how far to trust it where no SCIP indexer runs (`ci/precision.py` measures the same).

The index is protobuf; only the fields read here are decoded, straight from the wire format (scip.proto:
Index.documents = 2; Document.relative_path = 1, occurrences = 2; Occurrence.range = 1 (packed int32: start
line, start character, [end line,] end character, 0-based), symbol = 2, symbol_roles = 3), so no generated
code or protobuf runtime is needed. A malformed index raises ScipError.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from indexer.calls.declared import TOP_PACKAGE_DIRS
from indexer.errors import BlobdexError
from indexer.ignore import validate_path
from indexer.mirror import open_mirror
from indexer.scan import _walk
from indexer.snapshot import RESOLUTION_COLUMNS

DEFINITION = 0x1  # SymbolRole.Definition
MAX_INDEX_BYTES = 2 * 1024**3
MAX_CHECKOUT_FILE_BYTES = 2 * 1024 * 1024  # bigger files are data, not what an indexer reads
INDEXERS = {"python": "scip-python", "typescript": "scip-typescript"}  # language family -> the indexer's command
FAMILY = {"python": "python", "typescript": "typescript", "tsx": "typescript", "javascript": "typescript"}
# scip-python honours a project's pyright `include` (requests' names src/ alone): the checkout's own config,
# which pyright reads before pyproject.toml, makes it index every file, tests included, as blobdex does.
PYRIGHT_CONFIG = {"include": ["."], "exclude": ["**/node_modules", "**/__pycache__", "**/.*"]}


class ScipError(BlobdexError):
    """A SCIP index that cannot be read; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class Occurrence:
    line: int  # 1-based, as blobdex counts lines
    start: int  # 0-based columns of the occurrence on its line
    end: int
    symbol: str
    definition: bool


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(data):
            raise ScipError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ScipError("varint too long")


def _fields(data: bytes):
    """(field number, wire type, value) of a message: an int for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ScipError("a field runs past the end of its message")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ScipError(f"unsupported wire type {wire}")
        yield number, wire, value


def _ints(value, wire: int) -> list[int]:
    if wire == 0:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        n, pos = _varint(value, pos)
        out.append(n)
    return out


def _occurrence(data: bytes) -> Occurrence | None:
    span, symbol, roles = [], "", 0
    for number, wire, value in _fields(data):
        if number == 1:
            span += _ints(value, wire)
        elif number == 2 and wire == 2:
            symbol = value.decode("utf-8", "replace")
        elif number == 3 and wire == 0:
            roles = value
    if len(span) not in (3, 4) or not symbol:
        return None
    return Occurrence(line=span[0] + 1, start=span[1], end=span[-1], symbol=symbol, definition=bool(roles & DEFINITION))


def read_index(path: Path) -> dict[str, list[Occurrence]]:
    """Each document's occurrences, by its path relative to the indexed root."""
    if path.stat().st_size > MAX_INDEX_BYTES:
        raise ScipError(f"SCIP index {str(path)!r} is over {MAX_INDEX_BYTES} bytes")
    documents: dict[str, list[Occurrence]] = {}
    for number, wire, value in _fields(path.read_bytes()):
        if number != 2 or wire != 2:
            continue
        relative, found = "", []
        for n, w, v in _fields(value):
            if n == 1 and w == 2:
                relative = v.decode("utf-8", "replace")
            elif n == 2 and w == 2:
                occurrence = _occurrence(v)
                if occurrence is not None:
                    found.append(occurrence)
        if relative:
            documents.setdefault(relative, []).extend(found)
    return documents


def definitions(documents: dict[str, list[Occurrence]]) -> dict[str, tuple[str, int]]:
    """Symbol -> (path, line) of its definition, for symbols the index defines (not external ones)."""
    return {o.symbol: (path, o.line) for path, occurrences in documents.items() for o in occurrences if o.definition}


@dataclass(kw_only=True)
class Agreement:
    """How blobdex's resolution of a repo's calls compares with a SCIP index's, call by call: `judged` calls the
    SCIP indexer resolved (to a definition of the repo or to something outside it), `agree` of them resolved by
    blobdex to the same definition, `disagree` resolved by blobdex to another, `missed` left name_only or
    unresolved by blobdex though SCIP found a definition of the repo; `levels` counts the judged calls per
    blobdex level and `agree_by_level` the agreeing ones. Precision: agree / (agree + disagree); recall: agree
    over the calls SCIP resolved to a definition of the repo."""

    judged: int = 0
    internal: int = 0  # of the judged, those SCIP resolved to a definition of the repo
    agree: int = 0
    disagree: int = 0
    missed: int = 0
    levels: Counter = field(default_factory=Counter)
    agree_by_level: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        resolved = self.agree + self.disagree
        return {
            "judged": self.judged,
            "agree": self.agree,
            "disagree": self.disagree,
            "missed": self.missed,
            "precision": round(self.agree / resolved, 4) if resolved else None,
            "internal": self.internal,
            "recall": round(self.agree / self.internal, 4) if self.internal else None,
            "levels": dict(self.levels),
            "agree_by_level": dict(self.agree_by_level),
        }


def checkout(mirror: Path, commit_id: str, dest: Path) -> None:
    """The commit's tree written under `dest` (regular files up to MAX_CHECKOUT_FILE_BYTES; no symlinks, no
    submodules, no path git would refuse): what an indexer reads, never a working copy anyone edits."""
    with open_mirror(mirror) as repo:
        for raw, mode, sha in _walk(repo, repo[commit_id.encode()].tree):
            path = validate_path(raw)
            if path is None or not stat.S_ISREG(mode):
                continue
            data = repo.object_store[sha].as_raw_string()
            if len(data) <= MAX_CHECKOUT_FILE_BYTES:
                target = dest / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)


def installed(family: str, search: list[Path] | None = None) -> Path | None:
    """The SCIP indexer of a language family: on PATH or in one of `search` (e.g. node_modules/.bin)."""
    name = INDEXERS.get(family)
    if name is None:
        return None
    for folder in search or []:
        if (folder / name).exists():
            return folder / name
    found = shutil.which(name)
    return Path(found) if found else None


def index_tree(
    tool: Path, family: str, root: Path, name: str, version: str, timeout: float
) -> dict[str, list[Occurrence]]:
    """Run a SCIP indexer over a checkout of commit `version` and read what it wrote; ScipError, in one
    sentence, when it fails. (The checkout has no .git: scip-python takes its version from here.)"""
    out = root.parent / f"{root.name}.scip"
    if family == "python":
        # A `src/` layout's packages are imported as the repo's own, not as a copy some site-packages holds.
        extra = [d for d in TOP_PACKAGE_DIRS if (root / d).is_dir()]
        (root / "pyrightconfig.json").write_text(json.dumps({**PYRIGHT_CONFIG, "extraPaths": extra}))
        command = [str(tool), "index", ".", "--project-name", name, "--project-version", version, "--output", str(out)]
        command.append("--quiet")
    else:
        command = [str(tool), "index", "--output", str(out)]
        if not (root / "tsconfig.json").exists():
            command.append("--infer-tsconfig")
    # A static analyser over files a repo supplied: it reads them and runs nothing of theirs. It gets no more
    # of this process's environment than it needs (no credentials a fetch was given), a home of its own, and
    # the repo's own pyright settings are replaced by ours above.
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(root.parent), "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise ScipError(f"{tool.name} did not finish indexing repo {name!r} in {timeout:.0f} s") from exc
    except OSError as exc:
        raise ScipError(f"cannot run {tool}: {exc}") from exc
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ScipError(f"{tool.name} failed on repo {name!r} (exit {done.returncode}): {tail[0][:200]}")
    return read_index(out)


def scip_targets(
    calls: pa.Table,
    symbols: pa.Table,
    documents: dict[str, list[Occurrence]],
    sources: dict[str, list[str]],
    repo: str,
) -> list[tuple[str, str] | str | None]:
    """For each call row (path, line, callee) of `repo`: the (path, qualified name) of the repo's definition
    SCIP resolves it to, "external" when SCIP resolves it to something the index does not define, None when
    SCIP has no answer there: no reference (it could not tell, or the call is not one SCIP records), several
    on the line by that name (`s.get(u) or d.get(k)`: which row is which, a row does not say), or "external"
    for a call blobdex resolved into another indexed repo (the index covers this repo's checkout alone)."""
    defined = definitions(documents)
    by_position = {}
    for path, name, qualified, line in zip(
        *(symbols.column(c).to_pylist() for c in ("path", "name", "qualified_name", "line"))
    ):
        by_position.setdefault((path, line, name), qualified)
    at: dict[tuple[str, int, str], set[str]] = {}
    for path, occurrences in documents.items():
        lines = sources.get(path)
        if lines is None:
            continue
        for o in occurrences:
            if not o.definition and 0 < o.line <= len(lines):
                at.setdefault((path, o.line, lines[o.line - 1][o.start : o.end]), set()).add(o.symbol)
    out: list = []
    columns = ("path", "line", "callee", "resolved_repo")
    for path, line, callee, resolved_repo in zip(*(calls.column(c).to_pylist() for c in columns)):
        found = at.get((path, line, callee), set())
        if len(found) != 1:
            out.append(None)
            continue
        symbol = next(iter(found))
        where = defined.get(symbol)
        qualified = by_position.get((where[0], where[1], descriptor_name(symbol))) if where else None
        if qualified:
            out.append((where[0], qualified))
        else:
            out.append(None if resolved_repo and resolved_repo != repo else "external")
    return out


def descriptor_name(symbol: str) -> str:
    """The name a SCIP symbol ends with: `... `pkg.mod`/Session#get().` -> get, `.../Session#` -> Session."""
    tail = symbol.rstrip(".#:")
    if tail.endswith(")"):
        tail = tail[: tail.rfind("(")]
    return re.split(r"[/#.`]", tail)[-1]


def agreement(calls: pa.Table, targets: list) -> Agreement:
    """Compare each call row's resolution with its SCIP target (scip_targets)."""
    result = Agreement()
    columns = ("resolution", "resolved_path", "resolved_symbol")
    for (level, path, symbol), target in zip(zip(*(calls.column(c).to_pylist() for c in columns)), targets):
        if target is None:
            continue
        result.judged += 1
        result.internal += target != "external"
        result.levels[level] += 1
        if level in ("name_only", "unresolved"):
            result.missed += target != "external"
            if target == "external" and level == "unresolved":
                result.agree_by_level[level] += 1
            continue
        if target == (path, symbol):
            result.agree += 1
            result.agree_by_level[level] += 1
        else:
            result.disagree += 1
    return result


@dataclass(kw_only=True)
class Precise:
    """What the SCIP indexers said of one commit of a repo: each document's occurrences and its lines."""

    documents: dict[str, list[Occurrence]]
    sources: dict[str, list[str]]
    tools: list[str]
    seconds: float


def index_commit(mirror: Path, commit_id: str, repo: str, langs: set[str], timeout: float) -> Precise:
    """Check a commit out into a temporary directory and run every installed SCIP indexer of its languages;
    ScipError when none is installed or one fails."""
    families = sorted({FAMILY[lang] for lang in langs if lang in FAMILY})
    tools = {f: installed(f) for f in families}
    if not any(tools.values()):
        names = " or ".join(INDEXERS[f] for f in families) or "an indexer for its languages"
        raise ScipError(f"scip = true, but {names} is not on PATH (npm install -g @sourcegraph/{names.split()[0]})")
    started = time.monotonic()
    documents: dict[str, list[Occurrence]] = {}
    with tempfile.TemporaryDirectory(prefix="blobdex-scip-") as tmp:
        root = Path(tmp) / "tree"
        checkout(mirror, commit_id, root)
        for family, tool in tools.items():
            if tool is not None:
                documents.update(index_tree(tool, family, root, repo, commit_id, timeout))
        sources = {
            path: (root / path).read_text(encoding="utf-8", errors="replace").split("\n")
            for path in documents
            if (root / path).is_file()
        }
    used = [t.name for t in tools.values() if t is not None]
    return Precise(documents=documents, sources=sources, tools=used, seconds=time.monotonic() - started)


def apply(calls: pa.Table, targets: list, repo: str) -> pa.Table:
    """Call rows with the SCIP indexer's answers taken where it has one: a definition of the repo (`scip`), or
    something outside every indexed file (`unresolved`)."""
    columns = {c: calls.column(c).to_pylist() for c in RESOLUTION_COLUMNS}
    for i, target in enumerate(targets):
        if target is None:
            continue
        row = ("scip", repo, *target) if isinstance(target, tuple) else ("unresolved", "", "", "")
        for column, value in zip(columns, row):
            columns[column][i] = value
    for name, values in columns.items():
        calls = calls.set_column(calls.schema.get_field_index(name), name, pa.array(values, pa.string()))
    return calls
