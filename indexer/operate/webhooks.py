"""Push webhooks: a delivery from GitHub (X-Hub-Signature-256), GitLab (X-Gitlab-Token) or Gitea / Forgejo
(X-Gitea-Signature, X-Forgejo-Signature) is verified against the secret `webhook_secret` names, refused when its
delivery id was seen before, matched to the configured repos by URL and ref, and queued (indexer/operate/queue.py).

The order matters: the body is capped while it arrives, the signature is checked before anything of the body is
parsed, and the delivery id is remembered only once the signature holds (a forger cannot fill the replay table).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from urllib.parse import urlsplit

from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from indexer import credentials
from indexer.config import Config, RepoSpec
from indexer.operate.http import HookError, capped_body, error
from indexer.operate.queue import Queue

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 5 * 1024 * 1024  # GitHub sends up to 25 MB; a push of 20 commits is a few hundred KB
DELIVERIES = Counter(
    "blobdex_webhook_deliveries", "Webhook deliveries by provider and outcome", ["provider", "outcome"]
)
# provider -> (the event header, the delivery id headers, how the body is authenticated)
PROVIDERS = {
    "github": ("x-github-event", ("x-github-delivery",), "x-hub-signature-256"),
    "gitlab": ("x-gitlab-event", ("x-gitlab-event-uuid", "idempotency-key"), "x-gitlab-token"),
    "forgejo": ("x-forgejo-event", ("x-forgejo-delivery",), "x-forgejo-signature"),
    "gitea": ("x-gitea-event", ("x-gitea-delivery",), "x-gitea-signature"),
}
PUSH_EVENTS = {"push", "push hook", "tag push hook"}  # GitHub and Gitea say push; GitLab "Push Hook", "Tag Push Hook"
URL_KEYS = ("clone_url", "ssh_url", "git_url", "html_url", "git_http_url", "git_ssh_url", "web_url", "http_url")


def provider_of(headers) -> str:
    """Which forge sent the delivery, by its event header (Forgejo sends Gitea's headers too, so it goes first)."""
    for name, (event, _, _) in PROVIDERS.items():
        if event in headers:
            return name
    raise HookError(400, "no X-GitHub-Event, X-Gitlab-Event or X-Gitea-Event header: not a webhook", "not_a_webhook")


def check_signature(provider: str, headers, body: bytes, secret: str) -> None:
    """Raise HookError 401 unless the delivery carries the secret (GitLab) or an HMAC-SHA256 of the body made
    with it (the others); compared in constant time."""
    _, _, header = PROVIDERS[provider]
    given = headers.get(header, "")
    if provider == "gitlab":
        expected = secret
    else:
        digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
        expected = f"sha256={digest}" if provider == "github" else digest
    if not given or not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        raise HookError(401, f"the delivery's {header} does not match the secret webhook_secret names", "bad_signature")


def delivery_id(provider: str, headers, body: bytes) -> str:
    """The provider's id of this delivery (a redelivery keeps it); a body's digest when the provider sent none."""
    _, ids, _ = PROVIDERS[provider]
    given = next((headers[h] for h in ids if headers.get(h)), None)
    return f"{provider}:{given or hashlib.sha256(body).hexdigest()}"


def body_id(provider: str, body: bytes) -> str:
    """What the signature covers: the body, by its digest (two pushes never share one: each names its commits)."""
    return f"{provider}:body:{hashlib.sha256(body).hexdigest()}"


def normalized(url: str) -> str:
    """A repo URL as host/path, lower-case, without scheme, user, port, `.git` or trailing slash: the same repo
    named over https, ssh or in a browser compares equal."""
    url = url.strip()
    scp = re.match(r"^[\w.-]+@([\w.-]+):(?!\d+/)(.+)$", url)  # git@host:owner/repo
    if scp:
        host, path = scp.group(1), scp.group(2)
    else:
        parts = urlsplit(url if "://" in url else f"//{url}")
        host, path = parts.hostname or "", parts.path
    path = path.strip("/")
    path = path[: -len(".git")] if path.endswith(".git") else path
    return f"{host}/{path}".lower()


def pushed(payload: dict) -> tuple[set[str], str | None, str | None]:
    """(the repo's URLs, the pushed ref, the default branch) of a push payload of any of the forges."""
    urls = set()
    for key in ("repository", "project"):
        section = payload.get(key)
        if isinstance(section, dict):
            urls |= {normalized(v) for k, v in section.items() if k in URL_KEYS and isinstance(v, str) and v}
    ref = payload.get("ref") if isinstance(payload.get("ref"), str) else None
    default = next(
        (s.get("default_branch") for s in (payload.get("repository"), payload.get("project")) if isinstance(s, dict)),
        None,
    )
    return urls, ref, default if isinstance(default, str) else None


def tracks(spec: RepoSpec, ref: str | None, default: str | None) -> bool:
    """Whether a push to `ref` moves what `spec` indexes (its refs, or its default branch); an unknown ref does."""
    if ref is None:
        return True
    if not spec.refs:
        return default is None or ref == f"refs/heads/{default}"
    return any(ref in (r, f"refs/heads/{r}", f"refs/tags/{r}") for r in spec.refs)


def matching(cfg: Config, payload: dict) -> list[RepoSpec]:
    urls, ref, default = pushed(payload)
    return [r for r in cfg.repos if normalized(r.url) in urls and tracks(r, ref, default)]


async def hooks(request: Request) -> Response:
    provider = "unknown"
    try:
        provider = provider_of(request.headers)
        body = await capped_body(request, MAX_BODY_BYTES)
        cfg: Config = request.app.state.config()
        secret = _secret(cfg)
        check_signature(provider, request.headers, body, secret)
        with Queue(cfg.data_dir) as queue:
            # The delivery id is a header the signature does not cover: a captured delivery resent under a new id
            # is the same signed body, so the body's digest is remembered too (both, whichever matched).
            seen = [queue.seen(key) for key in (delivery_id(provider, request.headers, body), body_id(provider, body))]
            if any(seen):
                raise HookError(409, "this delivery was received before; it is not queued again", "replay")
            outcome, answer = _queue(provider, request.headers, body, cfg, queue)
    except HookError as exc:
        DELIVERIES.labels(provider, exc.code).inc()
        log.warning("refused a %s delivery: %s", provider, exc)
        return error(exc.status, exc.code, str(exc))
    DELIVERIES.labels(provider, outcome).inc()
    return JSONResponse(answer, status_code=202 if outcome == "queued" else 200)


def _secret(cfg: Config) -> str:
    if not cfg.webhook_secret:
        raise HookError(503, "no webhook_secret is configured: set one in blobdex.toml", "no_secret")
    try:
        return credentials.resolve(cfg.webhook_secret, "webhook_secret")
    except credentials.CredentialError as exc:
        raise HookError(503, str(exc), "no_secret") from exc


def _queue(provider: str, headers, body: bytes, cfg: Config, queue: Queue) -> tuple[str, dict]:
    event = headers[PROVIDERS[provider][0]].lower()
    if event not in PUSH_EVENTS:
        return "ignored", {"ignored": f"a {event!r} event is not a push"}
    try:
        payload = json.loads(body)
    except RecursionError:  # a signed body can still nest a million brackets deep
        raise HookError(400, "the delivery's body nests deeper than any push does", "bad_json") from None
    except ValueError as exc:
        raise HookError(400, f"the delivery's body is not JSON ({exc})", "bad_json") from exc
    if not isinstance(payload, dict):
        raise HookError(400, "the delivery's body is not a JSON object", "bad_json")
    repos = matching(cfg, payload)
    if not repos:
        return "unmatched", {"ignored": "no configured repo has this URL and tracks this ref"}
    queued, coalesced = [], []
    for spec in repos:
        (queued if queue.enqueue(spec.org, spec.name) else coalesced).append(f"{spec.org}/{spec.name}")
    log.info("queued %s (%s push)", ", ".join(queued + coalesced), provider)
    return "queued", {"queued": queued, "coalesced": coalesced}
