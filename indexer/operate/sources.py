"""Checking a repo's source before it is configured (`blobdex repo add`, the control API): a local path made
absolute, a URL with a secret in it refused, and the refs asked of the source itself (git ls-remote), so a wrong
URL or ref is refused while the person who made it is watching, not at the next scheduled run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from indexer.config import ConfigError, RepoSpec


def checked(spec: RepoSpec, check: bool = True, skip: str = "", data_dir: Path | None = None) -> RepoSpec:
    """`spec` as it is stored: its url checked (source; never inside `data_dir`), its refs named as the source has
    them (remote_refs), or, without `check`, as given (HEAD dropped: the source's default branch is found at fetch
    time). `skip` says how to add it unchecked."""
    spec = replace(spec, url=source(spec.name, spec.url, data_dir))
    if check:
        return replace(spec, refs=remote_refs(spec, skip))
    if "HEAD" in spec.refs and spec.refs != ("HEAD",):
        raise ConfigError(
            f"repo {spec.name!r}: ref HEAD with other refs needs the check to learn which branch HEAD is; name that "
            f"branch instead"
        )
    return replace(spec, refs=tuple(r for r in spec.refs if r != "HEAD"))


def source(name: str, url: str, data_dir: Path | None = None) -> str:
    """`url` made absolute if it is a local path; refused if it carries a password or token, or if it lies inside
    `data_dir` (a mirror there is another org's copy, or blobdex's own state)."""
    from indexer.mirror import is_local, redact

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"repo {name!r}: the url cannot be parsed ({exc}); give a URL or a local path") from exc
    if parts.password:
        user = f" --username {parts.username}" if parts.username and parts.username != "git" else ""
        raise ConfigError(
            f"repo {name!r}: the url carries a password or token, which would be stored in plain "
            f"text; keep the secret in an environment variable and run 'blobdex repo add {name} "
            f"{redact(url)} --credential env:VAR{user}'"
        )
    if not is_local(url):
        return url
    local = Path(url.removeprefix("file://")).expanduser()
    if not local.exists():
        raise ConfigError(f"local repo path {url!r} does not exist; give an existing path or a URL")
    inside = data_dir is not None and local.resolve().is_relative_to(Path(data_dir).resolve())
    if inside:
        raise ConfigError(
            f"repo {name!r}: {url!r} lies inside blobdex's data dir ({str(data_dir)!r}), whose mirrors are copies "
            f"blobdex keeps for its repos; add the repo's own source instead"
        )
    return url if url.startswith("file://") else str(local.resolve())


def remote_refs(spec: RepoSpec, skip: str) -> tuple[str, ...]:
    """The refs to store for `spec`, after asking its source which refs it has (git ls-remote).

    A wrong URL or ref is refused here, when the person who made it is watching, rather than at the
    next scheduled index run. HEAD (or no ref) becomes the name of the source's default branch.
    """
    from dulwich.client import HTTPUnauthorized
    from dulwich.errors import GitProtocolError, HangupException, NotGitRepository

    from indexer.mirror import MirrorError, client_for, network_reason, quiet_retries, redact, resolve_credential
    from indexer.scan import HEX40_RE

    where = f"cannot add repo {spec.name!r} from {redact(spec.url)}"
    try:
        kwargs = {}
        if spec.credential:
            kwargs = {"username": spec.username or "git", "password": resolve_credential(spec.credential)}
        client, path = client_for(spec.url, **kwargs)
        with quiet_retries():
            result = client.get_refs(path)
    except MirrorError as exc:
        raise ConfigError(f"{where}: {exc}, {skip}") from exc
    except HTTPUnauthorized as exc:
        raise ConfigError(
            f"{where}: the server refused the credentials; check the credential reference {spec.credential!r}, {skip}"
        ) from exc
    except NotGitRepository as exc:
        raise ConfigError(
            f"{where}: it is not a git repository; give a clone, a bare repo or a git URL, {skip}"
        ) from exc
    except (GitProtocolError, HangupException, OSError, ValueError) as exc:
        raise ConfigError(
            f"{where}: the source cannot be reached ({network_reason(exc)}); check the url and the network, {skip}"
        ) from exc
    names = {n.decode("utf-8", "replace") for n in result.refs if n != b"HEAD" and not n.endswith(b"^{}")}
    branches = sorted(n[len("refs/heads/") :] for n in names if n.startswith("refs/heads/"))
    tags = sorted(n[len("refs/tags/") :] for n in names if n.startswith("refs/tags/"))
    known = f"branches: {', '.join(branches[:10]) or 'none'}; tags: {', '.join(tags[:10]) or 'none'}"
    refs = []
    for ref in spec.refs or ("HEAD",):
        if ref == "HEAD":
            head = (result.symrefs or {}).get(b"HEAD", b"").decode("utf-8", "replace")
            if head in names:
                ref = head[len("refs/heads/") :] if head.startswith("refs/heads/") else head
            elif len(branches) == 1:  # `git init --bare` names master; a push of main leaves HEAD dangling
                ref = branches[0]
            else:
                raise ConfigError(
                    f"{where}: its HEAD names no existing branch, so there is no default branch "
                    f"to index ({known}); name one with --ref BRANCH"
                )
        # A commit id cannot be listed remotely: the index run checks that it exists.
        elif not HEX40_RE.match(ref) and not {ref, f"refs/heads/{ref}", f"refs/tags/{ref}"} & names:
            raise ConfigError(
                f"{where}: it has no ref {ref!r} ({known}); name an existing branch, tag or "
                f"commit id with --ref, {skip}"
            )
        if ref not in refs:
            refs.append(ref)
    return tuple(refs)
