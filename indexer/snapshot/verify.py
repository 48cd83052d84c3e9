"""Reconciling a snapshot: manifest -> parts (chunk rows and vectors, graph tables, cards) -> lexical documents
-> edges -> history parts and the commits index.

`verify` reads every store in full; `open_check` is the cheap part, for a run about to keep a snapshot, and
`check_oldest` re-reads, within a byte budget, the parts checked longest ago. Both `verify` and `check_oldest` read
a part's bytes with the one `deep_check`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tantivy

from indexer.snapshot import ann, grams
from indexer.snapshot.checksums import check_pages
from indexer.snapshot import (
    CARDS,
    COMMIT_VECTORS,
    FACT_COLUMNS,
    LEXICAL_DIR,
    CHUNK_TEXT,
    PART_TABLES,
    VECTORS_DIR,
    Manifest,
    PartRef,
    SnapshotError,
    data_dir_of,
    graph_path,
    live,
    lexical_schema,
    now_iso,
    open_chunks_arrow,
    open_history_lexical,
    open_lexical,
    open_manifest,
    part_file,
    parts_dir,
    parts_of,
    read_cards,
    read_graph,
    read_history_info,
    read_lance_chunks,
    read_part_chunks,
    read_edge_facts,
    read_part_info,
    read_part_table,
    store_error,
    unit_length,
    vector_matrix,
)

LEXICAL_FIELDS = ("org", "repo", "content", "symbol", "path")  # the text fields of snapshot.lexical_schema
# check_oldest: bytes of parts an unchanged run re-reads in full (at least one part, however large). deep_check
# read the 254 MiB of a 108k-chunk corpus (14 parts and the edges) in 0.28-0.34 s on 2 busy cores, and a no-change
# run there took 1.61 s with the check, 1.32 s without (median of 7, ci/bench_scale.py's corpus). So the check
# costs at most about a third of a second whatever the corpus: a corpus up to about 100k chunks is read whole on
# every run, one of 1M chunks (about 2.5 GB) once every 10 runs.
CHECK_BYTES_PER_RUN = 256 * 2**20
CHECKED = "checked.json"  # in the data dir: when each part was last deep-checked (not part of any snapshot)
OPENED = "opened.json"  # in the data dir: the snapshot open_check last passed, and what its files were then


def open_check(path: Path, manifest: Manifest) -> str | None:
    """Why the snapshot at `path` cannot be served, in a few words, or None when it opens.

    Every part's part.json, chunks.arrow footer and batch lengths and Parquet footers are read, and its live
    rows counted against the manifest; Tantivy is opened, each repo's term looked up and counted, and every term
    dictionary walked (corrupt term files panic only on the terms they hold). Measured on 72,000 chunks in 4
    repos (2 busy cores, format 2): 6 ms without the term walk, 90-120 ms with it. Flipped bytes inside data
    pages need `verify`, which reads everything.
    """
    try:
        refs = parts_of(path, manifest)
        rows = Counter()
        for ref in refs:
            problem = _part_opens(ref, manifest)
            if problem:
                return problem
            mapped = open_chunks_arrow(ref) if part_file(ref, "chunks").exists() else None
            if mapped is not None and ref.part_id is not None:
                table = live(mapped.read_all().select(["org", "repo", "path"]), ref.covered)
                rows.update(zip(table.column("org").to_pylist(), table.column("repo").to_pylist()))
        if manifest.format_version >= 3 and any(rows[(r.org, r.name)] != r.chunks for r in manifest.repos):
            return f"manifest says {manifest.chunks} chunks, its parts hold {sum(rows.values())} live rows"
    except BaseException as exc:
        if not store_error(exc):
            raise
        return f"parts: {_first_line(exc)}"
    try:
        docs, total = _lexical_counts(path, manifest, walk_terms=True)
    except BaseException as exc:
        if not store_error(exc):
            raise
        return f"lexical index: {_first_line(exc)}"
    if total != manifest.chunks or any(docs[(r.org, r.name)] != r.chunks for r in manifest.repos):
        return f"manifest says {manifest.chunks} chunks, lexical index has {total} documents"
    try:
        pq.read_metadata(graph_path(path, "edges"))
    except Exception as exc:
        return f"graph: {_first_line(exc)}"
    return _history_problem(path, manifest)


def open_check_kept(data_dir: Path, path: Path, manifest: Manifest) -> str | None:
    """open_check, for a run about to keep the snapshot at `path` (nothing changed upstream), skipped when it
    passed this snapshot last with every file under the snapshot and its parts as it was then: the same inode,
    size, mtime and ctime (a write moves ctime, and nothing sets it back). A no-change run at 10M chunks spent
    32 s in it, reading every part's footers and walking Tantivy's term dictionaries again. Damage that leaves a
    file's metadata alone (bits the disk flipped) is check_oldest's to find, as it is inside data pages anyway."""
    seen = {"snapshot_id": manifest.snapshot_id, "files": _files_digest(path, manifest)}
    state = data_dir / OPENED
    try:
        if json.loads(state.read_text(encoding="utf-8")) == seen:
            return None
    except (OSError, ValueError):  # lost or damaged: check
        pass
    problem = open_check(path, manifest)
    if problem is None:
        tmp = state.with_name(f".{OPENED}.tmp")
        tmp.write_text(json.dumps(seen), encoding="utf-8")
        os.replace(tmp, state)
    return problem


def _files_digest(path: Path, manifest: Manifest) -> str:
    """A digest of the path, inode, size, mtime and ctime of every file open_check may read."""
    root = parts_dir(data_dir_of(path))
    folders = [path, *(ref.dir for ref in parts_of(path, manifest) if ref.part_id is not None)]
    folders += [root / part_id for r in manifest.repos for part_id in r.history]
    digest = hashlib.sha256()
    for folder in folders:
        for f in sorted(folder.rglob("*")):
            st = f.stat()
            digest.update(f"{f}\0{st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}\n".encode())
    return digest.hexdigest()


def _history_problem(path: Path, manifest: Manifest) -> str | None:
    """Why the snapshot's history cannot be served, or None: every history part's history.json and Parquet
    footers read and its commits counted, and the commits index holding one document per commit."""
    root, total = parts_dir(data_dir_of(path)), 0
    try:
        for part_id in (p for r in manifest.repos for p in r.history):
            info = read_history_info(root / part_id)
            if pq.read_metadata(root / part_id / "commits.parquet").num_rows != info.commits:
                return f"history part {part_id}: history.json says {info.commits} commits, its table holds others"
            pq.read_metadata(root / part_id / "commit_changes.parquet")
            if info.model_id and pq.read_metadata(root / part_id / COMMIT_VECTORS).num_rows != info.commits:
                return f"history part {part_id}: history.json says {info.commits} commits, its vectors are others"
            total += info.commits
        index = open_history_lexical(path)
        documents = index.searcher().num_docs if index is not None else 0
    except BaseException as exc:
        if not store_error(exc):
            raise
        return f"history: {_first_line(exc)}"
    if documents != total:
        return f"history parts hold {total} commits, the commits index has {documents} documents"
    return None


@dataclass(frozen=True)
class Checkable:
    """One thing `deep_check` reads: a part (by part_id), or a snapshot's own tables (by snapshot id)."""

    key: str
    ref: PartRef | None  # None: the snapshot's edges
    bytes: int


