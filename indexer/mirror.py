"""Bare mirrors of configured repos, fetched with dulwich (`git clone --mirror` semantics)."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dulwich.client import HTTPUnauthorized, get_transport_and_path
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.refs import SYMREF, DiskRefsContainer
from dulwich.repo import Repo

from indexer import credentials
from indexer.config import RepoSpec
from indexer.errors import BlobdexError

log = logging.getLogger(__name__)

FETCH_ATTEMPTS = 3
FETCH_BACKOFF_SECONDS = (1.0, 4.0)  # before the 2nd and 3rd attempt
# Every fetch that brings objects adds a pack, and lookups probe packs one by one. Past MAX_PACKS the
# mirror is repacked into one pack. Measured with dulwich 1.2.21 after 100 fetches of 20 changed files:
# 300 files: 101 packs, 1.03 MB -> 1 pack, 0.92 MB in 0.17 s; 5,000 files: 101 packs, 8.8 MB -> 8.7 MB
# (8,935 objects) in 3.1 s, peak memory +95 MiB. dulwich holds every object in memory while it repacks
# (about 11x the pack bytes), so mirrors over MAX_REPACK_BYTES are left to 'git repack' (logged).
MAX_PACKS = 32
MAX_REPACK_BYTES = 64 * 2**20


class MirrorError(BlobdexError):
    """A repo could not be mirrored; the message is one sentence for a person."""


MIRRORS_DIR = "mirrors"  # under the data dir: <org>/<name>.git
# In a mirror: nothing was left by an interrupted write since the last sweep. A fetch deletes it before it writes
# and puts it back once its write is done; a sweep passes over a mirror that has it.
CLEAN = "blobdex-clean"


def mirrors_dir(data_dir: Path, org: str) -> Path:
    return data_dir / MIRRORS_DIR / org


def mirror_path(data_dir: Path, spec: RepoSpec) -> Path:
    return mirror_dir(data_dir, spec.org, spec.name)


def mirror_dir(data_dir: Path, org: str, name: str) -> Path:
    """The one place that says where a repo's bare mirror lives: mirrors/<org>/<name>.git."""
    return mirrors_dir(data_dir, org) / f"{name}.git"


def redact(url: str) -> str:
    """A URL fit for logs and reports: any user:password part is removed."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


SCP_LIKE_RE = re.compile(r"^[\w.-]+@[\w.-]+:")  # git@host:path, an ssh URL without a scheme


def is_local(url: str) -> bool:
    """A local path or a file:// URL (this machine's own disk), not a remote."""
    return url.startswith("file://") or ("://" not in url and not SCP_LIKE_RE.match(url))


def resolve_credential(reference: str) -> str:
    """The secret a repo's credential reference names (indexer.credentials, the one resolver); never stored."""
    try:
        return credentials.resolve(reference)
    except credentials.CredentialError as exc:
        raise MirrorError(str(exc)) from exc


def open_mirror(path: Path) -> Repo:
    try:
        return Repo(str(path))
    except (NotGitRepository, OSError, ValueError) as exc:
        raise MirrorError(
            f"mirror {str(path)!r} is missing or corrupt ({exc}); delete it and run "
            f"'blobdex index' again to re-create it"
        ) from exc


class RefsFirst:
    """A mirror read for its refs (scan.resolve_ref): they come from its ref files, and the repo is opened only
    when an object is read, to peel a commit the last snapshot does not hold. Opening each mirror was 0.15 s of
    every cron run at 923 repos, for refs the fetch had just compared."""

    def __init__(self, path: Path):
        self.path, self.refs, self._repo = path, DiskRefsContainer(str(path)), None

    def __getitem__(self, object_id: bytes):
        if self._repo is None:
            self._repo = open_mirror(self.path)
        return self._repo[object_id]

    def __enter__(self) -> RefsFirst:
        return self

    def __exit__(self, *exc) -> None:
        if self._repo is not None:
            self._repo.close()


def client_for(url: str, **credentials):
    """dulwich's client for `url` with blobdex's one retry policy: urllib3 would retry a connection three more
    times inside each of our attempts (twelve connections for one unreachable URL), so it is told not to;
    redirects are still followed."""
    from urllib3.util.retry import Retry

    client, path = get_transport_and_path(url, **credentials)
    pool = getattr(client, "pool_manager", None)
    if pool is not None:
        pool.connection_pool_kw["retries"] = Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5)
    return client, path


_QUIET = {"fetches": 0, "level": logging.NOTSET}  # fetches under way, and urllib3's level before the first
_QUIET_LOCK = threading.Lock()
_REPACKING = threading.Lock()  # one repack at a time: each reads a mirror's packs into memory


