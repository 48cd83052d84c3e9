"""The base of every error a person should see as one sentence (what, which, why, what to do), and the words each
surface uses for what to do next.

Each subclass lives beside the code that raises it (dulwich's advice); this is the tree, with the HTTP status a
surface answers for it (`status`; a Refused carries its own, given where it is raised) and where it lives
(tests/test_errors.py checks that the classes form exactly this tree):

    BlobdexError                      400  indexer/errors.py
    + BrowseError                     404  query/browse.py
    + ChunkNotFound                   404  query/service.py
    + ClusterError                    400  indexer/ray_cluster.py
    + ConfigError                     400  indexer/config.py
    + ContextError                    404  query/expand_context.py
    |  + BadContextRequest            400  query/expand_context.py
    + CredentialError                 400  indexer/credentials.py
    + CursorError                     400  query/cursor.py
    |  + StaleCursor                  409  query/cursor.py
    + EmbedError                      400  indexer/embed/artifacts.py
    + EvalError                       400  query/eval/__init__.py
    + FieldError                      400  indexer/fields.py
    + GetFileError                    404  query/get_file.py
    |  + BadRequest                   400  query/get_file.py
    |  |  + BadRange                  400  query/get_file.py
    |  + CredentialFile               403  query/get_file.py
    |  + FileTooLarge                 413  query/get_file.py
    + GrepError                       400  query/grep.py
    + HistoryError                    400  query/history.py
    |  + DamagedHistory               503  query/history.py
    |  + NoHistory                    404  query/history.py
    + IssuerUnreachable               503  query/surfaces/oauth.py
    + JudgementError                  400  query/eval/codesearchnet.py
    + MirrorError                     400  indexer/mirror.py
    + OverlayError                    400  query/overlays/sessions.py
    |  + SessionNotFound              404  query/overlays/sessions.py
    + Refused                         400  indexer/errors.py
    |  + HookError                    400  indexer/operate/http.py
    |  + SurfaceError                 400  query/surfaces/__init__.py
    + RemoteError                     502  query/remote.py
    + RerankError                     400  query/rerank.py
    + RunError                        400  indexer/build/__init__.py
    |  + DiskFull                     400  indexer/build/__init__.py
    |  + LockBusy                     400  indexer/build/__init__.py
    + ScanError                       400  indexer/scan.py
    + ScipError                       400  indexer/calls/scip.py
    + SearchError                     400  query/search/request.py
    |  + NotIndexed                   404  query/search/request.py
    + ShardDown                       503  query/front.py
    + ShardError                      400  query/shard_serve.py
    + ShardMismatch                   503  query/shard.py
    + SnapshotError                   400  indexer/snapshot/format.py
    |  + DamagedSnapshot              503  query/reader.py
    + SqlError                        400  query/sql.py
    + StoreError                      400  indexer/store.py
    + TokenStoreError                 503  indexer/tokens.py
"""

import re

# Each surface speaks its own words: the CLI names commands and flags, MCP tools and arguments, HTTP endpoints and
# fields, the page its pages. A message names what the reader can do next as an action, ⟦name⟧, and `said`
# words it for the surface that answers; str() is the CLI's wording (the terminal, logs). An operator's step
# ('blobdex index') is the same command everywhere; an agent is told to ask its user to take it.
SURFACES = ("cli", "mcp", "http", "web")
ACTIONS = {
    "list_repos": (
        "'blobdex status' lists them",
        "list_repos lists them",
        "GET /v1/repos lists them",
        "the repos page (/repos) lists them",
    ),
    "add_repo": (
        "add it with 'blobdex repo add' and run 'blobdex index'",
        "list_repos lists the indexed repos",
        "GET /v1/repos lists the indexed repos",
        "the repos page (/repos) lists the indexed repos",
    ),
    "list_files": (
        "'blobdex files REPO' lists the repo's files",
        "list_files lists the repo's files",
        "GET /v1/files?repo=REPO lists the repo's files",
        "a search for its name finds the file",
    ),
    "find_it": (
        "search for it with 'blobdex search'",
        "find it with search_code or grep",
        "find it with POST /v1/search or POST /v1/grep",
        "search for it on the search page",
    ),
    "outline": (
        "'blobdex outline REPO PATH' lists the file's definitions and their lines",
        "outline lists the file's definitions and their lines",
        "GET /v1/outline lists the file's definitions and their lines",
        "the file's page marks its definitions",
    ),
    "search_again": ("run 'blobdex search' again", "run search_code again", "POST /v1/search again", "search again"),
    "ref": ("pass one with --ref", "pass one as ref_or_commit", "pass one as ref", "pick one as the ref"),
    "check_ref": ("check --ref", "check ref_or_commit", "check ref", "check the ref"),
    "literal": (
        "search for the text as written",
        "pass literal=true to search for the text as written",
        'send "literal": true to search for the text as written',
        "tick literal to search for the text as written",
    ),
    "backlog": (
        "'blobdex status' shows how many are left",
        "list_repos shows how many are left",
        "GET /v1/status shows how many are left",
        "the repos page shows how many are left",
    ),
    "sync": (
        "sessions hold an agent's edits; the CLI searches the commits",
        "sync_workspace creates one",
        "POST /v1/sessions/SESSION_ID/sync creates one",
        "sessions hold an agent's edits; the page searches the commits",
    ),
}
ACTION_RE = re.compile(r"⟦(\w+)⟧")
OPERATOR_STEP_RE = re.compile(r"\b(run|rebuild with) '(blobdex [^']*)'")


def said(message: str, surface: str = "cli") -> str:
    """`message` in `surface`'s words: each ⟦action⟧ as that surface names it."""
    where = SURFACES.index(surface)
    text = ACTION_RE.sub(lambda m: ACTIONS[m.group(1)][where], message)
    if surface == "mcp":  # the calling model cannot run the operator's commands: its user can
        text = OPERATOR_STEP_RE.sub(r"ask the user to \1 '\2'", text)
    return text


class BlobdexError(Exception):
    """Raised for bad input or a failed operation whose message is written for the user (in the CLI's words; a
    surface answers with `said(surface)`)."""

    status = 400  # the HTTP status every surface answers with; a subclass names another (404, 403, 413)

    @property
    def message(self) -> str:
        """The message as raised, its actions unworded (for an error that wraps this one)."""
        return str(self.args[0]) if self.args else ""

    def said(self, surface: str) -> str:
        return said(self.message, surface)

    def __str__(self) -> str:
        return said(self.message)


class Refused(BlobdexError):
    """A request a server refuses: the HTTP status, the one-sentence message, and the contract's error code where
    the contract has codes. Every surface of both servers raises it (or a subclass) the same way."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code
