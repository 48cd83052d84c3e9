"""How answers read as text: markdown for the calling model (MCP, /v1) and plain lines for the terminal (CLI).

Each answer is rendered here once per audience, so MCP, /v1 and the CLI cannot drift apart. The terminal
renderers take `bold`, the CLI's styling of a heading (identity elsewhere: this module knows no terminal).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only: `blobdex mcp` imports this before the query engine
    from query.get_file import FileText
    from query.grep import GrepMatch
    from query.route_task import RepoRoute
    from query.search import Hit
    from query.service import ChunkText
    from query.status import RepoStatus


def plain(text: str) -> str:
    return text


def fence(text: str) -> str:
    """A markdown code fence longer than any run of backticks inside `text`, so the text cannot close it."""
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return ticks


HEADING_CHARS = 200  # a heading repeats this much of the query: a pasted report is the caller's already


def heading(text: str) -> str:
    """A query or task as an answer's heading repeats it: one line, at most HEADING_CHARS characters."""
    line = " ".join(text.split())
    return line if len(line) <= HEADING_CHARS else line[:HEADING_CHARS] + "…"


def at(ref: str, commit_id: str) -> str:
    """Where a hit was indexed, as its caption says it: the commit is what get_file reads back exactly."""
    return f" @ {ref} ({commit_id[:12]})" if commit_id else ""


def go_on(tool: str, cursor: str) -> str:
    """How an agent reads the next page of a paged answer."""
    return f"call {tool} again with the same arguments and cursor={cursor!r}"


def read_hint(repo: str, path: str, commit_id: str, lines: tuple[int, int] | None = None) -> str:
    span = f", start_line={lines[0]}, end_line={lines[1]}" if lines else ""
    return (
        f"get_file(repo={json.dumps(repo)}, path={json.dumps(path)}, ref_or_commit={json.dumps(commit_id[:12])}{span})"
    )


# -- markdown, for the calling model ---------------------------------------------------


FAST_TIER_NOTE = (
    "; meaning scored with static (fast tier) vectors, coarser than the model's: identifiers count as usual "
    "(list_repos says whether the model's own are being embedded)"
)


def hits_markdown(
    query: str, snapshot_id: str, hits: list[tuple[int, Hit]], applied: list[str], next_cursor: str | None = None
) -> str:
    """search_code's answer: each hit's caption and snippet, then what to call next."""
    lines = [
        f'# Search: "{heading(query)}"',
        "",
        f"{len(hits)} hit(s) from snapshot {snapshot_id}; " + ("; ".join(applied) if applied else "no filters"),
        "",
    ]
    if any(h.signals.vector_tier == "fast" for _, h in hits):
        lines[2] += FAST_TIER_NOTE
    for clip, h in hits:
        lines.append(
            f"{h.repo}:{h.path}:{h.line_start}-{h.line_end}{at(h.ref, h.commit_id)} • "
            f"{h.symbol or '(file)'} • {h.score:.4f} • id {clip}" + (" • uncommitted" if h.uncommitted else "")
        )
        ticks = fence(h.snippet)
        lines += [f"{ticks}{h.lang}", h.snippet, ticks, ""]
    committed = [h for _, h in hits if h.commit_id]
    if committed:
        h = committed[0]
        lines.append(
            "Next: get_chunk(ids=[...]) for whole hits; get_file with a hit's commit (in its caption) for "
            "the code around it, e.g. " + read_hint(h.repo, h.path, h.commit_id, (h.line_start, h.line_end))
        )
    elif hits:
        lines.append("Next: get_chunk(ids=[...]) for whole hits (uncommitted hits exist only in your session).")
    else:
        lines.append("No hits: broaden the query, drop filters, or try grep for an exact identifier.")
    if next_cursor:
        lines.append(f"More hits: {go_on('search_code', next_cursor)}.")
    return "\n".join(lines)


def files_markdown(query: str, files: list, notes: list[str] = ()) -> str:
    """search_code's answer with group_by='file': files ranked, each with its evidence (and notes: a cut text)."""
    lines = [f'# Files: "{heading(query)}"', "", *(f"Note: {n}" for n in notes), *([""] if notes else [])]
    for n, f in enumerate(files, 1):
        why = "; ".join(f"{h.symbol or '(file)'} {h.line_start}-{h.line_end}" for h in f.evidence)
        lines.append(f"{n}. {f.repo}:{f.path}{at(f.ref, f.commit_id)} • {f.score:.4f} • {why}")
    if files:
        f = files[0]
        lines += [
            "",
            "Next: get_file with a file's commit (in its line) to read it, e.g. "
            + read_hint(f.repo, f.path, f.commit_id),
        ]
    else:
        lines += ["", "No files: broaden the text, drop filters, or try grep for an exact identifier."]
    return "\n".join(lines)


