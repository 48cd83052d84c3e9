"""The `blobdex eval` commands (queries, commits, issues, codesearchnet, routing): measure retrieval on your own
repos (measurement, not serving); and `blobdex tune`, which trains a model on the same histories the evals read."""

from __future__ import annotations

import json
from functools import partial

import click

from indexer.operate.cli import cli_config
from indexer.config import DEFAULT_ORG


def _progress(what: str, every: int, done: int, total: int) -> None:
    """A line on stderr every `every` items and at the end of a long eval."""
    if done % every == 0 or done == total:
        click.echo(f"eval: {done}/{total} {what}", err=True)


@click.group("eval")
def eval_group() -> None:
    """Measure retrieval on your own repos: BM25-only, vector-only and hybrid side by side."""


@eval_group.command("queries")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary and per-query rows as JSON.")
@click.pass_context
def eval_queries(ctx, path, org, as_json) -> None:
    """Score a JSONL file of {"query", "repo"?, "expected": [path or path:lines]} against the live snapshot."""
    from pathlib import Path

    from indexer.embed import configured_embedder
    from query.eval.metrics import configuration, render, run_cases
    from query.eval.queries import load_queries
    from query.reader import SnapshotReader

    cfg = cli_config(ctx)
    cases = load_queries(Path(path))
    reader = SnapshotReader(cfg.data_dir)
    from query.rerank import load_reranker

    reranker = load_reranker(cfg.reranker)
    embedder = configured_embedder(cfg)
    reader.check_model(embedder.model_id)
    result = {
        "configuration": configuration(reader, reranker),
        **run_cases(reader, embedder, cases, org, reranker),
    }
    click.echo(json.dumps(result, indent=2) if as_json else render(result))


MODEL_HELP = (
    "Measure with this sentence-transformers model (a name or local path); repeat it to compare models "
    "in one run. Default: the configured model."
)


# The cases of `eval issues` by commit time: the older half of each history (tune), the newer (test), or all.
SPLIT_OPTION = click.option(
    "--split",
    type=click.Choice(["tune", "test", "all"]),
    default="test",
    show_default=True,
    help="Which cases by commit time: the older half of each history (tune), the newer half (test), or all.",
)


def _history_sample(source: str, unit: str):
    """The options of an eval that samples a repo's history: the repo, how many, the seed, models and org."""
    options = [
        click.option("--repo", required=True, help=f"A configured, indexed repo whose history supplies the {source}."),
        click.option("--n", "count", default=150, show_default=True, type=int, help=f"How many {unit} to sample."),
        click.option("--seed", default=0, show_default=True, type=int),
        click.option("--model", "models", multiple=True, help=MODEL_HELP),
        click.option("--org", default=DEFAULT_ORG, show_default=True),
    ]

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command

    return apply


@eval_group.command("commits")
@_history_sample("queries", "commits")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary and per-commit rows as JSON (a list, one object per model, with --model twice).",
)
@click.pass_context
def eval_commits_cmd(ctx, repo, count, seed, models, org, as_json) -> None:
    """Query each sampled commit's subject against its parent commit and score the files it changed."""
    from query.eval.commits import eval_commits
    from query.eval.metrics import render

    cfg = cli_config(ctx, must_exist=True)
    report = partial(_progress, "commits", 10)
    unseen = _unseen_from(models or (cfg.model,), org, repo)
    _per_model(
        cfg,
        models,
        as_json,
        render,
        lambda c, embedder, reranker: eval_commits(c, repo, count, seed, embedder, org, report, reranker, unseen),
    )


@eval_group.command("issues")
@_history_sample("task texts", "cases")
@SPLIT_OPTION
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary, split, query lengths and per-case rows as JSON (a list with --model twice).",
)
@click.pass_context
def eval_issues_cmd(ctx, repo, count, seed, split, models, org, as_json) -> None:
    """Ask each sampled long commit message or pull-request description against its parent commit and score
    the non-test source files it changed: hit@1/3/5/10 and MRR, with the query length distribution."""
    from query.eval.issues import eval_issues, render

    cfg = cli_config(ctx, must_exist=True)
    report = partial(_progress, "cases", 10)
    unseen = _unseen_from(models or (cfg.model,), org, repo)
    _per_model(
        cfg,
        models,
        as_json,
        render,
        lambda c, embedder, reranker: eval_issues(
            c, repo, count, seed, embedder, org, split, report, reranker, unseen_from=unseen
        ),
    )


def _unseen_from(models: tuple[str, ...], org: str, repo: str) -> int | None:
    """The latest cutoff of the models `blobdex tune` made from this repo's history: every model is measured
    on the same cases, the ones none of them learned from."""
    from query.eval.tune import learned_until

    cutoffs = [t for t in (learned_until(m, org, repo) for m in models) if t is not None]
    return max(cutoffs) if cutoffs else None


@eval_group.command("codesearchnet")
@click.argument("annotations", type=click.Path(exists=True))
@click.option("--repo", required=True, help="The configured repo that mirrors sourcegraph-testing/codesearchnet.")
@click.option(
    "--depth",
    default=200,
    show_default=True,
    type=click.IntRange(1, 5000),
    help="Candidates per signal; an annotated span ranked deeper gains nothing.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    help=MODEL_HELP + " With --model the corpus is indexed into a scratch snapshot; without it the "
    "live snapshot is measured.",
)
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary and per-query rows as JSON.")
@click.pass_context
def eval_codesearchnet_cmd(ctx, annotations, repo, depth, models, org, as_json) -> None:
    """NDCG ("within") on the CodeSearchNet challenge's graded human judgements (ANNOTATIONS: the folder
    holding annotationStore.csv, or the file)."""
    from pathlib import Path

    from query.eval import codesearchnet
    from query.eval.metrics import configuration
    from query.eval.scratch import drop_scratch, index_scratch
    from query.reader import SnapshotReader

    cfg = cli_config(ctx, must_exist=True)
    report = partial(_progress, "queries", 100)

    def measure(c, embedder, reranker):
        if models:
            click.echo(f"eval: indexing {repo} with {c.model}", err=True)
            reader = index_scratch(c, repo, org, embedder)
        else:
            reader = SnapshotReader(c.data_dir)
            reader.check_model(embedder.model_id)
        result = codesearchnet.evaluate(reader, embedder, Path(annotations), repo, org, depth, report, reranker)
        if models:
            drop_scratch(c, repo, org)
        return {"configuration": configuration(reader, reranker), **result}

    _per_model(cfg, models, as_json, codesearchnet.render_with_configuration, measure)