def deep_check(path: Path, item: Checkable, rebuild: bool = False) -> list[str]:
    """What is wrong inside the bytes of a part (or a snapshot's edges), read in full: every chunk and card vector
    finite and of unit length, every string valid UTF-8 (Arrow's full validation, offsets too), every Parquet
    page's checksum, the trigram index's structure. The damage `open_check` cannot see: it reads footers and
    counts. `rebuild` (`blobdex verify`): the trigram index and chunk_text.parquet are also rebuilt from the
    chunks and compared, which the check every run makes (check_oldest) cannot afford: about 3 s a 100k rows."""
    if item.ref is None:  # the edges: a graph table of the snapshot's own directory
        return _parquet_problems(item.key, PartRef(None, path, frozenset()), ["edges"])
    ref, where = item.ref, f"part {item.key}"
    problems = []
    try:
        chunks = read_part_chunks(ref)
        chunks.validate(full=True)
        problems += _vector_problems(f"{where}: chunk", chunks)
        problems += _derived_problems(where, ref, chunks) if rebuild else _grams_problems(where, ref, len(chunks))
    except BaseException as exc:
        if not store_error(exc):
            raise
        problems.append(f"{where}: {part_file(ref, 'chunks').name}: {_first_line(exc)}")
    tables = list(PART_TABLES)
    if ref.part_id is not None:
        tables += ["paths", "card"] + ([CHUNK_TEXT] if part_file(ref, CHUNK_TEXT).exists() else [])
    elif part_file(ref, "card").exists():  # a format-1/2 snapshot's cards.parquet, which some have not
        tables.append("card")
    return problems + _parquet_problems(where, ref, tables)


