"""Call resolution in a run: the call rows of the paths a run writes resolved (indexer/calls/rules.py) against each
repo as the run leaves it and the org's other repos, the SCIP indexers' answers taken where `scip = true`; and
what else must be written for it, because the calls there now resolve elsewhere: unchanged paths of a changed
repo (a definition moved, a re-export changed), and paths of repos that import a changed repo's packages."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from indexer import snapshot
from indexer.calls.code import last_name, names_any
from indexer.calls.declared import declared, java_packages, python_packages
from indexer.build.parts import RepoLive, inside, outside
from indexer.calls.rules import Code, Declared, Resolver, World, resolve_calls
from indexer.calls.scip import FAMILY as SCIP_FAMILY
from indexer.calls.scip import Precise, ScipError, agreement, apply, index_commit, scip_targets
from indexer.snapshot import RESOLUTION_COLUMNS, RepoState

if TYPE_CHECKING:
    from indexer.build.work import Run
    from indexer.build.work import Change


def trees_of(run: Run, changes: dict) -> dict[tuple[str, str], dict]:
    """What resolution reads of each changed repo as the run leaves it (see _tree): made once a run, since a
    change written again over more paths (resolve_changes' answer) leaves its repo's tree as it was."""
    return {key: _tree(run, change) for key, change in changes.items()}


@dataclass(frozen=True)
class Moved:
    """What a run's changes may move in one org: the names whose definitions or imports differ between the
    changed paths before and after the run (None: any name may move), and the paths written (repo, path). A
    stored call keeps its resolution unless its callee is such a name, its file imports one, or it resolved
    into such a path (touches)."""

    names: frozenset[str] | None
    paths: frozenset[tuple[str, str]]  # (repo, path)

    def reaches(self, inputs: dict) -> bool:
        """Whether any stored call of a repo, by its part's `edge_inputs`, may be touched: it calls or imports a
        moved name, or resolved into a path written. True for a part written before parts said so."""
        reach = inputs.get("reach")
        if self.names is None or reach is None:
            return True
        return names_any(reach, self.names) or any(p in reach["into"].get(r, ()) for r, p in self.paths)

    def touches(self, calls: pa.Table, imports: pa.Table) -> pa.Array | None:
        """Which call rows (of a repo whose `imports` rows, path, module and name, these are) may resolve
        differently now (None: every row may): a callee of a moved name, a call resolved into a path written,
        or any call of a file that imports a moved name or a module of one (`from m import f as g; g()` calls
        no `f`; `import pkg.new as n; n.g()` calls no `new`)."""
        if self.names is None:
            return None
        names = pa.array(sorted(self.names), pa.string())
        rows = zip(*(imports.column(c).to_pylist() for c in ("path", "module", "name")))
        importing = {p for p, module, name in rows if name in self.names or last_name(module) in self.names}
        importing = pa.array(sorted(importing), pa.string())
        at = pc.binary_join_element_wise(calls["resolved_repo"], calls["resolved_path"], "\0")
        into = pc.is_in(at, value_set=pa.array(sorted(f"{r}\0{p}" for r, p in self.paths), pa.string()))
        return pc.or_(
            pc.or_(pc.is_in(calls["callee"], value_set=names), into), pc.is_in(calls["path"], value_set=importing)
        )


def moved(run: Run, changes: dict, trees: dict) -> dict[str, Moved]:
    """Per org, what the run's changes may move (Moved), worked out once, from the first pass's changes."""
    found: dict[str, Moved] = {}
    for org in sorted({org for org, _ in changes}):
        names: set[str] | None = set()
        paths = set()
        for (o, repo), change in changes.items():
            if o != org:
                continue
            paths |= {(repo, p) for p in change.paths or ()}
            more = _moved_names(run, change, trees[(o, repo)]) if names is not None else None
            names = None if more is None else names | more
        found[org] = Moved(None if names is None else frozenset(names), frozenset(paths))
    return found


def _moved_names(run: Run, change: Change, tree: dict) -> set[str] | None:
    """The names the definitions and imports of a change's paths differ by; None when any name may move: the
    repo is written whole, a class's own line changed (its bases, so every inherited member), a `*` import
    changed, or the packages and modules the repo declares changed."""
    before_state = run.base.manifest.repo(change.state.org, change.state.name) if run.base else None
    if change.live is None or change.paths is None or before_state is None or not before_state.parts:
        return None
    cols = ("path", "name", "qualified_name", "kind", "signature")
    before, after = (
        _rows_of(inside(change.live.table("symbols", cols), change.paths), cols),
        _rows_of(change.new["symbols"], cols),
    )
    differ = before ^ after
    both = {(p, q) for p, _, q, _, _ in before} & {(p, q) for p, _, q, _, _ in after}
    if any(kind == "class" and (p, q) in both for p, _, q, kind, _ in differ):
        return None
    names = {n for _, n, _, _, _ in differ}
    cols = ("path", "module", "name", "alias")
    for _, module, what, alias in _rows_of(inside(change.live.table("imports", cols), change.paths), cols) ^ _rows_of(
        change.new["imports"], cols
    ):
        if what == "*":
            return None
        names |= {n for n in (alias, what, last_name(module)) if n}
    # a file that comes or goes changes the modules there are: its name, and its folder's (a package's
    # __init__.py, a JS index), move whatever is imported through them
    were = set(inside(change.live.table("files", ("path",)), change.paths).column("path").to_pylist())
    are = set(change.new["files"].column("path").to_pylist())
    for path in were ^ are:
        folder, _, file = path.rpartition("/")
        names |= {n for n in (file.split(".")[0], folder.rpartition("/")[2]) if n}
    # a class of the repo whose bases name a moved name (`class Base(Mx)`, Mx now another class) may now
    # inherit any member
    for name, kind, signature in zip(*(tree["symbols"].column(c).to_pylist() for c in ("name", "kind", "signature"))):
        if kind == "class" and names & (set(re.findall(r"[A-Za-z_$][\w$]*", signature)) - {name}):
            return None
    info = run.part_info(before_state).edge_inputs
    paths = tree["files"].column("path").to_pylist()
    now = (sorted(python_packages(paths)), sorted(java_packages(paths)), tree["manifests"])
    then = (sorted(info.get("packages", {})), sorted(info.get("java", [])), info.get("declared", {}))
    return names if json.dumps(now, sort_keys=True) == json.dumps(then, sort_keys=True) else None


def _rows_of(table: pa.Table, columns: tuple[str, ...]) -> set[tuple]:
    return set(zip(*(table.column(c).to_pylist() for c in columns)))


def resolve_changes(
    run: Run,
    changes: dict,
    trees: dict,
    moves: dict[str, Moved],
    only: set | None = None,
    answers: dict | None = None,
) -> dict[tuple[str, str], set[str]]:
    """Resolve the call rows each change (or those of `only`) writes, against its repo as the run leaves it
    (`trees`) and the org's other repos; returns, per repo, the unchanged paths whose stored calls now resolve
    differently: of those, only the calls the run's `moves` touch are resolved again (all of them with SCIP's
    answers, whose type inference follows more than names). `answers` keeps the SCIP indexers' answers per repo
    between calls (config `scip`)."""
    answers = {} if answers is None else answers
    worlds: dict[str, World] = {}
    stale: dict[tuple[str, str], set[str]] = {}
    for key, change in changes.items():
        if only is not None and key not in only:
            continue
        org, name = key
        if org not in worlds:
            worlds[org] = _world(run, org, trees)
        resolver = Resolver(worlds[org].code(name), worlds[org])
        if run.cfg.scip and key not in answers:
            answers[key] = _precise(run, key, change, trees[key])
        precise = answers.get(key)
        change.new["calls"] = _resolved(change.new["calls"], resolver, precise, trees[key], run.report, key)
        if only is None and change.live is not None and change.paths is not None:
            kept = outside(change.live.table("calls"), change.paths)
            imports = outside(change.live.table("imports", ("path", "module", "name")), change.paths)
            touched = moves[org].touches(kept, imports) if precise is None else None
            kept = kept if touched is None else kept.filter(touched)
            run.report.calls_resolved_again += kept.num_rows
            again = _resolved(kept, resolver, precise, trees[key])
            if precise is None:  # no SCIP answers this run: a call an earlier run's SCIP resolved keeps them
                again = _kept_answers(kept, again)
            differ = _differ(kept, again)
            if differ:
                stale[key] = differ
    return stale


def _precise(run: Run, key: tuple[str, str], change: Change, tree: dict) -> Precise | None:
    """The SCIP indexers' answers for a repo this run writes (config `scip`), at its first ref; None, with a note
    saying why, when there are none."""
    langs = set(tree["files"].column("lang").to_pylist())
    work = next(w for w in run.work if w.spec.key == key)
    ref = change.state.refs[0] if change.state.refs else None
    if ref is None or not langs & set(SCIP_FAMILY):
        return None
    try:
        return index_commit(work.mirror_path, ref.commit_id, key[1], langs, run.cfg.scip_timeout_seconds)
    except ScipError as exc:
        note = f"repo {key[1]!r}: calls keep blobdex's own resolution: {exc}"
        if note not in run.report.notes:
            run.report.notes.append(note)
        return None


def _resolved(calls: pa.Table, resolver: Resolver, precise, tree: dict, report=None, key=None) -> pa.Table:
    """Call rows resolved, the SCIP answers taken where there are some; the report gets how often the two agreed
    (over the rows of the run's changed paths)."""
    calls = resolve_calls(calls, resolver)
    if precise is None:
        return calls
    targets = scip_targets(calls, tree["symbols"], precise.documents, precise.sources, resolver.code.name)
    if report is not None:
        figures = agreement(calls, targets).to_dict()
        report.scip[f"{key[0]}/{key[1]}"] = {**figures, "tools": precise.tools, "seconds": round(precise.seconds, 1)}
    return apply(calls, targets, resolver.code.name)


LOOSE = ("name_only", "unresolved")  # resolutions a definition that appears elsewhere may turn into another
TREE_COLUMNS = {
    "files": ("path", "lang"),
    "symbols": ("path", "name", "qualified_name", "kind", "parent", "signature", "line"),
    "imports": ("path", "module", "name", "alias"),
}


def _tree(run: Run, change: Change) -> dict:
    """What resolution reads of a repo as the run leaves it: its unchanged live rows and the new ones, and the
    Go modules and npm packages its manifests declare (edges.declared)."""
    tree: dict = {}
    for table, columns in TREE_COLUMNS.items():
        new = change.new[table].select(list(columns))
        if change.live is None or change.paths is None:
            tree[table] = new
        else:
            tree[table] = pa.concat_tables([outside(change.live.table(table, columns), change.paths), new])
    manifests = declared(change.new["chunks"].select(["path", "chunk_index", "text"]))
    before = run.base.manifest.repo(change.state.org, change.state.name) if run.base else None
    if change.live is not None and change.paths is not None and before is not None and before.parts:
        kept = run.part_info(before).edge_inputs.get("declared", {})
        for kind, found in kept.items():
            manifests.setdefault(kind, {}).update({p: v for p, v in found.items() if p not in change.paths})
    tree["manifests"] = manifests
    return tree


def _world(run: Run, org: str, trees: dict) -> World:
    """The org's repos for resolution: those this run changes as it leaves them, the others as the base holds
    them (read when a call first needs them); and what each declares (packages, modules)."""
    base = run.base
    known = Declared()
    for (o, name), tree in sorted(trees.items()):
        if o == org:
            paths = tree["files"].column("path").to_pylist()
            known.add(name, python_packages(paths), java_packages(paths), tree["manifests"])
    gone = set(run.removed())  # the config dropped them: nothing resolves into them any more
    states = [r for r in base.manifest.repos if r.org == org and r.parts and (org, r.name) not in gone] if base else []
    for state in states:
        if (org, state.name) not in trees:
            inputs = run.part_info(state).edge_inputs
            known.add(
                state.name, set(inputs.get("packages", {})), set(inputs.get("java", [])), inputs.get("declared", {})
            )

    def load(name: str) -> Code | None:
        tree = trees.get((org, name))
        if tree is None and base is not None and any(s.name == name for s in states):
            live = base.live(org, name)
            tree = {t: live.table(t, columns) for t, columns in TREE_COLUMNS.items()}
        return Code(name, tree["files"], tree["symbols"], tree["imports"]) if tree is not None else None

    return World(load, known)


def importers(run: Run, changes: dict, trees: dict, moves: dict[str, Moved]) -> dict[tuple[str, str], tuple]:
    """Repos this run leaves as they are whose calls may now resolve elsewhere, because a repo they import or
    call into changed or was removed (a definition moved, a re-export changed, a package went): the paths whose
    calls do are written again, from the base's rows, with their calls resolved anew: key -> (live rows, paths,
    new rows, state). Looked for in the calls the run's moves touch (a callee of a name that moved, a call
    resolved into a path written); where any name may have moved, or a repo went, in the files that import
    what a changed or removed repo declares, those whose calls resolved into one (through a third repo's
    re-export, say) and those with an unresolved call of a name the changed paths define."""
    base = run.base
    if base is None:
        return {}
    gone = run.removed()
    found: dict[tuple[str, str], tuple] = {}
    for org in sorted({org for org, _ in [*changes, *gone]}):
        wide = org not in moves or moves[org].names is None or any(o == org for o, _ in gone)
        wide_paths = _Wide(run, org, changes, trees, gone) if wide else None
        world = None
        for w in run.work:
            state = base.manifest.repo(*w.spec.key)
            if w.spec.org != org or w.spec.key in changes or not w.ok or state is None or not state.parts:
                continue
            if not (wide_paths.reaches(state) if wide else moves[org].reaches(run.part_info(state).edge_inputs)):
                continue  # no stored call of the repo names what moved: its calls are not read
            run.report.repos_calls_read += 1
            live = base.live(org, w.spec.name)
            if wide:
                stored = inside(live.table("calls"), wide_paths.paths(state, live))
            else:  # the few columns that say which calls are touched first, then those files' calls whole
                probe = live.table("calls", ("path", "callee", "resolved_repo", "resolved_path"))
                mask = moves[org].touches(probe, live.table("imports", ("path", "module", "name")))
                stored = inside(live.table("calls"), set(probe.filter(mask).column("path").to_pylist()))
            if not stored.num_rows:
                continue
            run.report.calls_resolved_again += stored.num_rows
            world = world or _world(run, org, trees)
            resolver = Resolver(world.code(w.spec.name), world)
            again = _kept_answers(stored, resolve_calls(stored, resolver))  # every call of the touched files
            paths = _differ(stored, again)
            if paths:
                new = {t: inside(live.table(t), paths) for t in ("paths", "files", *snapshot.FACT_COLUMNS)}
                new["calls"] = inside(again, paths)
                new["chunks"] = inside(live.table("chunks"), paths).drop_columns(["row", "vector"])
                state = replace(state, refs=list(state.refs), parts=list(state.parts))
                found[w.spec.key] = (live, paths, new, state)  # a Change's fields
    return found


class _Wide:
    """For an org where any name may have moved: which paths of an unchanged repo to resolve again (see
    importers): those importing what a changed or removed repo declares, before the run or after it, those
    whose calls resolved into one, and those with an unresolved call of a name the changed paths define."""

    def __init__(self, run: Run, org: str, changes: dict, trees: dict, gone: list):
        self.run = run
        self.changed = changed = Declared()  # what the changed and removed repos declare, before and after
        for (o, name), tree in trees.items():
            if o == org:
                paths = tree["files"].column("path").to_pylist()
                changed.add(name, python_packages(paths), java_packages(paths), tree["manifests"])
        for o, name in [*(k for k in trees if k[0] == org), *(k for k in gone if k[0] == org)]:
            before = run.base.manifest.repo(o, name)
            if before is not None and before.parts:
                i = run.part_info(before).edge_inputs
                changed.add(name, set(i.get("packages", {})), set(i.get("java", [])), i.get("declared", {}))
        self.repos = {name for o, name in [*changes, *gone] if o == org}
        # names the changed paths define: a call that resolved to nothing may resolve to one now (through a
        # re-export of a third repo that found nothing before)
        self._importing: dict[str, bool] = {}
        self.defined = {
            n for (o, _), c in changes.items() if o == org for n in c.new["symbols"].column("name").to_pylist()
        }

    def _imports(self, state: RepoState) -> bool:
        """Whether the repo imports a module a changed or removed repo declares (asked twice a repo: remembered)."""
        if state.name not in self._importing:
            modules = self.run.edge_facts(state).get("modules", [])
            self._importing[state.name] = any(_names(self.changed, m) for m in modules)
        return self._importing[state.name]

    def reaches(self, state: RepoState) -> bool:
        """Whether any path of the repo may be resolved again, by its part's `edge_inputs` (True for a part
        written before parts said what their calls reach)."""
        reach = self.run.part_info(state).edge_inputs.get("reach")
        if reach is None or self._imports(state):
            return True
        return not self.repos.isdisjoint(reach["into"]) or names_any(reach, self.defined)

    def paths(self, state: RepoState, live: RepoLive) -> set[str]:
        found = set()
        if self._imports(state):
            imports = live.table("imports", ("path", "module"))
            rows = zip(*(imports.column(c).to_pylist() for c in ("path", "module")))
            found |= {p for p, m in rows if _names(self.changed, m)}
        calls = live.table("calls", ("path", "resolved_repo", "resolution", "callee"))
        rows = zip(*(calls.column(c).to_pylist() for c in ("path", "resolved_repo", "resolution", "callee")))
        return found | {p for p, r, how, callee in rows if r in self.repos or (how in LOOSE and callee in self.defined)}


def _names(known: Declared, module: str) -> bool:
    """Whether an import names something `known` declares: a Python package (its first name), a Go module or
    an npm package (a path below it) or a Java package (a class of it)."""
    if module.split(".")[0] in known.python or module.rpartition(".")[0] in known.java or module in known.java:
        return True
    return any(module == m or module.startswith(m + "/") for m, _, _ in known.go) or any(
        module == n or module.startswith(n + "/") for n in known.npm
    )


def _kept_answers(stored: pa.Table, again: pa.Table) -> pa.Table:
    """`again` (stored calls resolved anew, without SCIP) with the answers an earlier run's SCIP gave kept."""
    scip = pc.equal(stored["resolution"], "scip")
    for c in RESOLUTION_COLUMNS:
        again = again.set_column(again.schema.get_field_index(c), c, pc.if_else(scip, stored[c], again[c]))
    return again


def _differ(stored: pa.Table, again: pa.Table) -> set[str]:
    """The paths of call rows whose resolution differs between `stored` and `again` (the same rows)."""
    before = zip(*(stored.column(c).to_pylist() for c in RESOLUTION_COLUMNS))
    after = zip(*(again.column(c).to_pylist() for c in RESOLUTION_COLUMNS))
    return {path for path, b, a in zip(stored.column("path").to_pylist(), before, after) if b != a}
