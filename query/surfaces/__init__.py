"""The protocol surfaces: thin modules over the query service, one per contract (MCP, /v1, codesearch, CIP, Lucos)."""
