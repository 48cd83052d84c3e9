"""What a snapshot says it is (manifest.json: its repos, their states and parts, the tools and model it was built
with), what a part says it is (part.json), and which snapshots are on disk and which one CURRENT names."""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from indexer.snapshot.format import CURRENT, FORMAT_VERSION, MANIFEST, READABLE_FORMATS, SnapshotError, snapshots_dir
from indexer.versions import ToolVersions


@dataclass(frozen=True)
class RefState:
    ref: str  # full ref name (`refs/heads/main`), or a commit_id when the repo is pinned
    commit_id: str


@dataclass(kw_only=True)
class RepoState:
    """One repo as a snapshot holds it. Not frozen: the run counts into it while it builds the repo's rows."""

    org: str
    name: str
    url: str  # redacted: never carries credentials
    status: str  # ok | stale
    error: str | None
    indexed_at: str | None
    refs: list[RefState] = field(default_factory=list)
    files: int = 0
    files_indexed: int = 0
    files_skipped: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    secrets_held_back: int = 0
    parse_fallbacks: int = 0
    syntax_errors: int = 0  # files that parsed with errors: indexed with what could be recovered
    graph: dict[str, int] = field(default_factory=dict)  # rows per fact table
    include: list[str] = field(default_factory=list)  # the repo's include/exclude globs it was scanned with
    exclude: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # format 3: its part ids, oldest (the base) first
    releases: str = ""  # config.RepoSpec.releases_digest it was prepared with; "" (not written) for none
    # Its history parts, oldest (a base) first, and the settings they were read with (HistorySettings.recorded);
    # both not written when history is off.
    history: list[str] = field(default_factory=list)
    history_as: str = ""


@dataclass(frozen=True, kw_only=True)
class Manifest:
    snapshot_id: str
    created_at: str
    model_id: str
    dim: int
    chunker_version: int
    policy_version: int
    tokenizer_version: int
    repos: list[RepoState]
    extractor_version: int = 0
    resolver_version: int = 0
    edges: int = 0
    max_blob_bytes: int = 0  # the size cap the files were judged with
    # A fast-tier snapshot (static vectors, published first: indexer/build/__init__.py) names the model whose vectors
    # are being backfilled and how many of its chunks lacked them when it was published; "" and 0 otherwise.
    backfill_model_id: str = ""
    backlog: int = 0
    next_row: int = 0  # format 3: the id the next new chunk row gets (ids are never given twice)
    format_version: int = FORMAT_VERSION

    @property
    def chunks(self) -> int:
        return sum(r.chunks for r in self.repos)

    @property
    def tools(self) -> ToolVersions:
        """The tool versions it was built with (an old manifest without extractor_version or resolver_version
        reads 0)."""
        return ToolVersions(
            chunker_version=self.chunker_version,
            policy_version=self.policy_version,
            tokenizer_version=self.tokenizer_version,
            extractor_version=self.extractor_version,
            resolver_version=self.resolver_version,
        )

    def repo(self, org: str, name: str) -> RepoState | None:
        return self._by_key.get((org, name))

    @functools.cached_property
    def _by_key(self) -> dict[tuple[str, str], RepoState]:
        """Each repo by (org, name), the first listed where two share one: a run asks for every repo several
        times, and a scan of the list each time grew with the square of the repos (0.26 s a run at 923)."""
        return {(r.org, r.name): r for r in reversed(self.repos)}

    def content_key(self) -> str:
        """Everything a rebuild would depend on: equal keys mean the same content, however it is stored."""
        data = self._plain()
        for volatile in ("snapshot_id", "created_at", "next_row"):
            data.pop(volatile)
        for repo in data["repos"]:
            repo.pop("indexed_at")
            repo.pop("parts")
            repo.pop("history")
        return json.dumps(data, sort_keys=True)

    def _plain(self) -> dict:
        """asdict(self) without its deep copy of every value (0.2 s a publish at 923 repos): the repos and refs
        become dicts, the lists and dicts they hold are shared, so callers only drop keys."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        names = [f.name for f in fields(RepoState)]
        data["repos"] = [
            {**{n: getattr(r, n) for n in names}, "refs": [{"ref": x.ref, "commit_id": x.commit_id} for x in r.refs]}
            for r in self.repos
        ]
        return data

    def to_json(self) -> str:
        data = self._plain()
        if not self.backfill_model_id:  # a full snapshot's manifest reads as it did before fast-first runs
            del data["backfill_model_id"], data["backlog"]
        if self.format_version < 3:  # an older snapshot's manifest reads back byte for byte
            del data["next_row"]
            for repo in data["repos"]:
                del repo["parts"]
        for repo in data["repos"]:  # a repo without releases or history reads as it did before they existed
            for name in ("releases", "history", "history_as"):
                if not repo[name]:
                    del repo[name]
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        repos = []
        for r in data.pop("repos"):
            r["refs"] = [RefState(**x) for x in r["refs"]]
            repos.append(RepoState(**r))
        return cls(repos=repos, **data)


@dataclass(frozen=True, kw_only=True)
class PartInfo:
    """part.json: what a part is. `card` and `edge_inputs` describe the whole repo as of this part (the newest
    part of a repo speaks for it), so a run that changes one repo reads no other repo's tables."""

    part_id: str
    org: str
    repo: str
    model_id: str
    dim: int
    rows: int  # chunk rows
    base: bool  # holds every path of the repo: no older part counts
    card: str
    # indexer/build/edges.py: the facts that can couple this repo to another; a part written since EDGE_FACTS
    # keeps here only PART_INPUTS, and the others in that file
    edge_inputs: dict

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True, kw_only=True)
class HistoryInfo:
    """history.json: what a history part is. A base holds the repo's history as its settings bound it; a delta
    the commits new since the heads of the part before it."""

    part_id: str
    org: str
    repo: str
    base: bool
    heads: list[str]  # the commits of the repo's refs when it was read: the next run reads what is new since
    commits: int
    settings: str  # HistorySettings.recorded
    model_id: str = ""  # the model of commit_vectors.parquet; "": the part has none (written before it had)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "HistoryInfo":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class PartRef:
    """One part as a snapshot lists it: where its tables are, and the paths later parts of its repo speak for
    (its rows at those paths are superseded). A format-1/2 snapshot is one part kept in its own directory."""

    part_id: str | None  # None: a format-1/2 snapshot's own tables
    dir: Path
    covered: frozenset[str]