@contextmanager
def quiet_retries():
    """urllib3 logs what it retries as warnings: while talking to a remote, only its errors reach the log. Fetches
    run side by side (indexer/build: FETCH_THREADS), so the first to start quiets it and the last to end restores."""
    pool = logging.getLogger("urllib3.connectionpool")
    with _QUIET_LOCK:
        if not _QUIET["fetches"]:
            _QUIET["level"] = pool.level
            pool.setLevel(logging.ERROR)
        _QUIET["fetches"] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET["fetches"] -= 1
            if not _QUIET["fetches"]:
                pool.setLevel(_QUIET["level"])


def fetch(data_dir: Path, spec: RepoSpec) -> Path:
    """Create or update the bare mirror of `spec`; return its path.

    Refs are replaced wholesale by the remote's (heads, tags, everything but peeled entries)
    only after the pack has been received, so a failed fetch leaves the mirror as it was.
    """
    path = mirror_path(data_dir, spec)
    kwargs = {}
    if spec.credential:
        kwargs["password"] = resolve_credential(spec.credential)
        kwargs["username"] = spec.username or "git"
    url, local = spec.url, None
    if is_local(url):
        local = url[len("file://") :] if url.startswith("file://") else url
        if not Path(local).exists():
            raise MirrorError(
                f"cannot fetch repo {spec.name!r}: local path {local!r} does not exist; "
                f"fix the url with 'blobdex repo add {spec.name} URL'"
            )
        if Path(local).resolve().is_relative_to(data_dir.resolve()):  # another org's mirror, or our own state
            raise MirrorError(
                f"cannot fetch repo {spec.name!r}: local path {local!r} lies inside the data dir, whose mirrors are "
                f"copies blobdex keeps; point its url at the repo's own source"
            )
    if local is not None and _holds_refs_of(path, Path(local)):
        return path
    last: Exception | None = None
    for attempt in range(FETCH_ATTEMPTS):
        if attempt:
            time.sleep(FETCH_BACKOFF_SECONDS[attempt - 1])
        try:
            with quiet_retries(), _writing(path):
                _fetch_once(path, url, kwargs)
                _repack_if_needed(path)
            return path
        except HTTPUnauthorized as exc:
            raise MirrorError(
                f"cannot fetch repo {spec.name!r} from {redact(url)}: the server refused the "
                f"credentials; check the credential reference {spec.credential!r}"
            ) from exc
        except MirrorError:
            raise
        except (NotGitRepository, FileNotFoundError) as exc:
            raise MirrorError(
                f"cannot fetch repo {spec.name!r}: {redact(url)} is not a git repository ({exc})"
            ) from exc
        except KeyError as exc:  # not transient: the source lacks an object its refs need
            missing = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            raise MirrorError(
                f"cannot fetch repo {spec.name!r} from {redact(url)}: the source is missing object "
                f"{missing} (it is incomplete or corrupt); run 'git fsck' there, or fetch from a "
                f"complete copy"
            ) from exc
        except (GitProtocolError, HangupException, OSError, ValueError) as exc:
            last = exc
            log.warning(
                "fetch of %s from %s failed (attempt %d of %d): %s",
                spec.name,
                redact(url),
                attempt + 1,
                FETCH_ATTEMPTS,
                network_reason(exc),
            )
            log.debug("fetch of %s failed", spec.name, exc_info=True)
    raise MirrorError(
        f"cannot fetch repo {spec.name!r} from {redact(url)} after {FETCH_ATTEMPTS} attempts: "
        f"{network_reason(last)}; check the url and the network, then run 'blobdex index' again"
    ) from last


# What a failed connection's text says, in a few words: urllib3's own text runs to ~300 characters of pool and
# retry detail (`HTTPConnectionPool(host=..., port=...): Max retries exceeded with url: ... (Caused by ...)`).
NETWORK_REASONS = (
    ("Name or service not known", "the host name is unknown"),
    ("nodename nor servname", "the host name is unknown"),
    ("Temporary failure in name resolution", "the host name cannot be resolved now"),
    ("Connection refused", "the connection was refused"),
    ("timed out", "the connection timed out"),
    ("Network is unreachable", "the network is unreachable"),
    ("No route to host", "there is no route to the host"),
    ("certificate verify failed", "the server's TLS certificate is not trusted"),
    ("Connection reset", "the connection was reset"),
)


def network_reason(exc: BaseException | None) -> str:
    """Why talking to a remote failed, in a few words; the library's whole text is logged under -v."""
    text = str(exc)
    for needle, words in NETWORK_REASONS:
        if needle in text:
            return words
    if isinstance(exc, HangupException):
        return "the remote hung up"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first[:120]}"


@contextmanager
def _writing(path: Path):
    """A write of a mirror: CLEAN goes before it and comes back only when it is done, so that whatever a killed
    or failed write leaves is swept before the next."""
    (path / CLEAN).unlink(missing_ok=True)
    yield
    (path / CLEAN).touch()