def _grams_problems(where: str, ref: PartRef, rows: int) -> list[str]:
    """The trigram index opens as one (keys sorted, offsets in order) and names only blocks the part has."""
    path = part_file(ref, "grams")
    if not path.exists():
        return []
    try:
        index = grams.Grams(path, rows)
        if len(index.values) and int(index.values.max()) >= index.count:
            return [f"{where}: {path.name} names blocks past the part's {index.count}"]
    except BaseException as exc:
        if not store_error(exc):
            raise
        return [f"{where}: {path.name}: {_first_line(exc)}"]
    return []


def _derived_problems(where: str, ref: PartRef, chunks: pa.Table) -> list[str]:
    """A part's trigram index and chunk_text.parquet must be what its chunks give: an index that is not lets grep
    miss matching rows, and DuckDB's `chunks` must read what the server serves. A part written before either file
    existed has none."""
    problems = []
    for path, expected in (
        (part_file(ref, "grams"), lambda: grams.build(chunks.column("text").to_pylist())),
        (part_file(ref, CHUNK_TEXT), lambda: chunks.drop_columns(["vector"])),
    ):
        if not path.exists():
            continue
        try:
            if path.suffix == ".parquet":  # its pages' checksums: deep_check's tables
                stored = pq.read_table(path)
            else:
                stored = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            stored.validate(full=True)
            if not stored.equals(expected(), check_metadata=path.suffix != ".parquet"):
                problems.append(f"{where}: {path.name} does not hold what the part's chunks give")
        except BaseException as exc:
            if not store_error(exc):
                raise
            problems.append(f"{where}: {path.name}: {_first_line(exc)}")
    return problems


def _vector_problems(where: str, table: pa.Table) -> list[str]:
    vectors = vector_matrix(table)
    bad = int(np.sum(~unit_length(vectors))) if len(vectors) else 0
    return [f"{where} vectors: {bad} are not of unit length (or not finite)"] if bad else []


def _parquet_problems(where: str, ref: PartRef, tables: list[str]) -> list[str]:
    """Each table's pages checked against their checksums (a file with pages that carry none is decoded instead),
    and the card's vectors normed."""
    problems = []
    for table in tables:
        try:
            if check_pages(part_file(ref, table)):
                read_part_table(ref, table).validate(full=True)
            if table == "card":
                problems += _vector_problems(f"{where}: card", read_part_table(ref, table, columns=["vector"]))
        except BaseException as exc:
            if not store_error(exc):
                raise
            problems.append(f"{where}: {part_file(ref, table).name}: {_first_line(exc)}")
    return problems