@click.command("tune")
@click.option("--name", required=True, help="The new model's name: it is written to <data_dir>/models/NAME/.")
@click.option("--repo", "repos", multiple=True, help="Learn from this repo (repeatable). Default: every repo of --org.")
@click.option(
    "--before",
    help="Learn only from history before this: a commit (of the one --repo; 'blobdex eval issues' names the commit "
    "its held-out half starts at) or an ISO date. Default: all history up to the indexed commit.",
)
@click.option("--epochs", default=1, show_default=True, type=click.IntRange(1, 10))
@click.option(  # the default is tune.MAX_PAIRS (tune is imported only when it runs)
    "--max-pairs", default=4000, show_default=True, type=click.IntRange(2, 100_000), help="Pairs mined, at most."
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the record written beside the model as JSON.")
@click.pass_context
def tune_cmd(ctx, name, repos, before, epochs, max_pairs, seed, org, as_json) -> None:
    """Fine-tune the configured model on your own repos: docstrings and comments -> the code they document,
    commit messages -> the code they changed. Compare it before using it: blobdex eval issues --model A --model B."""
    from query.eval.tune import tune

    cfg = cli_config(ctx, must_exist=True)
    names = list(repos) or [r.name for r in cfg.repos if r.org == org]
    if not names:
        raise click.UsageError(f"no repo is configured in org {org!r}; add one with 'blobdex repo add'")

    def report(step: int, steps: int, loss: float) -> None:
        if step % 10 == 0 or step == steps:
            click.echo(f"tune: step {step}/{steps}, loss {loss:.3f}", err=True)

    record = tune(cfg, names, name, org, before, epochs, max_pairs, seed, report)
    if as_json:
        click.echo(json.dumps(record, indent=2))
        return
    cut = ", ".join(f"{c['repo']} before {c['time_iso'][:10]} ({c['commit_id'][:12]})" for c in record["cutoffs"])
    p = record["pairs"]
    click.echo(
        f"tuned {name}: {p['doc'] + p['commit']} pairs ({p['doc']} doc, {p['commit']} commit) from {cut}; "
        f"loss {record['loss_first']} -> {record['loss_last']} over {record['steps']} steps in "
        f"{record['train_seconds']:g} s"
    )
    click.echo(f"compare: blobdex eval issues --repo {names[0]} --model {cfg.model} --model {record['model']}")
    click.echo(f'use it:  model = "{record["model"]}" in blobdex.toml, then blobdex index (everything is re-embedded)')


def _per_model(cfg, models, as_json: bool, render, measure) -> None:
    """Run `measure(config, embedder, reranker)` once per model and print each result (JSON: a list when
    several). A configured reranker adds a `rerank` column (hybrid, then the cross-encoder)."""
    from dataclasses import replace

    from indexer.embed import configured_embedder
    from query.rerank import load_reranker

    results, reranker = [], load_reranker(cfg.reranker)
    for model in models or (cfg.model,):
        c = replace(cfg, model=model)
        results.append(measure(c, configured_embedder(c), reranker))
        if not as_json:
            click.echo(("\n" if len(results) > 1 else "") + render(results[-1]))
    if as_json:
        click.echo(json.dumps(results[0] if len(results) == 1 else results, indent=2))


@eval_group.command("routing")
@click.option("--repos", required=True, help="Comma-separated repos whose cases are pooled.")
@click.option("--n", "count", default=50, show_default=True, type=int, help="Cases sampled per repo.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--cases",
    "kind",
    type=click.Choice(["subjects", "issues"]),
    default="subjects",
    show_default=True,
    help="Commit subjects (as eval commits samples them) or long task texts (as eval issues does, from --split).",
)
@SPLIT_OPTION
@click.option("--mask", is_flag=True, help="Replace every pooled repo's name and package names by PKG in the queries.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def eval_routing_cmd(ctx, repos, count, seed, kind, split, mask, org, as_json) -> None:
    """route_task on pooled cases: top-1 accuracy and MRR of the owning repo (live snapshot)."""
    from indexer.embed import configured_embedder
    from query.eval.metrics import configuration_line
    from query.eval.routing import eval_routing
    from query.reader import SnapshotReader

    cfg = cli_config(ctx, must_exist=True)
    names = [r.strip() for r in repos.split(",") if r.strip()]
    reader, embedder = SnapshotReader(cfg.data_dir), configured_embedder(cfg)
    reader.check_model(embedder.model_id)
    result = eval_routing(cfg, reader, embedder, names, count, seed, org, kind, split, mask)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(configuration_line(result))
        s, c = result["summary"], result["cases_from"]
        where = f"{c['kind']}" + (f", {c['split']} half" if c["split"] else "")
        masked = f", masked: {', '.join(c['masked'])}" if c["masked"] else ""
        click.echo(f"routing ({where}{masked}): n {s['n']}  top-1 {s['top1']}  mrr {s['mrr']}")
