"""Every command has help and is named in the documentation: the README or a page of docs/ (as sqlite-utils' tests
read its docs/cli.rst)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from query.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED = "\n".join(p.read_text(encoding="utf-8") for p in DOCUMENTS)


def _commands(group: click.Group, prefix: str = ""):
    for name, command in sorted(group.commands.items()):
        full = f"{prefix} {name}".strip()
        yield full, command
        if isinstance(command, click.Group):
            yield from _commands(command, full)


def test_the_documentation_is_the_readme_and_the_docs_pages():
    """The pages exist where the check below reads them: an empty docs/ would let every command go unnamed there."""
    assert len(DOCUMENTS) > 5 and all(p.stat().st_size for p in DOCUMENTS)


@pytest.mark.parametrize("name, command", list(_commands(cli)), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_has_help_and_is_documented(name, command):
    assert (command.help or "").strip(), f"'blobdex {name}' has no help text"
    assert f"blobdex {name}" in DOCUMENTED, f"neither README.md nor docs/*.md names 'blobdex {name}'"