def file_record(f) -> dict:
    """A ranked file as JSON (MCP, /v1, `search --files --json`): its evidence as `path:lines symbol` lines."""
    return {
        "repo": f.repo,
        "path": f.path,
        "ref": f.ref,
        "commit_id": f.commit_id,
        "score": f.score,
        "signals": f.signals,
        "evidence": [f"{h.path}:{h.line_start}-{h.line_end} {h.symbol}" for h in f.evidence],
    }


def chunk_markdown(c: ChunkText) -> str:
    """get_chunk's answer for one id: the caption, then the chunk's whole text."""
    h, ticks = c.hit, fence(c.text)
    return (
        f"## id {c.id}: {h.repo}:{h.path}:{h.line_start}-{h.line_end} • "
        f"{h.symbol or '(file)'} • {h.ref} @ {h.commit_id[:12]}\n\n"
        f"{ticks}{h.lang}\n{c.text}\n{ticks}\n"
    )


def grep_markdown(
    snapshot_id: str, matches: list[GrepMatch], next_cursor: str | None, tool: str | None = "grep"
) -> str:
    """grep's answer (`blobdex grep`: tool None, which names the CLI's way to the next page)."""
    lines = [f"{m.repo}:{m.path}:{m.line}: {m.text}" for m in matches]
    more = go_on(tool, next_cursor) if tool else f"run it again with --cursor {next_cursor}"
    narrow = "repos/paths" if tool else "--repo/--path"
    tail = (
        f"\n({len(matches)} matches on this page; more: {more}, or narrow with {narrow})"
        if next_cursor
        else f"\n({len(matches)} matches in snapshot {snapshot_id})"
    )
    return ("\n".join(lines) or "no matches") + tail


def file_markdown(f: FileText) -> str:
    """get_file's answer: where the lines come from, the numbered lines, and how to read on."""
    text = f.content.decode("utf-8", "replace")
    numbered = "\n".join(f"{f.line_start + i:>6}  {line}" for i, line in enumerate(text.splitlines()))
    head = f"{f.repo}:{f.path} at {f.ref} ({f.commit_id[:12]}), lines {f.line_start}-{f.line_end} of {f.total_lines}"
    more = f"\n\n(more: call get_file again with start_line={f.line_end + 1})" if f.line_end < f.total_lines else ""
    return f"{head}\n\n{numbered}{more}"


def route_in_words(signals: dict) -> list[str]:
    """A route's score as a person reads it (the page's route view): what each signal measured, in words."""
    said = [
        f"its best chunk matches the task {signals['peak']:.2f} (cosine, with a bonus when words match too)",
        f"its five best chunks average {signals['depth']:.2f}, so one lucky match is not enough",
        f"the matches spread over files: {signals['spread']:.2f} (1 is many files)",
        f"the repo's own description matches the task {signals['prior']:.2f}",
    ]
    if signals.get("substance", 1.0) < 1.0:
        said.append("demoted: its evidence is mostly tests, fixtures or docs")
    rank = signals.get("file_rank")
    said.append(
        f"its best file ranks #{rank} of the org's files for the task"
        if rank
        else "none of its files is among the org's first 30 for the task"
    )
    if "history_rank" in signals:
        h = signals["history_rank"]
        said.append(
            f"by its past commits like the task, it ranks #{h}" if h else "none of its past commits is like the task"
        )
    return said


def file_rank(signals: dict) -> str:
    """Where the repo's best file ranks in file localization, and the repo among those whose past commits are
    like the task: the order fuses them with the score."""
    rank = signals.get("file_rank")
    said = f"best file #{rank}" if rank else "no file in the first 30"
    if "history_rank" in signals:  # the history holds commits like the task
        h = signals["history_rank"]
        said += f", similar past commits #{h}" if h else ", no similar past commit"
    return said