def _holds_refs_of(path: Path, source: Path) -> bool:
    """Whether the mirror already holds every ref of a local source at the same object, and its default branch:
    nothing to fetch. Read from both repos' ref files alone: a fetch through dulwich opens both and looks up
    each ref's object (2 ms a repo, 1.8 s of a cron run over 923 local repos that had not moved). A source git
    reaches some other way (a worktree's `.git` file) is fetched."""
    if (source / ".git").is_dir():
        source = source / ".git"
    if (source / "commondir").exists() or not all(
        (d / "objects").is_dir() and (d / "refs").is_dir() and (d / "HEAD").is_file() for d in (source, path)
    ):
        return False
    try:
        theirs, ours = DiskRefsContainer(str(source)), DiskRefsContainer(str(path))
        head = theirs.read_ref(b"HEAD")
        if not head or not head.startswith(SYMREF) or ours.read_ref(b"HEAD") != head:
            return False
        remote = {n: sha for n, sha in theirs.as_dict().items() if n != b"HEAD"}
        return head[len(SYMREF) :] in remote and remote == {n: s for n, s in ours.as_dict().items() if n != b"HEAD"}
    except (OSError, ValueError, KeyError):  # unreadable refs: the fetch says what is wrong
        return False


def _repack_if_needed(path: Path) -> None:
    with open_mirror(path) as repo:
        packs = repo.object_store.count_pack_files()
        if packs > MAX_PACKS:
            size = sum(p.stat().st_size for p in (path / "objects" / "pack").glob("*.pack"))
            if size > MAX_REPACK_BYTES:
                log.info(
                    "mirror %s has %d packs (%d MB), too large to repack in memory; run "
                    "'git -C %s repack -ad' between index runs",
                    path,
                    packs,
                    size // 2**20,
                    path,
                )
                return
            started = time.monotonic()
            with _REPACKING:
                objects = repo.object_store.repack()
            log.info(
                "repacked mirror %s: %d packs, %d objects, %.1f s", path, packs, objects, time.monotonic() - started
            )


def _fetch_once(path: Path, url: str, kwargs: dict) -> None:
    client, remote_path = client_for(url, **kwargs)
    if path.exists():
        repo = open_mirror(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        repo = Repo.init_bare(str(path), mkdir=True)
    with repo:
        result = client.fetch(remote_path, repo)
        remote = {
            name: sha
            for name, sha in result.refs.items()
            if not name.endswith(b"^{}") and name != b"HEAD" and sha is not None
        }
        held = repo.refs.as_dict()
        for name in held:
            if name != b"HEAD" and name not in remote:
                del repo.refs[name]
        for name, sha in remote.items():
            if held.get(name) != sha:  # dulwich takes a lock file and reads the ref again: thousands of tags
                repo.refs[name] = sha
        head = (result.symrefs or {}).get(b"HEAD")
        if head and head in remote:
            repo.refs.set_symbolic_ref(b"HEAD", head)
        elif remote and b"HEAD" not in repo.refs:
            branches = sorted(n for n in remote if n.startswith(b"refs/heads/"))
            if branches:
                repo.refs.set_symbolic_ref(b"HEAD", branches[0])


def sweep(data_dir: Path, mirrors: list[Path]) -> list[str]:
    """Delete what interrupted fetches left in `mirrors` (git lock files, temporary packs, packs without an
    index) before they are fetched again; call only under the index lock, which every writer of a mirror holds.
    Only the mirrors a run fetches (a push run's one, not the organisation's), and of those only the ones
    without CLEAN: walking and pruning each took 0.35 s of every cron run at 923 mirrors."""
    removed = []
    for mirror in sorted(m for m in mirrors if m.is_dir() and not (m / CLEAN).exists()):
        removed += [str(p.relative_to(data_dir)) for p in _sweep_locks(mirror)]
        objects = mirror / "objects"
        before = {*objects.glob("tmp_pack_*"), *(objects / "pack").glob("*.pack")}
        try:
            with open_mirror(mirror) as repo:
                repo.object_store.prune(grace_period=0)
        except MirrorError:
            continue  # the fetch reports a broken mirror, with advice
        removed += [str(p.relative_to(data_dir)) for p in sorted(before) if not p.exists()]
        (mirror / CLEAN).touch()
    return removed


def _sweep_locks(mirror: Path) -> list[Path]:
    """Delete the `.lock` files a killed writer left in a mirror (dulwich writes every ref, packed-refs, HEAD,
    config, pack index and loose object to `<name>.lock` and renames it over `<name>`): each one makes every
    later write of its file fail with FileLocked, so the repo would stay stale forever. Nothing else is named
    so: git refuses ref names ending in `.lock`, and objects and packs are named by their ids."""
    found = []
    for folder, _, names in os.walk(mirror):
        found += [Path(folder, n) for n in names if n.endswith(".lock")]
    for path in found:
        path.unlink(missing_ok=True)
    return sorted(found)
