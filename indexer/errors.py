"""The base of every error a person should see as one sentence (what, which, why, what to do).

Each subclass lives beside the code that raises it (dulwich's advice); this is the tree, with the HTTP
status a surface answers for it (`status`, 400 unless a class says otherwise):

    BlobdexError                          400
    + ConfigError, MirrorError, ScanError, EmbedError, SnapshotError, RunError   (indexer/)
    + SearchError, GrepError, RerankError, SqlError                              (query/)
    + EvalError, JudgementError                                                  (query/eval/)
    + ChunkNotFound                       404  (query/service.py)
    + ContextError                        404  (query/expand_context.py)
    + OverlayError                             (query/overlays/sessions.py)
    |  + SessionNotFound                  404
    + GetFileError                        404  (query/get_file.py)
    |  + BadRange                         400
    |  + CredentialFile                   403
    |  + FileTooLarge                     413
    + SurfaceError                        its own  (query/surfaces/: a request a contract refuses)
"""


class BlobdexError(Exception):
    """Raised for bad input or a failed operation whose message is written for the user."""

    status = 400  # the HTTP status every surface answers with; a subclass names another (404, 403, 413)