def checked_items(path: Path, manifest: Manifest) -> list[Checkable]:
    """Everything `deep_check` reads of a snapshot, with its size on disk: its parts and its edges."""
    items = []
    for ref in parts_of(path, manifest):
        if ref.part_id is not None:
            items.append(Checkable(ref.part_id, ref, _bytes_under(ref.dir)))
        else:  # a format-1/2 snapshot is one part kept in its own directory, beside its lexical index
            items.append(Checkable(manifest.snapshot_id, ref, _bytes_under(path) - _bytes_under(path / LEXICAL_DIR)))
    edges = graph_path(path, "edges")
    items.append(Checkable(f"{manifest.snapshot_id}/edges", None, edges.stat().st_size if edges.exists() else 0))
    return items


def _bytes_under(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def check_oldest(data_dir: Path, path: Path, manifest: Manifest) -> str | None:
    """Deep-check (`deep_check`) the parts of a snapshot checked longest ago (never checked first) until
    CHECK_BYTES_PER_RUN bytes are read, at least one part; when each was checked is kept in <data_dir>/checked.json.
    A no-change run then costs the budget, not the corpus, and every part is re-read within size / budget runs.
    Returns the first problem found, in a few words, or None."""
    state_path = data_dir / CHECKED
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        state = state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        state = {}  # lost or damaged: everything counts as never checked
    items = checked_items(path, manifest)
    spent = 0
    problem = None
    for item in sorted(items, key=lambda i: str(state.get(i.key, ""))):
        if spent and spent + item.bytes > CHECK_BYTES_PER_RUN:
            break
        found = deep_check(path, item)
        if found:
            problem = found[0]
            break
        state[item.key] = now_iso()
        spent += item.bytes
    keys = {i.key for i in items}
    tmp = state_path.with_name(f".{CHECKED}.tmp")
    tmp.write_text(json.dumps({k: v for k, v in state.items() if k in keys}, sort_keys=True), encoding="utf-8")
    os.replace(tmp, state_path)
    return problem


def _part_opens(ref: PartRef, manifest: Manifest) -> str | None:
    """Why one part cannot be read (its info, its chunks' footer and row count, its Parquet footers), or None."""
    where = ref.part_id or "snapshot"
    expected = manifest.chunks
    if ref.part_id is not None:
        info = read_part_info(ref.dir)
        read_edge_facts(ref.dir)  # what an org's next edges read: damaged, every run of the org would fail
        if (info.model_id, info.dim) != (manifest.model_id, manifest.dim):
            return f"part {where} holds vectors of {info.model_id!r}, the manifest says {manifest.model_id!r}"
        expected = info.rows
    chunks = part_file(ref, "chunks")
    if chunks.exists():
        mapped = open_chunks_arrow(ref)
        rows = sum(mapped.get_batch(i).num_rows for i in range(mapped.num_record_batches))
        if rows != expected:
            return f"part {where}: {chunks.name} has {rows} rows, {expected} expected"
    elif ref.part_id is not None or not (ref.dir / VECTORS_DIR).exists():
        return f"part {where} has no {chunks.name}"
    else:  # a format-2 snapshot written before chunks.arrow: its Lance table, counted and touched
        table = read_part_chunks(ref)
        if table.num_rows != expected:
            return f"manifest says {expected} chunks, vectors table has {table.num_rows}"
    for table in PART_TABLES + (("paths", "card") if ref.part_id is not None else ()):
        pq.read_metadata(part_file(ref, table))
    if part_file(ref, CHUNK_TEXT).exists():
        pq.read_metadata(part_file(ref, CHUNK_TEXT))
    if ref.part_id is None and (ref.dir / CARDS).exists():
        pq.read_metadata(ref.dir / CARDS)
    return None


def _lexical_counts(path: Path, manifest: Manifest, walk_terms: bool) -> tuple[dict, int]:
    """Documents per repo by term lookup, and the total. With `walk_terms`, every field's whole term
    dictionary is read too: corrupt term files make Tantivy panic only on the terms they hold."""
    index = open_lexical(path)
    searcher = index.searcher()
    schema = lexical_schema()
    docs = {}
    for repo in manifest.repos:
        q = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(schema, "org", repo.org)),
                (tantivy.Occur.Must, tantivy.Query.term_query(schema, "repo", repo.name)),
            ]
        )
        docs[(repo.org, repo.name)] = searcher.search(q, 1, count=True).count
    if walk_terms:
        for name in LEXICAL_FIELDS:
            searcher.terms_with_prefix(name, "", limit=1)
    return docs, searcher.num_docs


