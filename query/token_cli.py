"""The `blobdex token` commands (mint, list, revoke): bearer tokens for `blobdex serve --require-token` and the
control API (kept as sha256 in indexer.tokens), and Codebase Index Protocol JWTs (signed with the key
query.surfaces.cip_auth loads)."""

from __future__ import annotations

import click

from indexer.operate.cli import cli_config
from indexer.config import DEFAULT_ORG
from indexer.errors import BlobdexError


@click.group()
def token() -> None:
    """Bearer tokens for 'blobdex serve --require-token' (stored as sha256 only)."""


@token.command("mint")
@click.option("--name", help="Who or what the token is for (blobdex tokens).")
@click.option("--org", default=DEFAULT_ORG, show_default=True, help="The org every request with it runs in.")
@click.option("--jwt", "as_jwt", is_flag=True, help="Mint a Codebase Index Protocol access token (JWT) instead.")
@click.option("--user", help="The JWT's username (with --jwt).")
@click.option("--ttl", default=3600, show_default=True, type=int, help="JWT lifetime in seconds (with --jwt).")
@click.option(
    "--admin",
    is_flag=True,
    help="An operator's token for the control API of 'blobdex webhooks --control', acting in --org only (never a "
    "read token).",
)
@click.option(
    "--global",
    "every_org",
    is_flag=True,
    help="With --admin: the token acts in every org and may add repos by local path.",
)
@click.pass_context
def token_mint(ctx, name, org, as_jwt, user, ttl, admin, every_org) -> None:
    """Print a new token once. blobdex tokens are kept only as sha256; JWTs are signed, not stored."""
    cfg = cli_config(ctx)
    if as_jwt:
        from query.surfaces.cip_auth import load_settings, mint as mint_jwt

        settings = load_settings(cfg)
        if not user:
            raise click.UsageError("--jwt needs --user NAME")
        if not settings.secret:
            raise BlobdexError('no JWT secret: export BLOBDEX_JWT_SECRET, or set jwt_secret = "env:NAME" in the config')
        click.echo(mint_jwt(settings.secret, user, ttl))
        return
    if not name:
        raise click.UsageError("--name is required")
    if every_org and not admin:
        raise click.UsageError("--global is for admin tokens: pass --admin --global (a read token acts in one org)")
    from indexer.tokens import ADMIN, READ, mint

    click.echo(mint(cfg.data_dir, name, org, ADMIN if admin else READ, every_org))


@token.command("list")
@click.pass_context
def token_list(ctx) -> None:
    """The minted tokens: id, org, name, when (never the token itself; only its sha256 is stored)."""
    from indexer.tokens import listing

    for row in listing(cli_config(ctx).data_dir):
        org = "every org" if row.get("every_org") else row["org"]
        click.echo(f"{row['id']}  {row.get('scope', 'read'):5}  {org}  {row['name']}  {row['created_at']}")


@token.command("revoke")
@click.argument("token_id")
@click.pass_context
def token_revoke(ctx, token_id) -> None:
    """Revoke a token by the id 'token list' shows; requests carrying it get 401 from then on."""
    from indexer.tokens import revoke

    if not revoke(cli_config(ctx).data_dir, token_id):
        raise BlobdexError(f"no token with id {token_id!r}; 'blobdex token list' shows the ids")
    click.echo(f"revoked {token_id}")