def routes_markdown(task: str, snapshot_id: str, routes: list[RepoRoute], notes: list[str] = ()) -> str:
    """route_task's answer: repos ranked, each with its score broken down, evidence, coupling and checkout."""
    if not routes:
        return f"No repo matched {heading(task)!r}. Check list_repos, or rephrase the task."
    lines = [f'# Route: "{heading(task)}"', "", f"snapshot {snapshot_id}", *(f"Note: {n}" for n in notes), ""]
    for n, r in enumerate(routes, 1):
        s = r.signals
        lines.append(
            f"{n}. **{r.repo}** {r.score:.3f} (peak {s['peak']:.2f}, depth {s['depth']:.2f}, "
            f"spread {s['spread']:.2f}, prior {s['prior']:.2f}, substance {s['substance']:.1f}; {file_rank(s)})"
        )
        for e in r.evidence:
            lines.append(
                f"   - {e['path']}:{e['line_start']}-{e['line_end']} {e['symbol'] or ''} ({e['relevance']:.3f})"
            )
        lines.append(
            f"   - coupling: {len(r.edges)} here of {r.edges_total}"
            + "".join(f"\n     - {_edge_line(e)}" for e in r.edges[:5])
        )
        lines.append(f"   - checkout: `{r.checkout['command']}`")
    return "\n".join(lines)


# -- plain lines, for the terminal -----------------------------------------------------


def hits_text(hits: list[Hit], bold: Callable[[str], str] = plain) -> list[str]:
    """`blobdex search`: each hit's caption with its signals, the numbered snippet, a blank line."""
    if not hits:
        return ["no hits"]
    lines = []
    for n, h in enumerate(hits, 1):
        s = h.signals
        vec = f"vec #{s.vector_rank} {s.vector_score:.3f}" if s.vector_rank else "vec -"
        vec += " fast" if s.vector_tier == "fast" else ""
        lex = f"bm25 #{s.bm25_rank} {s.bm25_score:.2f}" if s.bm25_rank else "bm25 -"
        lines.append(
            bold(f"{n}. {h.repo}:{h.path}:{h.line_start}-{h.line_end}")
            + f" @ {h.ref} ({h.commit_id[:12]})  {h.symbol or '(file)'}  [{h.kind}, {h.lang}]"
            + f"  score {h.score:.4f}  ({vec} | {lex})"
        )
        first = s.snippet_lines[0]
        lines += [f"  {first + i:>5}  {line}" for i, line in enumerate(h.snippet.split("\n"))]
        lines.append("")
    return lines


def files_text(files: list) -> list[str]:
    """`blobdex search --files`: one line per file with its evidence."""
    lines = []
    for n, f in enumerate(files, 1):
        why = ", ".join(f"{h.symbol or '(file)'} {h.line_start}-{h.line_end}" for h in f.evidence)
        lines.append(f"{n}. {f.repo}:{f.path} @ {f.ref} ({f.commit_id[:12]})  {f.score:.4f}  ({why})")
    return lines


def routes_text(routes: list[RepoRoute], bold: Callable[[str], str] = plain) -> list[str]:
    """`blobdex route`: repos ranked, each with its score broken down, evidence, coupling and checkout."""
    lines = []
    for n, r in enumerate(routes, 1):
        s = r.signals
        lines.append(
            bold(f"{n}. {r.repo}  {r.score:.3f}") + f"  (peak {s['peak']:.2f}, depth "
            f"{s['depth']:.2f}, spread {s['spread']:.2f}, prior {s['prior']:.2f}, substance {s['substance']}; "
            f"{file_rank(s)})"
        )
        for e in r.evidence:
            lines.append(f"     {e['path']}:{e['line_start']}-{e['line_end']}  {e['symbol']}  {e['relevance']:.3f}")
        lines.append(f"     coupling: {len(r.edges)} here of {r.edges_total}; checkout: {r.checkout['command']}")
    return lines or ["no repo matched"]


def status_text(
    snapshot_id: str | None, rows: list[RepoStatus], vectors: dict | None = None, last_run: dict | None = None
) -> list[str]:
    """`blobdex status`: the snapshot, the last index run, the vectors (query.status.vector_status), then one line
    per repo."""
    lines = [f"snapshot {snapshot_id or '(none published)'}"]
    if last_run:
        what = last_run["outcome"] + (f": {last_run['error']}" if last_run["error"] else "")
        failed = f", {last_run['repos_failed']} repo(s) stale" if last_run["repos_failed"] else ""
        lines.append(f"last run {last_run['started_at']} ({last_run['seconds']:.1f} s) {what}{failed}")
    if vectors:
        line = f"vectors {vectors['model']} ({vectors['tier']} tier, {vectors['dim']} dims)"
        b = vectors["backfill"]
        if b:
            line += (
                f"; backfill with {b['model']}: {b['chunks_left']} of {b['of']} chunks left "
                f"(as of {b['updated_at']}; 'blobdex index' goes on with it)"
            )
        lines.append(line)
    for r in rows:
        refs = (
            ", ".join(f"{x.ref}@{(x.commit_id or '-')[:12]}" + (" (behind mirror)" if x.behind else "") for x in r.refs)
            or "-"
        )
        state = r.status + (f": {r.error}" if r.error else "")
        held = f"  secrets held back {r.secrets_held_back} (see 'blobdex secrets')" if r.secrets_held_back else ""
        lines.append(
            f"{r.org}/{r.name}  {refs}  indexed {r.indexed_at or '-'}  files {r.files}  "
            f"chunks {r.chunks}{held}  {state}"
        )
    return lines