def _lexical_rows(path: Path) -> list[int]:
    """The `row` of every document in the lexical index."""
    searcher = open_lexical(path).searcher()
    if not searcher.num_docs:
        return []
    hits = searcher.search(tantivy.Query.all_query(), searcher.num_docs).hits
    return searcher.fast_field_values("row", [address for _, address in hits])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def verify(data_dir: Path, snapshot_id: str | None = None) -> tuple[str, list[str]]:
    """(snapshot_id, problems): every count the manifest states, checked against each store read in full."""
    path, manifest = open_manifest(data_dir, snapshot_id)
    try:
        refs = parts_of(path, manifest)
        chunks = [live(read_part_chunks(ref), ref.covered) for ref in refs]
        graph = {
            t: [live(read_part_table(ref, t, page_checksum_verification=True), ref.covered) for ref in refs]
            for t in PART_TABLES
        }
        edges = read_graph(path, "edges", page_checksum_verification=True)
        cards = read_cards(path, page_checksum_verification=True)
        lexical_docs, lexical_total = _lexical_counts(path, manifest, walk_terms=True)
        lexical_rows = _lexical_rows(path)
        problems = [p for ref in refs if (p := _part_opens(ref, manifest))] + _legacy_copy(refs[0], manifest)
        problems += [p for item in checked_items(path, manifest) for p in deep_check(path, item, rebuild=True)]
    except BaseException as exc:  # pyo3's PanicException (corrupt Tantivy terms) is a BaseException
        if not store_error(exc):
            raise
        raise SnapshotError(
            f"cannot read the stores of snapshot {str(path)!r}: {_first_line(exc)}; rebuild with 'blobdex index --full'"
        ) from exc
    table = pa.concat_tables(chunks, promote_options="permissive")
    files = pa.concat_tables(graph["files"], promote_options="permissive")
    problems += _repo_counts(manifest, table, files, {t: _per_repo_all(graph[t]) for t in FACT_COLUMNS})
    problems += _lexical_problems(manifest, table, lexical_docs, lexical_total, lexical_rows)
    if edges.num_rows != manifest.edges:
        problems.append(f"manifest says {manifest.edges} edges, graph/edges.parquet has {edges.num_rows}")
    known = {(r.org, r.name) for r in manifest.repos}
    carded = set(_per_repo(cards)) if cards is not None else set()
    if not carded <= known:
        problems.append(
            f"cards for repos the manifest does not list: {', '.join(f'{o}/{n}' for o, n in sorted(carded - known))}"
        )
    for name, vectors in (("chunk", vector_matrix(table)), ("card", vector_matrix(cards) if cards else [])):
        if not len(vectors):
            continue
        if vectors.shape[1] != manifest.dim:  # their norms: deep_check
            problems.append(f"{name} vectors have dim {vectors.shape[1]}, the manifest says {manifest.dim}")
    return manifest.snapshot_id, problems + _codes_problems(path, refs)


