"""A model that learns the organisation's code: the bundled model fine-tuned on pairs mined from the indexed
repos' own history, written as a sentence-transformers directory that `model = "..."` can name.

Two kinds of pair, both mined before a cutoff so that what an eval holds out is never trained on:
- doc: a definition's docstring or leading comment -> the definition without it, as the index embeds it
  (from the tree of the newest commit before the cutoff);
- commit: a commit's subject (and its body, trailers removed) -> the chunk of its parent that the change
  touched most (from commits older than the cutoff, chosen as `eval commits` and `eval issues` choose cases).

Training is in-batch contrastive (the multiple-negatives ranking loss: each text against every other pair's
code in its batch), one epoch at a small learning rate, on the CPU unless torch sees a GPU. The model's
directory carries TUNE_RECORD: the base model, the pairs and, per repo, the cutoff; `eval` reads it and
scores only cases newer than the cutoff, so a tuned model is never measured on what it learned from.

A model's directory is its identity: vectors are cached by (model, text), so a directory is written once
(a new name per tuning run) and never overwritten.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from dulwich.diff_tree import tree_changes

from indexer.config import Config, check_name
from indexer.embed import TORCH_ADVICE, embed_text, split_variant
from indexer.languages import GRAMMARS, language_for
from indexer.mirror import mirror_path, open_mirror
from indexer.prepare import prepare
from indexer.ignore import skip_for_path
from indexer.scan import ScanError, resolve_ref, scan_commit, selection
from indexer.secrets import credential_kind
from query.eval import EvalError
from query.eval.commits import MIN_SUBJECT_WORDS, SKIP_SUBJECT_RE, indexed_tip
from query.eval.issues import MAX_TRUTH_FILES, truth_files, without_trailers
from indexer.languages import is_test_file

TUNE_RECORD = "blobdex-tune.json"
MODELS_DIR = "models"
# Pairs per run: one epoch of 4,000 is about an hour of two busy CPU cores (2,125 took 23 min, 2,000 29 min:
# README "Measured"), minutes on a GPU.
MAX_PAIRS = 4000
MAX_WALK = 5000  # commits looked at per repo, newest first from the cutoff, as the evals walk
BATCH_SIZE = 32  # in-batch negatives: 31 other pairs' code per text
LEARNING_RATE = 2e-5  # a light touch: the base model already reads code; more forgets what it knew
WARMUP_SHARE = 0.1
SCALE = 20.0  # cosine -> logit, as sentence-transformers' MultipleNegativesRankingLoss
MIN_DOC_WORDS = 4
MAX_QUERY_CHARS = 1000  # about what the model reads (256 word pieces); the rest would be cut anyway
DEFINITIONS = frozenset({"function", "method", "class", "definition"})
LEGAL_RE = re.compile(r"copyright|licen[cs]e|spdx", re.I)
# A definition's leading comment lines, by language: //, /* ... */, * and /// in the C family; # where it opens
# a comment (not Rust's #[derive(...)] or C's #define); -- in Lua.
SLASHES, HASHES = r"//+|/\*+|\*+/?|\*/", r"#+(?!!)"
COMMENT_LINE_RES = {
    **{lang: re.compile(rf"^\s*(?:{HASHES})") for lang in ("python", "ruby", "bash")},
    "php": re.compile(rf"^\s*(?:{HASHES}|{SLASHES})"),
    "lua": re.compile(r"^\s*--+"),
}
C_COMMENT_LINE_RE = re.compile(rf"^\s*(?:{SLASHES})")
PY_DOCSTRING_RE = re.compile(
    r"^(?P<head>(?:\s*@.*\n)*\s*(?:async\s+)?(?:def|class)\b[^\n]*?:[ \t]*\n)"
    r"(?P<indent>[ \t]*)[rRuU]?(?P<quote>\"\"\"|''')(?P<doc>.*?)(?P=quote)[ \t]*\n?",
    re.S,
)


@dataclass(frozen=True, kw_only=True)
class Pair:
    """One training example: a text a person wrote and the code it is about, as the index embeds it."""

    query: str
    code: str
    kind: str  # "doc" | "commit"
    repo: str


@dataclass(frozen=True, kw_only=True)
class Cutoff:
    """Where mining stops in one repo: the tree of `commit_id` is mined, and only commits older than `time`."""

    repo: str
    org: str
    commit_id: str  # the newest commit before the cutoff (its tree gives the doc pairs)
    time: int  # seconds since the epoch: training commits are strictly older

    def as_dict(self) -> dict:
        when = datetime.fromtimestamp(self.time, timezone.utc).isoformat()
        return {**asdict(self), "time_iso": when}


def split_doc(text: str, lang: str) -> tuple[str, str] | None:
    """(doc, code without it) for a definition chunk that opens with a docstring or leading comment."""
    if lang == "python":
        m = PY_DOCSTRING_RE.match(text)
        if m:
            return m.group("doc"), m.group("head") + text[m.end() :]
    comment = COMMENT_LINE_RES.get(lang, C_COMMENT_LINE_RE)
    lines = text.split("\n")
    n = 0
    while n < len(lines) and comment.match(lines[n]):
        n += 1
    if n == 0 or n == len(lines):
        return None
    doc = "\n".join(comment.sub("", line, count=1).rstrip("*/ \t") for line in lines[:n])
    return doc, "\n".join(lines[n:])


def clean(text: str) -> str:
    return " ".join(text.split())[:MAX_QUERY_CHARS]


def doc_pairs(git, cut: Cutoff, spec_include=(), spec_exclude=(), max_bytes: int = 1 << 20) -> list[Pair]:
    """Docstring or comment -> definition, for every non-test source file at the cutoff's tree."""
    pairs = []
    scan = scan_commit(git, "tune", cut.commit_id, spec_include, spec_exclude)
    for f in scan.files:
        if f.skip is not None or f.lang not in GRAMMARS or is_test_file(f.path):
            continue
        entry = prepare(git.object_store[f.blob_id.encode()].as_raw_string(), f.lang, max_bytes, facts=False)
        for chunk in entry.chunks:
            if chunk.kind not in DEFINITIONS:
                continue
            split = split_doc(chunk.text, f.lang)
            if split is None:
                continue
            doc, code = clean(split[0]), split[1]
            if len(doc.split()) < MIN_DOC_WORDS or LEGAL_RE.search(doc) or code.count("\n") < 1:
                continue
            pairs.append(Pair(query=doc, code=embed_text(chunk.symbol, code), kind="doc", repo=cut.repo))
    return pairs


