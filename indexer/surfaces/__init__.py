"""The indexer's own HTTP surfaces, served by `blobdex webhooks` in a process apart from the read-only query
server: push webhooks into the queue, the operator's control API, and their metrics."""
