"""The bench's codebase: a source tree (default: the networkx package the torch extra installs) turned into a git
repo with one commit, for every bench script to index."""

from __future__ import annotations

from pathlib import Path


def default_source() -> Path:
    import networkx

    return Path(networkx.__file__).parent


def make_repo(source: Path, dest: Path) -> None:
    """A git repo whose one commit holds the source tree (bytecode caches left out)."""
    from dulwich.repo import Repo

    from tests import gitrepo

    files = {
        f"{source.name}/{p.relative_to(source).as_posix()}": p.read_bytes()
        for p in sorted(source.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    repo: Repo = gitrepo.init(dest)
    gitrepo.commit(repo, files, message="import source")
