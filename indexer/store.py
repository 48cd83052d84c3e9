"""Snapshots on object storage: a published snapshot uploaded to an S3-compatible bucket, and a replica's data dir
kept at the bucket's newest snapshot.

Layout under s3://BUCKET/PREFIX/:

    objects/<sha256>        a file's bytes, once, however many snapshots hold the file (a part's files, a
                            lexical segment every later snapshot shares)
    snapshots/<id>.json     what a snapshot is made of: each file's path under the data dir -> [sha256, size]
    published/<id>          written last and never overwritten (If-None-Match): the snapshot's objects and listing
                            are all there; the newest id is the live snapshot (ids sort by time)
    publisher               which indexer publishes here (one does; see below)
    replicas/<name>.json    which snapshot each replica serves, as it last said

A publish uploads only the objects the bucket lacks, so a run that changed one repo uploads its new part and
the lexical files that changed. A reader never sees a half-uploaded snapshot: a listing is read only once its
`published/` marker exists, and a marker is written only after every object of its listing. Credentials come
from the environment or the AWS files as boto3 finds them, or from references in blobdex.toml (`env:NAME`,
`file:PATH`); never from the URL.

One indexer publishes to a store (`publisher`, claimed by its first upload): a second one's sweep could delete
an object the first had just found there and reused, and their snapshots, of other repos on other clocks, would
take turns being the newest.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from indexer import credentials
from indexer.addresses import store_url_problem
from indexer.errors import BlobdexError
from indexer.snapshot import (
    CARD,
    MANIFEST,
    PART_INFO,
    PARTS_DIR,
    SNAPSHOTS_DIR,
    Manifest,
    current_id,
    parts_dir,
    snapshots_dir,
)

log = logging.getLogger(__name__)

STORE_DIR = "store"  # in a data dir: the hashes of its files, and a replica's copies of the bucket's objects
HASH_CHUNK = 1024 * 1024
KEY_FIELDS = ("store_access_key", "store_secret_key")  # config fields naming the keys by reference
KEEP_PUBLISHED = 10  # `published/` markers kept in the bucket; older snapshots' listings go with them
# An object no listing names is deleted once it is this old, and a listing no marker follows (an upload that
# died) once it is UNMARKED_LISTING_SECONDS old; ages are the store's own clock (LastModified).
OBJECT_GRACE_SECONDS = 3600
UNMARKED_LISTING_SECONDS = 24 * 3600
SNAPSHOT_ID_RE = re.compile(r"\d{8}T\d{12}Z-[0-9a-f]{6}")  # snapshot.new_snapshot_id
SHA256_RE = re.compile(r"[0-9a-f]{64}")


class StoreError(BlobdexError):
    """The object store cannot be read or written; the message says which store, why, and what to do."""

    code = ""  # the store's error code, where it gave one ("404", "PreconditionFailed", ...)


@dataclass(frozen=True, kw_only=True)
class Transfer:
    """What one upload or sync moved."""

    snapshot_id: str
    files: int  # the snapshot's files
    moved_files: int  # of them, uploaded or downloaded now (the rest the other side had)
    moved_bytes: int
    seconds: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("snapshot_id", "files", "moved_files", "moved_bytes", "seconds")}


class Store:
    """One bucket and prefix of an S3-compatible store."""

    def __init__(self, url: str, endpoint: str = "", access_key: str = "", secret_key: str = "", region: str = ""):
        parsed = urlparse(url)
        if problem := store_url_problem(url):
            raise StoreError(f"the store URL {problem}")
        self.url, self.bucket, self.prefix = url.rstrip("/"), parsed.netloc, parsed.path.strip("/")
        self.endpoint = endpoint
        try:
            import boto3
            from botocore.config import Config as BotoConfig
        except ImportError as exc:
            raise StoreError(f"store {url} needs boto3: pip install 'blobdex[store]' (make install has it)") from exc

        options = {"endpoint_url": endpoint or None, "region_name": region or "us-east-1"}
        if access_key or secret_key:
            options |= {"aws_access_key_id": access_key, "aws_secret_access_key": secret_key}
        retries = BotoConfig(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=60)
        self.client = boto3.client("s3", config=retries, **options)

    def key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def _call(self, what: str, fn, **kw):
        """One request, its failure said in one sentence (a StoreError carrying the store's error code)."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kw)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket",):
                error = StoreError(f"store {self.url}: bucket {self.bucket!r} does not exist; create it first")
            elif code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
                error = StoreError(
                    f"store {self.url} refused to {what} ({code}): check the credentials store_access_key and "
                    f"store_secret_key name (or the AWS_* environment)"
                )
            else:
                error = StoreError(f"cannot {what} in store {self.url}: {exc}")
            error.code = code
            raise error from exc
        except (BotoCoreError, Boto3Error) as exc:
            where = f" at {self.endpoint}" if self.endpoint else ""
            raise StoreError(f"cannot {what} in store {self.url}{where}: {exc}; check store_endpoint") from exc

    # -- objects -----------------------------------------------------------------------------
    def has(self, key: str) -> bool:
        try:
            self._call(f"read {key}", self.client.head_object, Key=key)
            return True
        except StoreError as exc:
            if exc.code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def put(self, key: str, body, once: bool = False) -> None:
        """Write an object; `once`: only if none is there (a marker is never overwritten)."""
        extra = {"IfNoneMatch": "*"} if once else {}
        try:
            self._call(f"write {key}", self.client.put_object, Key=key, Body=body, **extra)
        except StoreError as exc:
            if once and exc.code in ("PreconditionFailed", "412"):
                return  # written already: the same snapshot, published twice
            raise

    def put_file(self, key: str, path: Path) -> None:
        """Upload a file (in parts when it is large: boto3's managed transfer)."""
        self._call(f"write {key}", lambda Bucket, **kw: self.client.upload_file(str(path), Bucket, key))

    def get_file(self, key: str, path: Path) -> None:
        """Download an object into a file, streamed."""
        self._call(f"read {key}", lambda Bucket, **kw: self.client.download_file(Bucket, key, str(path)))

    def get(self, key: str) -> bytes:
        """An object's bytes; the body is read inside the call, so a stream that breaks is a StoreError too."""
        return self._call(f"read {key}", lambda **kw: self.client.get_object(**kw)["Body"].read(), Key=key)

    def names(self, folder: str) -> list[str]:
        """The names of the objects under a folder of the prefix, sorted."""
        return sorted(name for name, _ in self.listed(folder))

    def listed(self, folder: str) -> list[tuple[str, float]]:
        """The objects under a folder of the prefix: (name, last modified as a Unix time)."""
        found, token = [], None
        base = self.key(folder) + "/"
        while True:
            kw = {"Prefix": base, **({"ContinuationToken": token} if token else {})}
            page = self._call(f"list {base}", self.client.list_objects_v2, **kw)
            found += [(o["Key"][len(base) :], o["LastModified"].timestamp()) for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return found
            token = page["NextContinuationToken"]

    def delete(self, key: str) -> None:
        self._call(f"delete {key}", self.client.delete_object, Key=key)

    # -- snapshots ---------------------------------------------------------------------------
    def newest(self) -> str | None:
        """The id of the newest snapshot whose upload finished (None: the bucket has none). A marker whose name
        is not a snapshot id is the bucket's word, not ours: refused before any path is made of it."""
        ids = self.names("published")
        if ids and not SNAPSHOT_ID_RE.fullmatch(ids[-1]):
            raise StoreError(f"store {self.url} marks {ids[-1]!r} published, which is not a snapshot id; remove it")
        return ids[-1] if ids else None

    def report_replica(self, name: str, serving: str | None) -> None:
        """A replica says which snapshot it serves (replicas/<name>.json, rewritten at every poll)."""
        body = {"replica": name, "serving": serving, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.put(self.key("replicas", f"{name}.json"), json.dumps(body).encode())

    def replicas(self) -> list[dict]:
        """What each replica said last: its name, the snapshot it serves, when."""
        said = []
        for name in self.names("replicas"):
            try:
                entry = json.loads(self.get(self.key("replicas", name)))
                said.append({"replica": str(entry["replica"]), "serving": entry.get("serving"), "at": entry.get("at")})
            except (ValueError, TypeError, KeyError):  # written by someone else than a replica: said as such
                said.append({"replica": name.removesuffix(".json"), "serving": None, "at": None, "unreadable": True})
        return said


def store_for(cfg, url: str | None = None) -> Store:
    """The store a command names (`--store`) or the config does, its keys read from their references now."""
    url = url or cfg.store
    if not url:
        raise StoreError('no store: pass --store s3://BUCKET/PREFIX or set store = "s3://..." in blobdex.toml')
    if problem := store_url_problem(url):  # before any message names the URL
        raise StoreError(f"the store URL {problem}")
    try:
        keys = [credentials.resolve(getattr(cfg, k), k) if getattr(cfg, k) else "" for k in KEY_FIELDS]
    except credentials.CredentialError as exc:
        raise StoreError(f"store {url}: {exc}") from exc
    return Store(url, cfg.store_endpoint, *keys, region=cfg.store_region)


def snapshot_files(data_dir: Path, snapshot_id: str) -> list[str]:
    """The files a snapshot is made of, by path under the data dir: its own directory and its parts'."""
    snap = snapshots_dir(data_dir) / snapshot_id
    manifest = Manifest.from_json((snap / MANIFEST).read_text(encoding="utf-8"))
    if manifest.format_version < 3:
        raise StoreError(f"snapshot {snapshot_id} is of format {manifest.format_version}; run 'blobdex index --full'")
    roots = [snap] + [parts_dir(data_dir) / p for r in manifest.repos for p in (*r.parts, *r.history)]
    files = []
    for root in dict.fromkeys(roots):
        files += [p.relative_to(data_dir).as_posix() for p in sorted(root.rglob("*")) if p.is_file()]
    return files


def _hashes(data_dir: Path, files: list[str]) -> dict[str, tuple[str, int]]:
    """Each file's sha256 and size; a file seen before at the same inode, size and mtime is not read again (a
    part's files never change, and a lexical segment is the same inode in every snapshot that links it)."""
    cache_path = data_dir / STORE_DIR / "hashes.json"
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    out, fresh = {}, {}
    for rel in files:
        st = (data_dir / rel).stat()
        stamp = f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
        sha = cache.get(stamp) or _sha256(data_dir / rel)
        fresh[stamp] = sha
        out[rel] = (sha, st.st_size)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fresh), encoding="utf-8")
    os.replace(tmp, cache_path)
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def upload(store: Store, data_dir: Path, snapshot_id: str) -> Transfer:
    """Upload a published snapshot: its listing (so no sweep deletes an object it names, one the bucket had
    included), then the objects the bucket lacks, then its marker; then forget what is past keeping. Refused
    when another indexer publishes to the store, or when the snapshot is older than the store's newest."""
    started = time.monotonic()
    _claim(store, data_dir)
    newest = store.newest()
    if newest is not None and snapshot_id < newest:
        raise StoreError(
            f"snapshot {snapshot_id} is older than {newest}, the newest in store {store.url}, so replicas would "
            f"never serve it; this machine's clock is behind the one that published {newest}: set it right"
        )
    files = snapshot_files(data_dir, snapshot_id)
    hashes = _hashes(data_dir, files)
    listing = {rel: [sha, size] for rel, (sha, size) in sorted(hashes.items())}
    store.put(store.key("snapshots", f"{snapshot_id}.json"), json.dumps(listing).encode())
    moved = moved_bytes = 0
    for sha, (rel, size) in {sha: (rel, size) for rel, (sha, size) in hashes.items()}.items():
        key = store.key("objects", sha)
        if store.has(key):
            continue
        store.put_file(key, data_dir / rel)
        moved, moved_bytes = moved + 1, moved_bytes + size
    store.put(store.key("published", snapshot_id), snapshot_id.encode(), once=True)
    try:
        _forget_old(store)
    except StoreError as exc:  # the snapshot is up; what failed is tidying, which the next upload does again
        log.warning("store %s: old snapshots not forgotten this time: %s", store.url, exc)
    return Transfer(
        snapshot_id=snapshot_id,
        files=len(files),
        moved_files=moved,
        moved_bytes=moved_bytes,
        seconds=round(time.monotonic() - started, 3),
    )


def _claim(store: Store, data_dir: Path) -> None:
    """Make sure this data dir is the store's one publisher: the first upload claims the store (a write that
    never overwrites), later ones check the claim."""
    mine_path = data_dir / STORE_DIR / "publisher"
    try:
        mine = mine_path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        mine = f"{socket.gethostname()}:{secrets.token_hex(8)}"
        mine_path.parent.mkdir(parents=True, exist_ok=True)
        mine_path.write_text(mine + "\n", encoding="utf-8")
    key = store.key("publisher")
    store.put(key, mine.encode(), once=True)
    theirs = store.get(key).decode("utf-8", "replace").strip()
    if theirs != mine:
        raise StoreError(
            f"store {store.url} is published to by another indexer ({theirs[:80]!r}; this one is {mine!r}), and "
            f"one indexer publishes to a store: give this one another prefix, or delete {key} in the bucket to "
            f"hand the store over to it"
        )


def _forget_old(store: Store) -> None:
    """Markers and listings of all but the newest KEEP_PUBLISHED snapshots and listings no marker followed for a
    day, then the objects no listing left names (a file the kept snapshots share stays): the bucket holds what
    ten snapshots need, not every run's. Ages are the store's clock: "now" is the newest marker's time."""
    markers = store.listed("published")
    if not markers:
        return
    now = max(modified for _, modified in markers)
    marked = sorted(name for name, _ in markers)
    old = marked[:-KEEP_PUBLISHED]
    for snapshot_id in old:
        store.delete(store.key("published", snapshot_id))
        store.delete(store.key("snapshots", f"{snapshot_id}.json"))
    kept, dropped = set(marked[-KEEP_PUBLISHED:]), bool(old)
    named = set()
    for listing, modified in store.listed("snapshots"):
        snapshot_id = listing.removesuffix(".json")
        if snapshot_id not in kept and modified < now - UNMARKED_LISTING_SECONDS:  # an upload that died
            store.delete(store.key("snapshots", listing))
            dropped = True
            continue
        try:  # listed without a marker and younger: an upload in flight elsewhere, its objects kept
            named |= {entry[0] for entry in json.loads(store.get(store.key("snapshots", listing))).values()}
        except (ValueError, TypeError, AttributeError, IndexError, KeyError):
            log.warning("store %s: listing %s is not readable; no object is deleted this time", store.url, listing)
            return
    if not dropped:
        return
    for sha, modified in store.listed("objects"):
        if sha not in named and modified <= now - OBJECT_GRACE_SECONDS:
            store.delete(store.key("objects", sha))


def _listing(store: Store, snapshot_id: str) -> dict[str, tuple[str, int]]:
    """A snapshot's listing, checked before anything is downloaded or linked (it is the bucket's word, not
    ours): every path inside a snapshot or a part, every object a sha256, every size a whole number."""
    try:
        raw = json.loads(store.get(store.key("snapshots", f"{snapshot_id}.json")))
    except ValueError as exc:
        raise StoreError(f"snapshot {snapshot_id} in store {store.url} has a listing that is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise StoreError(f"snapshot {snapshot_id} in store {store.url} has a listing that is not an object")
    out = {}
    where = f"snapshot {snapshot_id} in store {store.url}"
    for rel, entry in raw.items():
        parts = Path(rel).parts
        inside = len(parts) >= 3 and ".." not in parts and SNAPSHOT_ID_RE.fullmatch(parts[1])  # parts share ids' form
        if not inside or not (parts[0] == PARTS_DIR or (parts[0] == SNAPSHOTS_DIR and parts[1] == snapshot_id)):
            raise StoreError(f"{where} lists {rel!r}, outside the snapshot and its parts")
        ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
        if not ok or not SHA256_RE.fullmatch(entry[0]) or not isinstance(entry[1], int) or entry[1] < 0:
            raise StoreError(f"{where} lists {rel!r} as {json.dumps(entry)[:80]}, not [sha256, size]")
        out[rel] = (entry[0], entry[1])
    return out


def _selected(store: Store, listing: dict[str, tuple[str, int]], snapshot_id: str, select) -> dict:
    """A shard's share of a snapshot's listing: the snapshot's own files (its manifest, graph and whole lexical
    index), the chunk parts of the repos `select` picks, and of the others' parts only part.json (a shard numbers
    their rows without opening them: query.shard) and card.parquet (route_task reads every repo's card)."""
    sha, _ = listing[f"{SNAPSHOTS_DIR}/{snapshot_id}/{MANIFEST}"]
    raw = store.get(store.key("objects", sha))
    if hashlib.sha256(raw).hexdigest() != sha:
        raise StoreError(f"object {sha} of snapshot {snapshot_id} in store {store.url} is damaged; publish it again")
    manifest = Manifest.from_json(raw.decode("utf-8"))
    chosen = select(manifest)
    owned = {p for r in manifest.repos if (r.org, r.name) in chosen for p in r.parts}
    chunk_parts = {p for r in manifest.repos for p in r.parts}

    def wanted(rel: str) -> bool:
        where = Path(rel).parts
        return where[0] != PARTS_DIR or where[1] in owned or (where[1] in chunk_parts and where[2] in (PART_INFO, CARD))

    return {rel: entry for rel, entry in listing.items() if wanted(rel)}


def sync(store: Store, data_dir: Path, keep: int = 2, select=None) -> Transfer | None:
    """Bring a replica's data dir to the bucket's newest snapshot: download the objects it lacks, link its files
    into place (parts and the snapshot renamed in whole, as a publish does), then point CURRENT at it. None when
    the data dir holds it already. `select` (a shard's, query.reader.Select): the repos whose chunk parts are
    downloaded; of the others' only part.json and card.parquet, and no history part (_selected)."""
    newest = store.newest()
    if newest is None or current_id(data_dir) == newest:
        return None
    lock_path = data_dir / STORE_DIR / "sync.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        try:  # one sync per data dir: two would share staging, temporary files and the objects' link counts
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"another process is syncing {str(data_dir)!r} from a store; serve one replica per data dir"
            ) from None
        return _sync(store, data_dir, newest, keep, select)


def _sync(store: Store, data_dir: Path, newest: str, keep: int, select) -> Transfer:
    from indexer.snapshot.publish import point_current, prune

    started = time.monotonic()
    listing = _listing(store, newest)
    if select is not None:
        listing = _selected(store, listing, newest, select)
    for stale in data_dir.glob(".sync-*"):  # a sync that died: its links would keep objects alive
        shutil.rmtree(stale, ignore_errors=True)
    objects = data_dir / STORE_DIR / "objects"
    objects.mkdir(parents=True, exist_ok=True)
    moved = moved_bytes = 0
    for sha, size in {sha: size for sha, size in listing.values()}.items():
        target = objects / sha
        if target.exists():
            continue
        tmp = objects / f".{sha}.tmp"
        store.get_file(store.key("objects", sha), tmp)
        if _sha256(tmp) != sha:
            tmp.unlink()
            raise StoreError(f"object {sha} of snapshot {newest} in store {store.url} is damaged; publish it again")
        os.replace(tmp, target)
        moved, moved_bytes = moved + 1, moved_bytes + size
    staging = data_dir / f".sync-{newest}"
    shutil.rmtree(staging, ignore_errors=True)
    for rel, (sha, _) in listing.items():
        dest = staging / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(objects / sha, dest)
    for part in sorted((staging / PARTS_DIR).iterdir()) if (staging / PARTS_DIR).exists() else []:
        if not (parts_dir(data_dir) / part.name).exists():
            parts_dir(data_dir).mkdir(parents=True, exist_ok=True)
            os.rename(part, parts_dir(data_dir) / part.name)
    snapshots_dir(data_dir).mkdir(parents=True, exist_ok=True)
    if not (snapshots_dir(data_dir) / newest).exists():
        os.rename(staging / SNAPSHOTS_DIR / newest, snapshots_dir(data_dir) / newest)
    shutil.rmtree(staging, ignore_errors=True)
    back = (current_id(data_dir) or "") > newest  # the store's newest was withdrawn: go back to the one before
    point_current(data_dir, newest)
    if not back:  # going back, the withdrawn snapshot stays until the next swap: a request may be reading it
        prune(data_dir, keep)
    for obj in objects.iterdir():  # objects no kept file links any more
        if obj.is_file() and obj.stat().st_nlink == 1:
            obj.unlink()
    return Transfer(
        snapshot_id=newest,
        files=len(listing),
        moved_files=moved,
        moved_bytes=moved_bytes,
        seconds=round(time.monotonic() - started, 3),
    )
