"""Every command has help and is named in the README (as sqlite-utils tests its docs)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from query.cli import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _commands(group: click.Group, prefix: str = ""):
    for name, command in sorted(group.commands.items()):
        full = f"{prefix} {name}".strip()
        yield full, command
        if isinstance(command, click.Group):
            yield from _commands(command, full)


@pytest.mark.parametrize("name, command", list(_commands(cli)), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_has_help_and_is_in_the_readme(name, command):
    assert (command.help or "").strip(), f"'blobdex {name}' has no help text"
    assert f"blobdex {name}" in README, f"the README never names 'blobdex {name}'"
