"""`blobdex eval …`: measurement of retrieval, not serving. The one place query/ drives the indexer (scratch snapshots)."""