def _codes_problems(path: Path, refs: list[PartRef]) -> list[str]:
    """The codebook reads, and each part's codes are one per row under it: a server searches what does not
    exactly (correct, and slower), which only `verify` says."""
    try:
        codebook = ann.Codebook.read(path / ann.CODEBOOK)
    except BaseException as exc:
        if not store_error(exc):
            raise
        return [f"{ann.CODEBOOK}: {_first_line(exc)}; vector search is exact until 'blobdex index --full'"]
    problems = []
    for ref in refs:
        codes_path = part_file(ref, "codes")
        if codebook is None or not codes_path.exists():
            continue
        try:
            codes, digest = ann.read_codes(codes_path)
        except BaseException as exc:
            if not store_error(exc):
                raise
            problems.append(f"part {ref.part_id}: {ann.CODES}: {_first_line(exc)}")
            continue
        rows, width = read_part_info(ref.dir).rows, codebook.index.sa_code_size()
        if digest == codebook.digest and codes.shape != (rows, width):
            problems.append(
                f"part {ref.part_id}: {ann.CODES} holds {codes.shape[0]} codes of {codes.shape[1]} bytes, "
                f"{rows} of {width} expected"
            )
    return problems


def _legacy_copy(ref: PartRef, manifest: Manifest) -> list[str]:
    """A format-2 snapshot's chunks.arrow must equal the Lance table it copies."""
    if ref.part_id is not None or not part_file(ref, "chunks").exists():
        return []
    table = read_lance_chunks(ref.dir)
    if not read_part_chunks(ref).equals(table):
        return [f"{part_file(ref, 'chunks').name} differs from the Lance table it copies"]
    return []


def _repo_counts(manifest: Manifest, chunks: pa.Table, files: pa.Table, facts: dict[str, Counter]) -> list[str]:
    problems = []
    rows, file_rows = _per_repo(chunks), _per_repo(files)
    skips = zip(files.column("org").to_pylist(), files.column("repo").to_pylist(), files.column("skip").to_pylist())
    indexed = Counter((o, r) for o, r, s in skips if s is None)
    for repo in manifest.repos:
        key, name = (repo.org, repo.name), f"{repo.org}/{repo.name}"
        if rows[key] != repo.chunks:
            problems.append(f"{name}: manifest says {repo.chunks} chunks, its parts hold {rows[key]} live rows")
        if file_rows[key] != repo.files:
            problems.append(f"{name}: manifest says {repo.files} files, files table has {file_rows[key]}")
        if indexed[key] != repo.files_indexed:
            problems.append(f"{name}: manifest says {repo.files_indexed} indexed files, files table has {indexed[key]}")
        for table, counted in facts.items():
            if counted[key] != repo.graph.get(table, 0):
                said = repo.graph.get(table, 0)
                problems.append(f"{name}: manifest says {said} {table} rows, the {table} table has {counted[key]}")
    for org, name in sorted(set(rows) - {(r.org, r.name) for r in manifest.repos}):
        problems.append(f"{org}/{name}: {rows[(org, name)]} chunk rows for a repo the manifest does not list")
    return problems


def _lexical_problems(manifest: Manifest, chunks: pa.Table, docs: dict, total: int, lexical_rows: list) -> list[str]:
    problems = []
    for repo in manifest.repos:
        if docs[(repo.org, repo.name)] != repo.chunks:
            problems.append(
                f"{repo.org}/{repo.name}: manifest says {repo.chunks} chunks, lexical index has "
                f"{docs[(repo.org, repo.name)]}"
            )
    if total != chunks.num_rows:
        problems.append(f"lexical index has {total} documents, the parts hold {chunks.num_rows} live rows")
    ids = chunks.column("row").to_numpy()
    if len(np.unique(ids)) != len(ids):
        problems.append("live rows share ids")
    if manifest.format_version < 3 and not np.array_equal(np.sort(ids), np.arange(len(ids))):
        problems.append("row ids are not 0..n-1 without gaps or repeats")
    if sorted(lexical_rows) != sorted(ids.tolist()):
        problems.append("the lexical index's rows are not the live chunk rows")
    return problems


def _per_repo(table) -> Counter:
    return Counter(zip(table.column("org").to_pylist(), table.column("repo").to_pylist()))


def _per_repo_all(tables: list) -> Counter:
    counts = Counter()
    for t in tables:
        counts.update(_per_repo(t))
    return counts
