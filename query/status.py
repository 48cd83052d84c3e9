"""Status: what each repo has in the live snapshot, whether its mirror has moved on since, which vectors it
serves (and the backlog of a fast-tier one), and where credentials were held back."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pyarrow.compute as pc

from indexer.config import Config
from indexer.embed import vector_tier
from indexer.mirror import MirrorError, mirror_path, open_mirror, redact
from indexer.scan import ScanError, resolve_ref
from indexer.runs import read_backfill
from indexer.snapshot import Manifest, SnapshotError, current_id, open_manifest, read_graph, snapshots_dir
from indexer.snapshot.ann import CODEBOOK, is_fast
from query import approximate


@dataclass(frozen=True, kw_only=True)
class RefStatus:
    ref: str
    commit_id: str
    behind: bool | None  # the mirror has moved on since; None when the mirror cannot say


@dataclass(frozen=True, kw_only=True)
class RepoStatus:
    """One configured or indexed repo as status, list_repos and /v1/repos show it."""

    org: str
    name: str
    url: str
    configured: bool
    status: str  # the last run's verdict, or "not indexed"
    error: str | None
    indexed_at: str | None
    files: int
    files_indexed: int
    chunks: int
    files_skipped: dict
    secrets_held_back: int
    refs: tuple[RefStatus, ...] = ()

    def to_dict(self) -> dict:
        return {**asdict(self), "refs": [asdict(r) for r in self.refs]}


def repo_status(
    cfg: Config, org: str | None = None, serving: Manifest | None = None
) -> tuple[str | None, list[RepoStatus]]:
    """(snapshot_id, one row per configured or indexed repo); a missing snapshot is not an error here.
    A server passes the manifest it serves: when CURRENT's cannot be read, that is what it answers from."""
    manifest = None
    if current_id(cfg.data_dir) is not None:
        try:
            _, manifest = open_manifest(cfg.data_dir)
        except SnapshotError:
            if serving is None:
                raise
            manifest = serving
    indexed = {(r.org, r.name): r for r in manifest.repos} if manifest else {}
    configured = {r.key: r for r in cfg.repos}
    rows = []
    for key in sorted(set(indexed) | set(configured)):
        if org and key[0] != org:
            continue
        state, spec = indexed.get(key), configured.get(key)
        refs = tuple(
            RefStatus(ref=r.ref, commit_id=r.commit_id, behind=_behind(cfg, spec, r.ref, r.commit_id))
            for r in (state.refs if state else ())
        )
        rows.append(
            RepoStatus(
                org=key[0],
                name=key[1],
                url=state.url if state else redact(spec.url),
                configured=spec is not None,
                status=state.status if state else "not indexed",
                error=state.error if state else None,
                indexed_at=state.indexed_at if state else None,
                files=state.files if state else 0,
                files_indexed=state.files_indexed if state else 0,
                chunks=state.chunks if state else 0,
                files_skipped=state.files_skipped if state else {},
                secrets_held_back=state.secrets_held_back if state else 0,
                refs=refs,
            )
        )
    return (manifest.snapshot_id if manifest else None), rows


def vector_status(cfg: Config, serving: Manifest | None = None) -> dict | None:
    """The vectors of the served snapshot (else CURRENT's): their model and tier ("full", or "fast": a static
    model's), and for a fast-tier snapshot that a fast-first run published, its backfill: the model being
    embedded and how many chunks still lack its vectors (as the indexer last recorded, at `updated_at`).
    None when no snapshot can be read."""
    manifest = serving
    if manifest is None:
        try:
            manifest = open_manifest(cfg.data_dir)[1] if current_id(cfg.data_dir) else None
        except SnapshotError:
            return None
    if manifest is None:
        return None
    backfill = None
    if manifest.backfill_model_id:
        record = read_backfill(cfg.data_dir, manifest.snapshot_id) or {}
        backfill = {
            "model": manifest.backfill_model_id,
            "chunks_left": record.get("left", manifest.backlog),
            "of": manifest.backlog,
            "updated_at": record.get("updated_at", manifest.created_at),
        }
    return {
        "model": manifest.model_id,
        "tier": vector_tier(manifest.model_id),
        "dim": manifest.dim,
        "chunks": manifest.chunks,
        "backfill": backfill,
        "search": _search(cfg, manifest),
    }


def _search(cfg: Config, manifest: Manifest) -> str:
    """How vector search runs on the snapshot: exact, or through its approximate index (query.approximate), as
    the files say, so a CLI and a server say the same."""
    codebook = snapshots_dir(cfg.data_dir) / manifest.snapshot_id / CODEBOOK
    if cfg.exact_search or not codebook.exists():
        return "exact" + (" (exact_search = true)" if cfg.exact_search else "")
    fast = is_fast(codebook)
    probed, rescored = approximate.settings(fast)
    codes = "4-bit codes, fast-scan" if fast else "8-bit codes"
    return (
        f"approximate past {approximate.EXACT_ROWS:,} allowed chunks: IVF-PQ ({codes}), "
        f"{probed} lists probed, {rescored} candidates a passage rescored exactly (exact_search = true turns it off)"
    )


def _behind(cfg: Config, spec, ref: str, commit_id: str) -> bool | None:
    """True when the mirror's ref now points elsewhere than the indexed commit; None when unknown."""
    if spec is None:
        return None
    try:
        with open_mirror(mirror_path(cfg.data_dir, spec)) as repo:
            return resolve_ref(repo, ref, spec.name)[1] != commit_id
    except (MirrorError, ScanError, SnapshotError):
        return None


def held_back(cfg: Config, org: str | None = None, repo: str | None = None) -> tuple[str, list[dict]]:
    """(snapshot_id, where chunks were held back as credentials): one row per (repo, ref, path, span) with
    the kind of credential, never its text, so an owner can find and rotate it."""
    path, manifest = open_manifest(cfg.data_dir)
    files = read_graph(path, "files")
    if "held_back" not in files.column_names:  # format 1 did not record spans
        raise SnapshotError(
            f"snapshot {manifest.snapshot_id} predates held-back spans; run 'blobdex index' "
            f"to rebuild it, then ask again"
        )
    rows = []
    for f in files.filter(pc.greater(pc.list_value_length(files["held_back"]), 0)).to_pylist():
        if (org and f["org"] != org) or (repo and f["repo"] != repo):
            continue
        for span in f["held_back"]:
            rows.append(
                {
                    "org": f["org"],
                    "repo": f["repo"],
                    "ref": f["ref"],
                    "commit_id": f["commit_id"],
                    "path": f["path"],
                    **span,
                }
            )
    rows.sort(key=lambda r: (r["org"], r["repo"], r["ref"], r["path"], r["line_start"]))
    return manifest.snapshot_id, rows