def _route_line(r: dict) -> str:
    return f"{r['method']} {r['pattern']} -> {r['handler']}  ({r['repo']}:{r['path']}:{r['line']})"


def _env_key_line(e: dict) -> str:
    return f"{e['key']} via {e['how']}  ({e['repo']}:{e['path']}:{e['line']})"


def _edge_line(e: dict) -> str:
    """An edge with its confidence and, where it has them, the facts on both sides as written."""
    sure = f" ({e['confidence']:.2f})" if e.get("confidence") is not None else ""
    said = f" `{e['from_evidence']}`" if e.get("from_evidence") else ""
    met = f" `{e['to_evidence']}`" if e.get("to_evidence") else ""
    return (
        f"{e['kind']} {e['key']}{sure}: {e['from_repo']}:{e['from_path']}:{e['from_line']}{said}"
        f" -> {e['to_repo']}:{e['to_path']}:{e['to_line']}{met}"
    )


def context_text(data: dict, bold: Callable[[str], str] = plain, tool: str | None = "expand_context") -> list[str]:
    """`blobdex context` (tool None) and expand_context's markdown: definitions, callers by repo, then routes,
    env keys and coupling edges."""
    lines = _definition_lines(data, bold) + callers_text(data, tool)
    for title, rows, line in (
        ("routes", data["routes"], _route_line),
        ("env keys", data["env_keys"], _env_key_line),
        ("edges", data["edges"], _edge_line),
    ):
        lines.append(f"\n{title}: {len(rows)}")
        lines += [f"  {line(r)}" for r in rows]
    return lines


def references_text(data: dict, bold: Callable[[str], str] = plain) -> list[str]:
    """`blobdex references`: the definitions, then their callers (MCP's expand_context answers them with more)."""
    return _definition_lines(data, bold) + callers_text(data, None)


def _definition_lines(data: dict, bold: Callable[[str], str]) -> list[str]:
    lines = []
    for d in data["definitions"]:
        lines.append(
            bold(f"{d['repo']}:{d['path']}:{d['line']}-{d['line_end']}") + f"  {d['qualified_name']} ({d['kind']})"
        )
        lines.append(f"    {d['signature']}" + (f"\n    {d['doc']}" if d["doc"] else ""))
    hidden = data["definitions_total"] - len(data["definitions"])
    if hidden:
        lines.append(f"  (+ {hidden} more definition(s) of this name, not listed: narrow with a repo or Class.name)")
    return lines


def callers_text(data: dict, tool: str | None) -> list[str]:
    """A page of callers: totals by repo and by how each call was resolved, one line per call (name-only ones
    labelled), and how to see more: with the MCP tool's arguments, or (tool None) the CLI's options."""
    by_repo = ", ".join(f"{r} {n}" for r, n in data["callers_by_repo"].items()) or "none"
    how = ", ".join(f"{level} {n}" for level, n in data["callers_by_resolution"].items())
    lines = [f"\ncallers: {data['callers_total']} ({by_repo})" + (f"; resolved by {how}" if how else "")]
    for c in data["callers"]:
        label = "  [name only]" if c["resolution"] == "name_only" else ""
        lines.append(f"  {c['repo']}:{c['path']}:{c['line']}  in {c['caller'] or '(file level)'}{label}")
    if data["next_cursor"]:
        more = go_on(tool, data["next_cursor"]) if tool else f"run it again with --cursor {data['next_cursor']}"
        lines.append(f"  (more: {more})")
    if data["name_only_total"] and not data["name_only_included"]:
        lines.append(
            f"  (+ {data['name_only_total']} call(s) of the same name on something of unknown type, not counted; "
            f"{'name_only=true' if tool else '--name-only'} lists them)"
        )
    return lines


def files_page_markdown(page) -> str:
    """list_files' answer: one line per file (path, language, size, why it is not indexed), then how to go on."""
    head = f"# {page.repo} at {page.ref} ({page.commit_id[:12]}): {page.total} file(s)"
    lines = [head, ""]
    for f in page.files:
        size = f"{f['bytes']:,} B" if f["bytes"] is not None else "size unknown"
        lines.append(f"{f['path']}  {f['lang']}  {size}" + (f"  (not indexed: {f['skip']})" if f["skip"] else ""))
    if page.next_cursor:
        lines += ["", f"More files: {go_on('list_files', page.next_cursor)}."]
    elif not page.files:
        lines.append("No files match: drop path_glob or check it (gitignore syntax, e.g. 'src/**/*.py').")
    return "\n".join(lines)


