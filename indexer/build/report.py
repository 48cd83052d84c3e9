"""The run report: what one `blobdex index` did, as text for people and JSON for CI."""

from __future__ import annotations

import json
import resource
from collections import Counter
from dataclasses import asdict, dataclass, field


def peak_rss_mib() -> int:
    """This process's peak resident memory: the kernel's VmHWM, which a new program starts afresh. ru_maxrss keeps
    the mark of the process that spawned it (a run the 10M bench started reported the bench's 9.6 GiB)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # no /proc: the kernel's own count


STAGES = ("mirror", "scan", "history", "chunk", "extract", "resolve", "embed", "write", "publish")


@dataclass(kw_only=True)
class RepoReport:
    """One repo's part of the report. Not frozen, like Report: the run fills it in stage by stage."""

    org: str
    name: str
    url: str
    status: str  # ok | stale
    error: str | None = None
    refs: list[dict] = field(default_factory=list)  # {ref, commit_id}
    files: int = 0
    files_indexed: int = 0
    chunks: int = 0


@dataclass(kw_only=True)
class Report:
    snapshot_id: str | None = None
    published: bool = False
    unchanged: bool = False
    previous_snapshot_id: str | None = None
    model: str = ""
    repos: list[RepoReport] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    blobs: int = 0
    blobs_new: int = 0
    chunks: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    files: int = 0
    files_indexed: int = 0
    files_skipped: Counter = field(default_factory=Counter)
    secrets_held_back: int = 0
    parse_fallbacks: int = 0
    syntax_errors: int = 0
    graph: dict[str, int] = field(default_factory=dict)  # rows per graph table, edges included
    calls_resolved_again: int = 0  # stored calls of paths the run kept, resolved again: those its changes touch
    repos_calls_read: int = 0  # unchanged repos whose stored calls the run read: those its changes may reach
    commits: int = 0  # commits the published snapshot's history holds, and those this run read from mirrors
    commits_read: int = 0
    notes: list[str] = field(default_factory=list)  # one sentence each: what the run repaired, or why it refused
    # Every snapshot this run published, in order: {snapshot_id, model, tier, seconds since the run began}
    # (a fast-first run publishes the static tier, then the model's own); and the chunks still lacking the
    # model's vectors when it ended (0 unless a backfill stopped early).
    snapshots: list[dict] = field(default_factory=list)
    backlog: int = 0
    # The precise tier (config `scip`): per "org/repo" a run wrote, how its call resolution agreed with the SCIP
    # indexers' (indexer.calls.scip.Agreement), which ran and for how long.
    scip: dict[str, dict] = field(default_factory=dict)
    # Object storage (config `store`): what the upload of the live snapshot moved (indexer.store.Transfer), or
    # why it failed (the run then fails: the snapshot serves here, not from the bucket).
    store: dict | None = None
    store_error: str | None = None
    # Distributed indexing (config `cluster`): the cluster's address and workers and the work it did (blobs
    # prepared, texts embedded); None when the run did all its work here (indexer.build.cluster.Cluster.summary).
    cluster: dict | None = None
    # Repos ("org/name") not yet in any snapshot that this run left for its next batch (config `run_files`).
    deferred: list[str] = field(default_factory=list)

    def after(self, earlier: "Report") -> None:
        """Take in what the batches before this one did (one report for the run): every snapshot they published,
        their notes, seconds and the work they counted; the totals stay this batch's, the last snapshot's."""
        self.previous_snapshot_id = earlier.previous_snapshot_id
        self.snapshots[:0] = earlier.snapshots
        self.notes[:0] = earlier.notes
        for stage, seconds in earlier.seconds.items():
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        for counted in ("blobs", "blobs_new", "chunks_embedded", "commits_read", "calls_resolved_again"):
            setattr(self, counted, getattr(self, counted) + getattr(earlier, counted))

    @property
    def failed(self) -> bool:
        return any(r.status != "ok" for r in self.repos) or self.store_error is not None

    def to_dict(self) -> dict:
        return {
            "snapshot_id": self.snapshot_id,
            "published": self.published,
            "unchanged": self.unchanged,
            "previous_snapshot_id": self.previous_snapshot_id,
            "model": self.model,
            "ok": not self.failed,
            "totals": {
                "repos": len(self.repos),
                "repos_failed": sum(r.status != "ok" for r in self.repos),
                "blobs": self.blobs,
                "blobs_new": self.blobs_new,
                "blobs_reused": self.blobs - self.blobs_new,
                "chunks": self.chunks,
                "chunks_embedded": self.chunks_embedded,
                "chunks_reused": self.chunks_reused,
                "files": self.files,
                "files_indexed": self.files_indexed,
                "files_skipped": dict(sorted(self.files_skipped.items())),
                "secrets_held_back": self.secrets_held_back,
                "parse_fallbacks": self.parse_fallbacks,
                "syntax_errors": self.syntax_errors,
                "graph": self.graph,
                "calls_resolved_again": self.calls_resolved_again,
                "repos_calls_read": self.repos_calls_read,
                "commits": self.commits,
                "commits_read": self.commits_read,
            },
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "peak_rss_mib": peak_rss_mib(),
            "repos": [asdict(r) for r in self.repos],
            "snapshots": self.snapshots,
            "backlog": self.backlog,
            "scip": self.scip,
            "store": self.store,
            "store_error": self.store_error,
            "cluster": self.cluster,
            "deferred": self.deferred,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        d = self.to_dict()
        t = d["totals"]
        lines = []
        for r in self.repos:
            refs = ", ".join(f"{x['ref']}@{x['commit_id'][:12]}" for x in r.refs) or "-"
            state = "ok" if r.status == "ok" else f"STALE: {r.error}"
            lines.append(f"  {r.org}/{r.name}  {refs}  files {r.files_indexed}/{r.files}  chunks {r.chunks}  {state}")
        if self.unchanged:
            head = f"unchanged: every repo is at the commit snapshot {self.previous_snapshot_id} already holds"
        elif len(self.snapshots) > 1:  # fast first: say when search began, and when the model's tier took over
            head = "published " + ", then ".join(
                f"snapshot {x['snapshot_id']} ({x['tier']} vectors, after {x['seconds']:.1f}s)" for x in self.snapshots
            )
        elif self.published:
            head = f"published snapshot {self.snapshot_id}"
            if self.backlog:
                head += f" (fast vectors; {self.backlog} chunks still to embed with the model)"
        elif self.backlog:
            head = f"snapshot {self.snapshot_id} keeps serving (fast vectors; {self.backlog} chunks still to embed)"
        else:
            head = "nothing published"
        skipped = ", ".join(f"{k} {v}" for k, v in t["files_skipped"].items()) or "none"
        secs = ", ".join(f"{k} {v:.1f}s" for k, v in d["seconds"].items()) + f"; peak memory {d['peak_rss_mib']} MiB"
        lines += [head, *(f"  note: {n}" for n in self.notes)]
        lines += [
            f"  blobs {t['blobs']} ({t['blobs_new']} new, {t['blobs_reused']} reused)",
            f"  chunks {t['chunks']} ({t['chunks_embedded']} embedded, {t['chunks_reused']} from cache"
            + (f", {self.backlog} still to embed)" if self.backlog else ")"),
            f"  files {t['files']}: {t['files_indexed']} indexed; skipped: {skipped}",
            f"  secrets held back {t['secrets_held_back']}, parse fallbacks {t['parse_fallbacks']}, "
            f"files with syntax errors {t['syntax_errors']}",
            "  graph: " + (", ".join(f"{k} {v}" for k, v in t["graph"].items()) or "-"),
            f"  history: {t['commits']} commits ({t['commits_read']} read this run)",
            f"  seconds: {secs}",
        ]
        if self.cluster:
            c = self.cluster
            lines.append(
                f"  cluster {c['address']}, {c['workers']} workers: {c['blobs']} blobs prepared, {c['texts']} texts "
                "embedded there"
            )
        return "\n".join(lines)
