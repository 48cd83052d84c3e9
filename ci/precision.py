"""`make bench-precision CONFIG=...`: how right call resolution is on real repos, judged by a SCIP indexer.

For every Python repo of an index (the config's data dir, indexed beforehand without `scip = true`: with it, the
rows hold SCIP's own answers), the commit it indexed is checked
out from its mirror, scip-python indexes it, and each call row is compared with what SCIP says it calls
(indexer/calls/scip.py). Printed per repo:

- the share of call rows at each resolution level;
- precision of `expand_context` callers, before and after: a caller list links a call to a definition; before
  (calls matched by name, as blobdex did until resolution) every definition with the callee's name was linked,
  now the one definition resolution names; precision is the share of links SCIP confirms, over the calls SCIP
  resolved (a link to another repo is not judged: SCIP indexes one repo at a time);
- how many calls SCIP resolves to a definition of the repo that blobdex left name_only or unresolved;
- for the --symbols given, the size of the `expand_context` answer, before (the JSON of the previous release's
  expand_context, read from git history) and after (the markdown the tool gives now); tokens are estimated as
  characters / 4.

Nothing is asserted; --json writes the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from indexer.config import load as load_config  # noqa: E402
from indexer.mirror import mirror_dir  # noqa: E402
from indexer.calls.scip import agreement, checkout, index_tree, installed, scip_targets  # noqa: E402
from indexer.snapshot import open_manifest, read_graph  # noqa: E402
from query.expand_context import context  # noqa: E402
from query.surfaces import render  # noqa: E402

BEFORE = "241dc46"  # the last commit whose expand_context matched calls by name
RESOLVED = ("exact", "import", "receiver")


def old_context():
    """The previous release's expand_context module, from git history (None outside a git checkout)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BEFORE}:query/expand_context.py"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader("expand_context_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "expand_context_before.py", "exec"), module.__dict__)  # noqa: S102 - our own history
    return module


def links(calls: list[dict], symbols: list[dict], targets: list, repo: str) -> dict:
    """Precision of caller links before (by name) and after (resolved), over the calls SCIP judged."""
    by_name = defaultdict(list)
    for s in symbols:
        by_name[s["name"]].append((s["path"], s["qualified_name"]))
    before = Counter()
    after = Counter()
    for call, target in zip(calls, targets):
        if target is None:
            continue
        for d in by_name.get(call["callee"], ()):
            before["links"] += 1
            before["right"] += target == d
        if call["resolution"] in RESOLVED and call["resolved_repo"] == repo:
            after["links"] += 1
            after["right"] += target == (call["resolved_path"], call["resolved_symbol"])
    share = lambda c: round(c["right"] / c["links"], 4) if c["links"] else None  # noqa: E731
    return {
        "before": {**before, "precision": share(before)},
        "after": {**after, "precision": share(after)},
    }


def measure_repo(cfg, snapshot, manifest, state, tool: Path, timeout: float) -> dict:
    key = {(state.org, state.name)}
    calls = read_graph(snapshot, "calls", key)
    symbols = read_graph(snapshot, "symbols", key)
    levels = Counter(calls.column("resolution").to_pylist())
    with tempfile.TemporaryDirectory(prefix="blobdex-precision-") as tmp:
        root = Path(tmp) / state.name
        started = time.monotonic()
        checkout(mirror_dir(cfg.data_dir, state.org, state.name), state.refs[0].commit_id, root)
        documents = index_tree(tool, "python", root, state.name, state.refs[0].commit_id, timeout)
        seconds = time.monotonic() - started
        sources = {
            path: (root / path).read_text(encoding="utf-8", errors="replace").split("\n")
            for path in documents
            if (root / path).is_file()
        }
    targets = scip_targets(calls, symbols, documents, sources, state.name)
    return {
        "repo": state.name,
        "calls": calls.num_rows,
        "levels": {level: levels[level] for level in ("exact", "import", "receiver", "name_only", "unresolved")},
        "scip_seconds": round(seconds, 1),
        "agreement": agreement(calls, targets).to_dict(),
        "callers": links(calls.to_pylist(), symbols.to_pylist(), targets, state.name),
    }


def answer_sizes(cfg, symbols: list[str]) -> list[dict]:
    before = old_context()
    out = []
    for symbol in symbols:
        now = "\n".join(render.context_text(context(cfg.data_dir, symbol)))
        row = {"symbol": symbol, "after_chars": len(now), "after_tokens": len(now) // 4}
        if before is not None:
            then = json.dumps(before.context(cfg.data_dir, symbol), indent=1)
            row |= {"before_chars": len(then), "before_tokens": len(then) // 4}
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="blobdex.toml of an index of real Python repos")
    parser.add_argument("--repo", action="append", help="only these repos (default: every repo with Python)")
    parser.add_argument("--symbols", default="", help="comma-separated symbols whose expand_context answer is sized")
    parser.add_argument("--scip-python", help="the indexer (default: .tools/node_modules/.bin, then PATH)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    cfg = load_config(Path(args.config))
    tool = Path(args.scip_python) if args.scip_python else installed("python", [ROOT / ".tools/node_modules/.bin"])
    if tool is None:
        sys.exit("scip-python is not installed: make .tools/.installed (npm) or pass --scip-python")
    snapshot, manifest = open_manifest(cfg.data_dir)
    repos = []
    for state in manifest.repos:
        if (args.repo and state.name not in args.repo) or not state.refs:
            continue
        figures = measure_repo(cfg, snapshot, manifest, state, tool, args.timeout)
        repos.append(figures)
        a, c = figures["agreement"], figures["callers"]
        print(f"\n{state.name}: {figures['calls']} calls; SCIP indexed it in {figures['scip_seconds']} s")
        total = figures["calls"] or 1
        print("  levels: " + ", ".join(f"{k} {v} ({100 * v / total:.1f}%)" for k, v in figures["levels"].items()))
        print(
            f"  vs SCIP over {a['judged']} calls it resolved: {a['agree']} agree, {a['disagree']} disagree "
            f"(precision {a['precision']}), {a['missed']} left name_only/unresolved though SCIP found a definition "
            f"(recall {a['recall']} of {a['internal']} calls SCIP resolved into the repo)"
        )
        print(f"  agreeing by level: {a['agree_by_level']} of {a['levels']}")
        print(
            f"  caller links: before (by name) {c['before'].get('right', 0)}/{c['before'].get('links', 0)} = "
            f"{c['before']['precision']}; after (resolved) {c['after'].get('right', 0)}/{c['after'].get('links', 0)} "
            f"= {c['after']['precision']}"
        )
    sizes = answer_sizes(cfg, [s for s in args.symbols.split(",") if s])
    for s in sizes:
        print(
            f"\nexpand_context({s['symbol']!r}): before {s.get('before_chars', '?')} chars "
            f"(~{s.get('before_tokens', '?')} tokens), after {s['after_chars']} chars (~{s['after_tokens']} tokens)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"repos": repos, "answers": sizes}, indent=2))


if __name__ == "__main__":
    main()