def outline_markdown(o) -> str:
    """outline's answer: each definition indented under the one it is in, with its lines and signature."""
    lines = [f"# {o.repo}:{o.path} at {o.ref} ({o.commit_id[:12]}): {len(o.symbols)} definition(s)", ""]
    for s in o.symbols:
        depth = s["qualified_name"].count(".")
        doc = f" — {s['doc']}" if s["doc"] else ""
        lines.append(
            f"{'  ' * depth}- {s['kind']} {s['qualified_name']} ({s['line']}-{s['line_end']}): `{s['signature']}`{doc}"
        )
    if not o.symbols:
        lines.append(f"No definitions found ({o.lang}): read the file with get_file.")
    else:
        lines += ["", "Next: get_file with start_line/end_line to read a definition; expand_context for its callers."]
    return "\n".join(lines)


# -- history: search_commits, log, blame, diff (markdown for every audience: the CLI prints it too) ---------------

CHANGE_MARK = {"add": "A", "modify": "M", "delete": "D", "rename": "R"}
PATHS_LISTED = 8  # changed paths a commit's line lists; the rest are counted


def _counts(added, removed) -> str:
    return "binary" if added is None or added < 0 else f"+{added} -{removed}"


def commits_markdown(title: str, snapshot_id: str, commits: list[dict], next_cursor: str | None, tool: str) -> str:
    """search_commits' and log's answer: one line per commit (repo, id, date, author, subject), its changed paths
    under it, and how to read on."""
    lines = [heading(title), ""]
    for c in commits:
        score = f" • score {c['score']}" if "score" in c else ""
        lines.append(f"- {c['repo']} {c['commit_id'][:12]} • {c['date'][:10]} • {c['author']} • {c['subject']}{score}")
        listed = c.get("paths", [])[:PATHS_LISTED]
        changed = ", ".join(
            f"{CHANGE_MARK.get(p['change'], '?')} {p.get('old_path', '') + ' -> ' if 'old_path' in p else ''}"
            f"{p['path']} ({_counts(p['added'], p['removed'])})"
            for p in listed
        )
        rest = c["files_changed"] - len(listed)
        if changed:
            lines.append(f"  {changed}" + (f", and {rest} more" if rest > 0 else ""))
    if not commits:
        lines.append("no commits")
    lines.append("")
    lines.append(f"(more: {go_on(tool, next_cursor)})" if next_cursor else f"(snapshot {snapshot_id})")
    return "\n".join(lines)


def blame_markdown(b) -> str:
    """blame's answer: per line the short commit, its date and author, then the line; the commits' subjects
    after."""
    head = f"{b.repo}:{b.path} at {b.ref} ({b.commit_id[:12]}), lines {b.line_start}-{b.line_end} of {b.total_lines}"
    width = max((len(c["author"]) for c in b.commits.values()), default=0)
    rows = []
    for x in b.lines:
        c = b.commits[x["commit_id"]]
        mark = "^" if x.get("boundary") else " "
        rows.append(f"{mark}{x['commit_id'][:10]} {c['date'][:10]} {c['author']:<{width}} {x['line']:>6}  {x['text']}")
    subjects = [f"  {cid[:10]} {c['subject']}" for cid, c in b.commits.items()]
    return "\n".join([head, "", *rows, "", "commits:", *subjects])


def diff_markdown(d) -> str:
    """diff's answer: the two commits, then each file's change, counts and hunks in a fence."""
    lines = [
        f"{d.repo}: {d.base} ({d.base_commit[:12]}) .. {d.head} ({d.head_commit[:12]}): {d.total} files changed",
        "",
    ]
    for f in d.files:
        name = f"{f['old_path']} -> {f['path']}" if "old_path" in f else f["path"]
        note = f" • {f['note']}" if "note" in f else ""
        lines.append(f"### {CHANGE_MARK.get(f['change'], '?')} {name} ({_counts(f['added'], f['removed'])}){note}")
        if f["hunks"]:
            ticks = fence(f["hunks"])
            cut = "\n(cut: this file's diff is longer)" if f.get("truncated") else ""
            lines += [f"{ticks}diff", f["hunks"], ticks + cut]
    if d.next_cursor:
        lines.append(f"\n(more files: {go_on('diff', d.next_cursor)})")
    return "\n".join(lines)
