"""`blobdex eval …`: measurement, not serving; the one place query/ drives the indexer (scratch snapshots)."""