def _changed_lines(old: str, new: str) -> set[int]:
    """1-based lines of `old` that a change replaced or deleted, or next to which it inserted."""
    lines = set()
    matcher = difflib.SequenceMatcher(None, old.split("\n"), new.split("\n"), autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


def _touched_chunk(git, parent, commit, paths: tuple[str, ...], max_bytes: int):
    """The parent's chunk holding the most lines the commit changed, over the changed files: a definition
    before an import block or a file's top-level lines, which a change to one name also touches."""
    best, most = None, (False, 0)
    wanted = set(paths)
    for change in tree_changes(git.object_store, parent.tree, commit.tree):
        if change.type != "modify" or change.old.path.decode("utf-8", "replace") not in wanted:
            continue
        path = change.old.path.decode("utf-8", "replace")
        old = git.object_store[change.old.sha].as_raw_string()
        new = git.object_store[change.new.sha].as_raw_string()
        if len(old) > max_bytes or len(new) > max_bytes:
            continue
        entry = prepare(old, language_for(path), max_bytes, facts=False)
        changed = _changed_lines(old.decode("utf-8", "replace"), new.decode("utf-8", "replace"))
        for chunk in entry.chunks:
            count = sum(1 for n in changed if chunk.line_start <= n <= chunk.line_end)
            score = (count > 0 and chunk.kind in DEFINITIONS, count)
            if score > most:
                best, most = chunk, score
    return best


def commit_pairs(
    git, cut: Cutoff, limit: int, seed: int, max_bytes: int = 1 << 20, include=(), exclude=()
) -> list[Pair]:
    """A commit's text -> the chunk of its parent it changed most, for commits older than the cutoff, among
    the files the index would keep: the repo's include/exclude globs and the path rules (vendored, generated,
    minified ...; a .gitattributes of that commit is not read, as scanning every parent's tree would cost)."""
    kept = selection(include, exclude)
    chosen = []
    for entry in git.get_walker(include=[cut.commit_id.encode()], max_entries=MAX_WALK):
        commit = entry.commit
        if len(commit.parents) != 1 or commit.commit_time >= cut.time:
            continue
        subject, _, body = commit.message.decode("utf-8", "replace").strip().partition("\n")
        if len(subject.split()) < MIN_SUBJECT_WORDS or SKIP_SUBJECT_RE.search(subject):
            continue
        chosen.append((commit, subject.strip(), without_trailers(body)))
    random.Random(seed).shuffle(chosen)
    pairs = []
    for commit, subject, body in chosen:
        if len(pairs) >= limit:
            break
        parent = git[commit.parents[0]]
        paths = tuple(p for p in truth_files(git, parent, commit) if kept(p) and skip_for_path(p) is None)
        if not 1 <= len(paths) <= MAX_TRUTH_FILES:
            continue
        chunk = _touched_chunk(git, parent, commit, paths, max_bytes)
        text = clean(f"{subject}\n\n{body}" if body else subject)
        if chunk is not None and credential_kind(text) is None:  # a token pasted into a message is not learned
            pairs.append(Pair(query=text, code=embed_text(chunk.symbol, chunk.text), kind="commit", repo=cut.repo))
    return pairs


def _cutoff_time(before: str) -> int | None:
    """An ISO date or time (UTC unless it says otherwise) as seconds since the epoch; None when it is not one."""
    try:
        when = datetime.fromisoformat(before)
    except ValueError:
        return None
    return int((when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp())


def cutoff(cfg: Config, repo: str, org: str, before: str | None) -> Cutoff:
    """The cutoff in one repo: `before` is a commit (its parent's tree is mined, and commits older than it),
    an ISO date (the newest first-parent commit before it), or None (the indexed ref's tip, all its history)."""
    with indexed_tip(cfg, repo, org, "tune on") as (git, tip):
        if before is None:
            head = git[tip.encode()]
            return Cutoff(repo=repo, org=org, commit_id=tip, time=head.commit_time + 1)
        when = _cutoff_time(before)
        if when is None:
            try:
                _, commit_id = resolve_ref(git, before, repo)
            except ScanError:
                from dulwich.objectspec import parse_commit

                try:
                    commit_id = parse_commit(git, before.encode()).id.decode()
                except (KeyError, ValueError) as exc:
                    raise EvalError(
                        f"--before {before!r} is neither a commit of {repo!r} nor an ISO date (2024-04-23); "
                        f"give the commit 'blobdex eval issues' says its newer half starts at"
                    ) from exc
            commit = git[commit_id.encode()]
            if not commit.parents:
                raise EvalError(f"--before {before!r} is the root commit of {repo!r}: nothing is older to learn from")
            return Cutoff(repo=repo, org=org, commit_id=commit.parents[0].decode(), time=commit.commit_time)
        for entry in git.get_walker(include=[tip.encode()], max_entries=MAX_WALK * 4):
            if entry.commit.commit_time < when:
                return Cutoff(repo=repo, org=org, commit_id=entry.commit.id.decode(), time=when)
        raise EvalError(f"no commit of {repo!r} is older than {before}: nothing to learn from before it")


def mine(cfg: Config, cut: Cutoff, max_pairs: int, seed: int) -> list[Pair]:
    """Up to `max_pairs` of one repo, half of each kind where there are enough (the other kind fills in)."""
    spec = cfg.repo(cut.repo, cut.org)
    with open_mirror(mirror_path(cfg.data_dir, spec)) as git:
        docs = doc_pairs(git, cut, spec.include, spec.exclude, cfg.max_blob_bytes)
        random.Random(seed).shuffle(docs)
        commit_quota = max_pairs - min(len(docs), max_pairs // 2)
        commits = commit_pairs(git, cut, commit_quota, seed, cfg.max_blob_bytes, spec.include, spec.exclude)
    return docs[: max_pairs - len(commits)] + commits


def batches(pairs: list[Pair], size: int, seed: int) -> list[list[Pair]]:
    """Shuffled batches in which no two pairs share a text or a code (either would be a false negative)."""
    order = pairs[:]
    random.Random(seed).shuffle(order)
    out = []
    while len(order) > 1:
        batch, seen, rest = [], set(), []
        for pair in order:
            if len(batch) < size and pair.query not in seen and pair.code not in seen:
                batch.append(pair)
                seen.update((pair.query, pair.code))
            else:
                rest.append(pair)
        if len(batch) < 2:
            break
        out.append(batch)
        order = rest
    return out


def train(base: str, pairs: list[Pair], out: Path, epochs: int, seed: int, progress=None) -> dict:
    """Fine-tune `base` on the pairs and save it to `out`; returns the loss at the start and the end."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as exc:
        raise EvalError(f"blobdex tune trains with torch: {TORCH_ADVICE}") from exc

    from indexer.embed import SentenceTransformerEmbedder

    torch.manual_seed(seed)
    model = SentenceTransformerEmbedder(base).model
    device = model.device
    # Recomputing activations in the backward pass instead of holding them: a batch of 32 pairs peaked at
    # 9.8 GiB without, 3.7 GiB with, in about the same time on two CPU cores.
    transformer = getattr(model[0], "auto_model", None)
    if transformer is not None and getattr(transformer, "supports_gradient_checkpointing", False):
        renamed = getattr(transformer, "activation_checkpointing_enable", None)  # transformers 5; the old name warns
        (renamed or transformer.gradient_checkpointing_enable)()
    plan = [b for e in range(epochs) for b in batches(pairs, BATCH_SIZE, seed + e)]
    if not plan:
        raise EvalError(f"only {len(pairs)} training pair(s): need at least 2 to learn anything")
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    warmup = max(1, int(len(plan) * WARMUP_SHARE))

    def rate(step: int) -> float:  # linear warm-up, then linear decay to zero
        return (step + 1) / warmup if step < warmup else max(0.0, (len(plan) - step) / (len(plan) - warmup))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    model.train()
    losses, started = [], time.monotonic()

    def encode(texts: list[str]):
        features = {k: v.to(device) if hasattr(v, "to") else v for k, v in model.preprocess(texts).items()}
        return F.normalize(model(features)["sentence_embedding"], dim=-1)

    for step, batch in enumerate(plan):
        queries, codes = encode([p.query for p in batch]), encode([p.code for p in batch])
        loss = F.cross_entropy(queries @ codes.T * SCALE, torch.arange(len(batch), device=device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        if progress:
            progress(step + 1, len(plan), losses[-1])
    model.eval()
    model.save(str(out))
    window = max(1, len(losses) // 10)
    return {
        "steps": len(plan),
        "loss_first": round(sum(losses[:window]) / window, 4),
        "loss_last": round(sum(losses[-window:]) / window, 4),
        "train_seconds": round(time.monotonic() - started, 1),
    }


def models_dir(cfg: Config) -> Path:
    return cfg.data_dir / MODELS_DIR


def tune(
    cfg: Config,
    repos: list[str],
    name: str,
    org: str,
    before: str | None = None,
    epochs: int = 1,
    max_pairs: int = MAX_PAIRS,
    seed: int = 0,
    progress=None,
) -> dict:
    """Mine pairs from `repos` before the cutoff, fine-tune the configured model on them and write
    `<data_dir>/models/<name>/`; returns the record written beside the weights."""
    check_name("model", name)
    base, variant = split_variant(cfg.model)
    if variant:  # refused before minutes of mining, as is a missing torch
        raise EvalError(
            f"cannot tune model {cfg.model!r}: it is the {variant} variant of {base!r}, not weights to train; set "
            f"model = {base!r}, tune it, then name the tuned model's directory with {variant}"
        )
    if importlib.util.find_spec("torch") is None:
        raise EvalError(f"blobdex tune trains with torch: {TORCH_ADVICE}")
    out = models_dir(cfg) / name
    if out.exists():
        raise EvalError(
            f"a model named {name!r} already exists at {str(out)!r}; choose another --name (a model's "
            f"directory is its identity: vectors cached for it would not match new weights)"
        )
    if before is not None and len(repos) > 1 and _cutoff_time(before) is None:
        raise EvalError(f"--before {before!r} names a commit, which belongs to one repo: give one --repo, or a date")
    started = time.monotonic()
    cuts = [cutoff(cfg, repo, org, before) for repo in repos]
    pairs: list[Pair] = []
    for cut in cuts:
        pairs += mine(cfg, cut, max(max_pairs // len(cuts), 2), seed)
    mined = time.monotonic() - started
    tmp = models_dir(cfg) / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        result = train(cfg.model, pairs, tmp, epochs, seed, progress)
        record = {
            "base_model": base,
            "model": str(out.resolve()),
            "cutoffs": [c.as_dict() for c in cuts],
            "pairs": {k: sum(1 for p in pairs if p.kind == k) for k in ("doc", "commit")},
            "epochs": epochs,
            "seed": seed,
            "mine_seconds": round(mined, 1),
            **result,
        }
        (tmp / TUNE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def learned_until(model: str, org: str, repo: str) -> int | None:
    """The cutoff time of a tuned model for one repo (commits at or after it are unseen), None when the model
    was not tuned on that repo by blobdex. Its 8-bit and static variants learned what it learned."""
    path = Path(split_variant(model)[0]) / TUNE_RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    times = [c["time"] for c in record.get("cutoffs", []) if c.get("repo") == repo and c.get("org") == org]
    return max(times) if times else None
