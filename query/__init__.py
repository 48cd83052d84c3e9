"""The read-only query side: the service over the live snapshot, and the surfaces that expose it."""

MAX_LIMIT = 200  # the most hits one search returns, on every surface (here: the MCP tools' schema reads it
# without importing the search engine)
