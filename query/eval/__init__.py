"""`blobdex eval …`: measurement, not serving; the one place query/ drives the indexer (scratch snapshots)."""

from indexer.errors import BlobdexError


class EvalError(BlobdexError):
    pass
