"""The server's only writable stores: session overlays (a client's uncommitted files) and pushed indexes."""
