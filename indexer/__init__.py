"""The indexer: mirrors repos and publishes snapshots.

Its top level is the kernel: the modules and packages both halves use (the snapshot format in snapshot/, the
models in embed/, configuration, errors, mirrors, scanning, preparing a blob, tokens, run history, logging). The
batch half's own rooms are the packages named in ROOMS, in the order they may import one another; the query
server imports none of them, and no kernel module imports one. Enforced by tests/test_layout.py.
"""

# The batch half's rooms, lowest first: a room imports the kernel and the rooms before it, never one after it.
ROOMS = (
    "calls",  # call resolution: which definition a call reaches (rules per language family, declared, SCIP)
    "build",  # one index run, in stage order: mirror, scan, history, chunk and resolve, embed, write, publish
    "operate",  # operations: the indexer's commands, the queue, the --every loop, sources, the webhooks process
)
# Imports of a room from query/, each for a stated reason (module -> the rooms it may use).
SANCTIONED = {
    "query/eval/scratch.py": {"build"},  # the eval indexes a scratch data dir of its own to measure
    "query/cli.py": {"operate"},  # the one `blobdex` command mounts the indexer's commands (init, repo, index)
    "query/eval/cli.py": {"operate"},  # the eval commands read --config/--data-dir as every command does
    "query/token_cli.py": {"operate"},  # so do the token commands
    "query/serve_cli.py": {"operate"},  # and the servers' commands
    "query/remote.py": {"operate"},  # and the read commands, which it hands this machine's index or a server
}
