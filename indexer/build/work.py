"""The records every stage of one index run reads: the run (config, report, cache, model, the snapshot it
changes), each repo's work, and the base snapshot. They live apart from the orchestrator (indexer/build/__init__.py)
so that a stage imports what it reads, never the module that calls it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from indexer.build.cache import Cache
from indexer.build.parts import RepoLive
from indexer.build.report import RepoReport, Report
from indexer.config import Config, RepoSpec
from indexer.embed import Embedder, configured_embedder
from indexer.scan import RefScan
from indexer.snapshot import PART_INFO, Manifest, PartInfo, RepoState, parts_dir, read_edge_facts, read_part_info

if TYPE_CHECKING:
    from indexer.build.cluster import Cluster


@dataclass(kw_only=True)
class RepoWork:
    spec: RepoSpec
    report: RepoReport
    refs: list[tuple[str, str]] = field(default_factory=list)  # (ref, commit_id), resolved this run
    scans: list[RefScan] = field(default_factory=list)  # empty when the repo is kept as the base holds it
    mirror_path: Path | None = None
    kept: bool = False  # at the commits the base snapshot holds: its parts are listed again, nothing scanned
    fetched: bool = True  # False: left out of this run (`only`), listed with the state the base has

    @property
    def ok(self) -> bool:
        return self.report.status == "ok"


@dataclass(frozen=True)
class Base:
    """The snapshot a run changes: CURRENT's, when it is of this format and built with these tools (a run on
    any other builds every repo from scratch)."""

    path: Path
    manifest: Manifest
    _live: dict = field(default_factory=dict, compare=False, repr=False)

    def live(self, org: str, name: str) -> RepoLive | None:
        """The repo's live rows in the base (None when the base holds no part of it): the one place a stage gets
        them, read once per run however many stages ask."""
        if (org, name) not in self._live:
            before = self.manifest.repo(org, name)
            held = before is not None and bool(before.parts)
            self._live[org, name] = RepoLive(self.path, self.manifest, org, name) if held else None
        return self._live[org, name]


@dataclass(kw_only=True)
class Change:
    """One scanned repo's change against the base: the paths whose rows it replaces (None: every path), the
    repo's live rows there (None: it had none), and the new rows (Tables.arrow) with its state."""

    live: RepoLive | None
    paths: set[str] | None
    new: dict[str, pa.Table]
    state: RepoState


# A part's path -> (its part.json's inode, size and mtime, its info). A part is never changed once written, and
# every run that resolves calls or rebuilds an org's edges reads the info (edge_inputs: what can couple the repo
# to another) of every repo of the org: 1.2 s of a 2.9 s push run at 923 repos. A long-lived indexer (`blobdex
# index --every`, a queue's drain) so reads each part's once, and holds the infos of the base's newest parts
# between runs (0.4 MB a repo of networkx's size); a run forgets those its base no longer lists.
_INFOS: dict[Path, tuple[tuple[int, int, int], PartInfo]] = {}
_FACTS: dict[Path, tuple[PartInfo, dict]] = {}  # a part's path -> (the info read with them, its edge facts)


@dataclass(kw_only=True)
class Run:
    """What every stage of one build reads: the config, the report it fills, the cache, the model, the previous
    snapshot and the base it changes. Not frozen: the embedder is loaded at most once, by the first stage that
    needs it."""

    cfg: Config
    report: Report
    cache: Cache
    work: list[RepoWork]
    model: str  # the model's name, as load_embedder takes it
    model_id: str
    prev_path: Path | None
    prev: Manifest | None
    base: Base | None
    show_progress: bool
    started: float  # time.monotonic() at the run's start
    embedder: Embedder | None = None
    cluster: Cluster | None = None  # config `cluster`: new blobs and embedding spread over Ray
    history: dict = field(default_factory=dict)  # (org, name) -> build.history.RepoHistory, from the history stage

    def __post_init__(self) -> None:
        repos = self.base.manifest.repos if self.base else []
        newest = {parts_dir(self.cfg.data_dir) / r.parts[-1] for r in repos if r.parts}
        for cache in (_INFOS, _FACTS):
            for gone in set(cache) - newest:
                del cache[gone]

    def part_info(self, state: RepoState) -> PartInfo:
        """The info of a repo's newest part, which speaks for the repo as a whole: read once a process while
        its part.json stays the file it was (_INFOS)."""
        part = parts_dir(self.cfg.data_dir) / state.parts[-1]
        stat = (part / PART_INFO).stat()
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if part not in _INFOS or _INFOS[part][0] != seen:
            _INFOS[part] = (seen, read_part_info(part))
        return _INFOS[part][1]

    def edge_facts(self, state: RepoState) -> dict:
        """Every coupling fact of a repo's newest part, what `edges` reads: part.json's edge inputs with the
        facts beside it (EDGE_FACTS), read once a process like the info."""
        part = parts_dir(self.cfg.data_dir) / state.parts[-1]
        info = self.part_info(state)
        if part not in _FACTS or _FACTS[part][0] is not info:
            _FACTS[part] = (info, {**info.edge_inputs, **read_edge_facts(part)})
        return _FACTS[part][1]

    def removed(self) -> list[tuple[str, str]]:
        """The repos the base holds that the config no longer names: the run leaves them out."""
        configured = {w.spec.key for w in self.work}
        return (
            [(r.org, r.name) for r in self.base.manifest.repos if (r.org, r.name) not in configured]
            if self.base
            else []
        )

    def carried(self, w: RepoWork) -> tuple[Path, Manifest] | None:
        """Where the rows of a repo this run does not scan are (kept at the base's commits, or failed): the base,
        or, in a run from scratch, the previous snapshot of whatever format; None when it has none to keep
        serving."""
        path, manifest = (self.base.path, self.base.manifest) if self.base else (self.prev_path, self.prev)
        before = manifest.repo(*w.spec.key) if manifest is not None else None
        if before is None:
            return None
        held = bool(before.parts) if manifest.format_version >= 3 else before.indexed_at is not None
        return (path, manifest) if held else None

    def carried_live(self, w: RepoWork, source: tuple[Path, Manifest]) -> RepoLive:
        """The rows `carried` found: the base's, as Base.live reads them once, or the previous snapshot's."""
        if self.base is not None and source[0] == self.base.path:
            return self.base.live(*w.spec.key)
        return RepoLive(*source, *w.spec.key)

    def loaded_embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = configured_embedder(self.cfg, self.model, writable=True)
        return self.embedder

    def embeds_on_cluster(self, texts: int) -> bool:
        """Whether this many texts are embedded on the cluster (never the static tier: a table lookup)."""
        return self.cluster is not None and self.model == self.cfg.model and self.cluster.worth(texts=texts)

    def embedding_dim(self, texts: int) -> int:
        """The model's dimension, from where this many texts will be embedded: the driver of a cluster run
        never loads the model itself."""
        if self.embedder is None and self.embeds_on_cluster(texts):
            return self.cluster.model_dim(self.model, self.cfg.encoder, self.model_id)
        return self.loaded_embedder().dim
