"""The indexer: mirrors repos and publishes snapshots. `query/` may import only the kernel below.

The two halves meet at the snapshot format (`snapshot`) and a small named kernel of modules that
both need; everything else here is the pipeline, which the query server never runs. Enforced by
tests/test_layout.py.
"""

KERNEL = frozenset(
    {
        "errors",  # the error base class every surface turns into one sentence
        "config",  # blobdex.toml
        "credentials",  # every secret setting (the CIP key, webhook and store keys, git credentials) resolved one way
        "snapshot",  # the format: layout, schemas, manifest, CURRENT; the only reader of its files
        "tokenize",  # queries are tokenized as their snapshot was
        "embed",  # queries are embedded by the snapshot's model
        "languages",  # path -> language, for filters and overlays
        "ignore",  # the path policy: get_file and overlays refuse what the indexer never reads
        "secrets",  # credential detection: get_file withholds and pushed chunks refuse what the index holds back
        "prepare",  # session overlays prepare a file's bytes exactly as the indexer prepares a blob
        "mirror",  # get_file reads git objects from the mirrors
        "scan",  # ref resolution for get_file and status
        "tokens",  # the query server checks read tokens; the control API admin ones, from the same store
        "runs",  # status shows the last index run
        "observe",  # both servers log and count requests the same way (access log, request ids, metrics)
        "listen",  # both servers bind their socket the same way
        "store",  # a read replica syncs snapshots from the object store the indexer uploads them to
    }
)
# Imports of the pipeline from query/, each for a stated reason (module -> the indexer module it may use).
SANCTIONED = {
    "query/eval/scratch.py": {"build"},  # the eval indexes a scratch data dir of its own to measure
    "query/cli.py": {"cli"},  # the one `blobdex` command mounts the indexer's commands (init, repo, index)
    "query/eval/cli.py": {"cli"},  # the eval commands read --config/--data-dir as every command does (cli_config)
    "query/token_cli.py": {"cli"},  # so do the token commands
}