def current_id(data_dir: Path) -> str | None:
    try:
        value = (data_dir / CURRENT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return value or None


def open_manifest(data_dir: Path, snapshot_id: str | None = None) -> tuple[Path, Manifest]:
    """The live (or named) snapshot's directory and manifest, or a SnapshotError saying what to do."""
    snapshot_id = snapshot_id or current_id(data_dir)
    if snapshot_id is None:
        raise SnapshotError(
            f"no snapshot published in {str(data_dir)!r}: run 'blobdex index' first "
            f"(or point --data-dir / BLOBDEX_DATA_DIR at an existing index)"
        )
    if "/" in snapshot_id or snapshot_id.startswith("."):
        raise SnapshotError(
            f"CURRENT in {str(data_dir)!r} names {snapshot_id!r}, which is not a snapshot id; "
            f"run 'blobdex index' to publish a new snapshot"
        )
    path = snapshots_dir(data_dir) / snapshot_id
    try:
        manifest = Manifest.from_json((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SnapshotError(
            f"cannot open snapshot {str(path)!r}: it has no {MANIFEST}; run 'blobdex index' to publish a new snapshot"
        ) from exc
    except (ValueError, TypeError, KeyError) as exc:
        raise SnapshotError(
            f"cannot open snapshot {str(path)!r}: its {MANIFEST} is not in a format this "
            f"version reads ({exc}); rebuild with 'blobdex index --full'"
        ) from exc
    if manifest.format_version not in READABLE_FORMATS:
        raise SnapshotError(
            f"cannot open snapshot {str(path)!r}: format {manifest.format_version}, this "
            f"version reads format {FORMAT_VERSION}; rebuild with 'blobdex index --full' "
            f"or run a matching blobdex version"
        )
    return path, manifest


def published(data_dir: Path) -> list[str]:
    """Ids of the published snapshots on disk, newest first (ids sort by time)."""
    root = snapshots_dir(data_dir)
    if not root.exists():
        return []
    return sorted((p.name for p in root.iterdir() if not p.name.startswith(".")), reverse=True)


def kept(data_dir: Path) -> list[str]:
    """The snapshots kept before the one CURRENT names, newest first: what a server may fall back to
    (all of them when CURRENT is missing or empty, or names no snapshot on disk)."""
    live_id, ids = current_id(data_dir), published(data_dir)
    return [i for i in ids if i < live_id] if live_id in ids else ids
