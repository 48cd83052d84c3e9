"""The house as its imports draw it: the two halves meet only at the snapshot format and the indexer's kernel (the
top level of indexer/); the batch half's rooms (indexer.ROOMS) import only downward; no import runs in a circle."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from indexer import ROOMS, SANCTIONED
from indexer.versions import TOOLS

ROOT = Path(__file__).resolve().parents[1]
HOUSE = ("indexer", "query", "ci")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_of(p): p for top in HOUSE for p in sorted((ROOT / top).rglob("*.py"))}


def _imports(module: str) -> set[str]:
    """The house's modules `module` imports, wherever in the file (function-level and TYPE_CHECKING imports
    count): `from a.b import c` names a.b.c when that is a module, else a.b."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [f"{base}.{a.name}" for a in node.names]
            found.update(n if n in MODULES else base for n in names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: _imports(m) for m in MODULES}


def _room(module: str) -> str | None:
    """The batch-half room a module is in (None: the kernel, or not the indexer)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "indexer" and len(parts) > 1 and parts[1] in ROOMS else None


def test_query_imports_no_room_of_the_batch_half():
    reaching = {
        m: sorted(r for r in {_room(i) for i in GRAPH[m]} - {None} if r not in SANCTIONED.get(_rel(m), set()))
        for m in GRAPH
        if m.startswith("query")
    }
    assert {m: rooms for m, rooms in reaching.items() if rooms} == {}


def test_the_kernel_imports_no_room():
    """The top of indexer/ is the kernel: what the query server may use never reaches into the batch half."""
    kernel = [m for m in GRAPH if m.startswith("indexer") and _room(m) is None]
    assert {m: sorted(i for i in GRAPH[m] if _room(i)) for m in kernel if any(_room(i) for i in GRAPH[m])} == {}


def test_a_room_imports_only_rooms_below_it():
    up = [
        f"{m} -> {i}"
        for m in GRAPH
        if _room(m)
        for i in GRAPH[m]
        if _room(i) and ROOMS.index(_room(i)) > ROOMS.index(_room(m))
    ]
    assert up == []


def test_no_import_runs_in_a_circle():
    """No cycle among the house's modules (a package and its own modules included), found as the strongly
    connected components of the import graph."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert cycles == []


def test_every_room_and_sanctioned_import_exists():
    assert all((ROOT / "indexer" / room / "__init__.py").exists() for room in ROOMS)
    assert all((ROOT / f).exists() and rooms <= set(ROOMS) for f, rooms in SANCTIONED.items())


def _rel(module: str) -> str:
    return MODULES[module].relative_to(ROOT).as_posix()


def test_the_snapshot_reader_loads_no_parser_and_no_model():
    code = (
        "import json, sys, query.reader, query.get_file, query.status; "
        "print(json.dumps(sorted(m for m in ('tree_sitter', 'tree_sitter_language_pack', 'torch', "
        "'sentence_transformers') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_tool_versions_load_no_parser():
    # The query side (a manifest's tools, the eval's configuration) reads tool versions without a parser.
    code = (
        "import json, sys; from indexer.versions import TOOLS; from indexer.snapshot import Manifest; "
        "print(json.dumps([TOOLS.blob_tag(), sorted(m for m in sys.modules if m.startswith('tree_sitter'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [TOOLS.blob_tag(), []]


def test_only_the_format_module_reads_a_snapshots_stores():
    opens = ("lance.dataset(", "lance.write_dataset(", "tantivy.Index.open(", "pq.read_table(", "read_parquet(")
    readers = sorted(
        p.relative_to(ROOT).as_posix()
        for d in HOUSE
        for p in (ROOT / d).rglob("*.py")
        if any(o in p.read_text(encoding="utf-8") for o in opens)
    )
    assert [r for r in readers if not r.startswith("indexer/snapshot/")] == []  # the format's package alone


def test_one_module_says_where_a_mirror_lives():
    spelled = sorted(
        p.relative_to(ROOT).as_posix()
        for d in ("indexer", "query", "ci")
        for p in (ROOT / d).rglob("*.py")
        if '"mirrors"' in p.read_text(encoding="utf-8")
    )
    assert spelled == ["indexer/mirror.py"]


PRODUCT = sorted(p for d in ("indexer", "query") for p in (ROOT / d).rglob("*.py"))
MAX_FUNCTION_LINES = 90  # the review's "about 80", measured after `ruff format` spreads long calls over lines
PROTOCOL_LIBRARIES = {"starlette", "mcp", "uvicorn", "httpx", "pydantic", "sse_starlette"}
# Outside query/surfaces/, the one module that may touch a protocol library, and why.
PROTOCOL_SANCTIONED = {  # `blobdex serve` and `blobdex webhooks` hand their composed app to uvicorn
    "query/serve_cli.py": {"uvicorn"},
    "indexer/operate/cli.py": {"uvicorn"},
}
# The read-only server's surfaces, and the webhooks process's (composed by indexer/operate/app.py).
SURFACES = ("query/surfaces/", *(f"indexer/operate/{m}.py" for m in ("app", "http", "webhooks", "control")))


def _trees():
    for path in PRODUCT:
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_every_function_fits_on_a_screen_or_two():
    long = [
        f"{rel}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for rel, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_a_handler_is_a_top_level_function_not_a_closure():
    """A function defines at most two functions inside it (a decorator's wrapper, a sort key): handlers are
    module-level, where a traceback names them and a test can call them."""
    factories = [
        f"{rel}:{node.lineno} {node.name}"
        for rel, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and sum(isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)) for c in ast.walk(node) if c is not node) > 2
    ]
    assert factories == []


def test_records_with_more_than_three_fields_are_keyword_only():
    positional = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for deco in node.decorator_list:
                call = deco if isinstance(deco, ast.Call) else None
                name = (call.func if call else deco).id if isinstance(call.func if call else deco, ast.Name) else None
                fields = sum(isinstance(s, ast.AnnAssign) for s in node.body)
                if name == "dataclass" and fields > 3 and not (call and any(k.arg == "kw_only" for k in call.keywords)):
                    positional.append(f"{rel}:{node.lineno} {node.name}")
    assert positional == []


def test_only_the_surfaces_speak_protocols():
    """Ranking, stores and evaluation know nothing of HTTP or MCP: a protocol library is imported under
    query/surfaces/ and indexer/operate/ only (the commands that start a server aside)."""
    outside = {}
    for rel, tree in _trees():
        if rel.startswith(SURFACES):
            continue
        used = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                used.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                used.update(a.name.split(".")[0] for a in node.names)
        extra = (used & PROTOCOL_LIBRARIES) - PROTOCOL_SANCTIONED.get(rel, set())
        if extra:
            outside[rel] = sorted(extra)
    assert outside == {}


def test_no_test_module_imports_another():
    """What tests share lives in conftest.py (fixtures), servers.py, corpus.py and checks.py, never in a test module."""
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):  # `from tests import test_x` and `from .test_x import y` count too
                module = ".".join(filter(None, ["tests" if node.level else "", node.module]))
                names = [f"tests.{a.name}" for a in node.names] if module == "tests" else [module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith("tests.test_")]
    assert found == []
