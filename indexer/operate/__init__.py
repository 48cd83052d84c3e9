"""Operations: what runs the indexer from outside a run. The `blobdex` commands of the batch half (cli), the job
queue that webhooks and the control API fill (queue), the `--every` loop that drains it (schedule), checking a
repo's source before it is configured (sources), and the webhooks process (app composes webhooks, control and
their shared HTTP pieces, http) apart from the read-only query server."""
