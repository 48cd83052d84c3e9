"""The documentation cannot drift: the format page's snippet reads what blobdex reads, every relative link and
#anchor resolves, every tested block names the test that runs it, the code map names every module, and the
MkDocs site builds strictly from files alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from indexer.build import run
from indexer.snapshot import open_manifest, parts_of, read_part_chunks
from query.reader import SnapshotReader
from tests import gitrepo
from tests.corpus import api_files

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
KEY = ("org", "repo", "path", "blob_id", "chunk_index")  # a chunk row's identity


def _prose(text: str) -> str:
    """Markdown without its fenced blocks and inline code, where links and headings are not links or headings."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def _block(path: Path, name: str, fence: str) -> str:
    """The fenced block right after the `<!-- tested: NAME` marker of a page."""
    after = path.read_text(encoding="utf-8").split(f"<!-- tested: {name}", 1)[1]
    return after.split(f"```{fence}\n", 1)[1].split("```")[0]


# -- the snippet of docs/format.md that reads chunks without blobdex


def _snippet_rows(data_dir: Path, monkeypatch) -> pa.Table:
    monkeypatch.setenv("BLOBDEX_DATA_DIR", str(data_dir))
    scope: dict = {}
    exec(compile(_block(DOCS / "format.md", "read-chunks", "python"), "docs/format.md", "exec"), scope)
    return scope["chunks"]


def _keys(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in KEY)))


def _reader_live(data_dir: Path) -> list[tuple]:
    reader = SnapshotReader(data_dir)
    return _keys(reader.rows.filter(pa.array(reader.live)))


def test_format_snippet_reads_the_live_chunks_of_the_session_snapshot(corpus, monkeypatch):
    chunks = _snippet_rows(corpus.cfg.data_dir, monkeypatch)
    assert _keys(chunks) == _reader_live(corpus.cfg.data_dir)
    assert chunks.schema.field("vector").type.list_size == open_manifest(corpus.cfg.data_dir)[1].dim


def test_format_snippet_leaves_out_the_rows_a_later_part_supersedes(two_repos, monkeypatch):
    """A second run writes a delta part over a changed and a deleted file: the snippet must apply paths.parquet."""
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    files = {k: v for k, v in api_files().items() if k != "src/billing/invoice.py"}
    files["src/billing/renew.py"] = files["src/billing/renew.py"] + b"\n\ndef renew_later():\n    return 2\n"
    gitrepo.commit(api, files, message="renew later, no invoices")
    run(cfg, show_progress=False)
    path, manifest = open_manifest(cfg.data_dir)
    assert len(manifest.repo("default", "api").parts) == 2
    written = sum(read_part_chunks(ref).num_rows for ref in parts_of(path, manifest))
    live = _reader_live(cfg.data_dir)
    assert written > len(live)  # superseded rows are on disk: a reader that ignores the rule sees them
    assert _keys(_snippet_rows(cfg.data_dir, monkeypatch)) == live


# -- links, anchors and tested blocks


def github_slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: links become their text, lower case, everything but letters, digits,
    `_`, `-` and spaces dropped, spaces become `-` (MkDocs' slugs agree for the headings these pages use; its
    strict build below checks the same anchors its own way)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        slug = github_slug(heading)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)  # GitHub numbers repeated headings
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_github_slugs_follow_githubs_rule():
    assert github_slug("Configuration: `blobdex.toml`") == "configuration-blobdextoml"
    assert github_slug("Why per-repo Arrow parts and not a Lance dataset") == (
        "why-per-repo-arrow-parts-and-not-a-lance-dataset"
    )
    assert github_slug("CodeSearchNet and blobdex's own history") == "codesearchnet-and-blobdexs-own-history"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in DOCUMENTS:
        for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto: leave the repository
            file, _, anchor = target.partition("#")
            linked = (page.parent / file).resolve() if file else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [p.name for p in DOCS.glob("*.md") if f"](docs/{p.name})" not in readme] == ["index.md"]


def test_every_tested_block_names_a_test_that_reads_it():
    marker = r"<!-- tested: (\S+) \((tests/\S+\.py)"  # the block's name, and the test file that runs it
    markers = [(m, page) for page in DOCUMENTS for m in re.findall(marker, page.read_text())]
    assert {name for (name, _), _ in markers} >= {"walkthrough", "mcp-config", "duckdb-queries", "read-chunks"}
    for (name, test), page in markers:
        assert name in (ROOT / test).read_text(), f"{page.name}: '{name}' says {test} runs it; that file never names it"


# -- the code map of docs/architecture.md


def code_map() -> set[str]:
    """The paths the code map names: a line's first word, under the folders above it (two spaces a level)."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8").split("## The code map", 1)[1]
    block = text.split("```\n", 1)[1].split("```", 1)[0]
    folders: list[str] = []
    named = set()
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        folders = folders[:depth]
        named.add("".join(folders) + name)
        if name.endswith("/"):
            folders.append(name)
    return named


def test_the_code_map_names_every_module_and_only_modules_that_exist():
    """Every .py file of indexer/ and query/, __init__.py included (a package's __init__ has a job of its own: the
    kernel, a run, the format), is named, and every name in the map is a file or folder that exists."""
    modules = {
        p.relative_to(ROOT).as_posix()
        for half in ("indexer", "query")
        for p in (ROOT / half).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    named = code_map()
    assert sorted(modules - named) == [], "modules the code map of docs/architecture.md does not name"
    assert sorted(n for n in named if not (ROOT / n).exists()) == [], "names in the code map that do not exist"


# -- the site


def test_mkdocs_builds_the_site_strictly_and_it_loads_nothing_from_elsewhere(tmp_path):
    site = tmp_path / "site"
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    done = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (site / "index.html").exists() and (site / "format" / "index.html").exists()
    pages = [p.read_text(encoding="utf-8") for p in site.rglob("*.html")]
    assert not [p for p in pages if re.search(r"""<(script|link)[^>]+(src|href)=["']https?://""", p)]
