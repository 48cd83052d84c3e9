"""An agent reads back exactly what was indexed, and every bad input on CLI and MCP gets one sentence."""

import asyncio
import json
import re
import socket
from dataclasses import replace

import httpx
import pytest
from click.testing import CliRunner
from dulwich.repo import Repo
from mcp import Client

from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.build import run
from query.cli import cli
from query.surfaces.app import app
from query.surfaces.mcp import build
from query.service import Service, indexed_ref
from tests import gitrepo
from tests.corpus import write_config
from tests.servers import Server, call, structured, text

MAIN_PY = b'# a header that only main has\ndef a():\n    return "main"\n'
V1_PY = b'def a():\n    return "v1"\n'


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """`mini`: HEAD is main, the indexed ref is v1. `dangling`: indexed at v1, its mirror's HEAD names nothing."""
    root = tmp_path_factory.mktemp("trust")
    for name in ("mini", "dangling"):
        repo = gitrepo.init(root / "src" / name)
        main = gitrepo.commit(repo, {"m.py": MAIN_PY}, "main")
        gitrepo.commit(repo, {"m.py": V1_PY}, "v1", parents=[main.encode()])
    cfg = write_config(root, [RepoSpec(name=n, url=str(root / "src" / n), refs=("v1",)) for n in ("mini", "dangling")])
    run(cfg, show_progress=False)
    with Repo(str(cfg.data_dir / "mirrors" / "default" / "dangling.git")) as mirror:
        mirror.refs.set_symbolic_ref(b"HEAD", b"refs/heads/master")
    return cfg


@pytest.fixture(scope="module")
def service(world):
    return Service(world, embedder=HashEmbedder())


def blobdex(cfg, *args):
    return CliRunner().invoke(cli, ["--config", str(cfg.path), *args])


# -- 1. get_file defaults to what was indexed -----------------------------------------------


@pytest.mark.parametrize("repo", ["mini", "dangling"])
def test_cli_get_file_without_ref_reads_the_indexed_ref(world, repo):
    out = blobdex(world, "get-file", repo, "m.py", "--lines", "1-2")
    assert out.exit_code == 0, out.output
    assert out.output == V1_PY.decode()


@pytest.mark.parametrize("repo", ["mini", "dangling"])
def test_http_file_without_ref_reads_the_indexed_ref(service, world, repo):
    commit_id = service.reader().manifest.repo("default", repo).refs[0].commit_id
    with Server(app(service)) as url:
        f = httpx.get(f"{url}/v1/file", params={"repo": repo, "path": "m.py"}).json()
    assert f["content"] == V1_PY.decode() and f["ref"] == "refs/heads/v1" and f["commit_id"] == commit_id


@pytest.mark.parametrize("repo", ["mini", "dangling"])
def test_mcp_get_file_without_ref_reads_the_indexed_ref(service, repo):
    out = call(build(service), "get_file", {"repo": repo, "path": "m.py"})
    assert not out.is_error, text(out)
    assert 'return "v1"' in text(out) and "main" not in text(out) and " at refs/heads/v1 (" in text(out)


def test_an_explicit_ref_still_wins(world):
    out = blobdex(world, "get-file", "mini", "m.py", "--ref", "main")
    assert out.exit_code == 0 and out.output == MAIN_PY.decode()


def test_unindexed_repos_default_to_their_configured_ref_then_head(world):
    cfg = replace(
        world,
        repos=world.repos + (RepoSpec(name="later", url="/nowhere", refs=("v2",)), RepoSpec(name="plain", url="/x")),
    )
    assert indexed_ref(cfg, None, "default", "later") == ("v2", None)
    assert indexed_ref(cfg, None, "default", "plain") == (None, None)


# -- 2. every hit carries what re-reads it exactly ------------------------------------------


def test_following_the_search_hint_reads_exactly_the_hits_lines(service):
    server = build(service)
    out = text(call(server, "search_code", {"query": "return v1", "repos": ["mini"], "limit": 1}))
    caption = next(line for line in out.splitlines() if line.startswith("mini:m.py:"))
    commit_id = service.reader().manifest.repo("default", "mini").refs[0].commit_id
    assert f" @ refs/heads/v1 ({commit_id[:12]}) • " in caption
    hint = re.search(r"get_file\((.*)\)$", out.splitlines()[-1]).group(1)
    args = {k: json.loads(v) for k, v in re.findall(r"(\w+)=(\"[^\"]*\"|\d+)", hint)}
    assert args["ref_or_commit"] == commit_id[:12]
    read = text(call(server, "get_file", args))
    chunk = text(call(server, "get_chunk", {"ids": [int(caption.rsplit("id ", 1)[1])]}))
    body = [line[8:] for line in read.split("\n\n", 1)[1].splitlines()]
    assert "\n".join(body) in chunk and body == V1_PY.decode().splitlines()


def test_file_mode_names_the_commit_and_its_hint_reads_it(service):
    server = build(service)
    out = text(call(server, "search_code", {"query": "return v1", "repos": ["mini"], "group_by": "file"}))
    commit_id = service.reader().manifest.repo("default", "mini").refs[0].commit_id
    assert f"1. mini:m.py @ refs/heads/v1 ({commit_id[:12]}) • " in out
    assert f'get_file(repo="mini", path="m.py", ref_or_commit="{commit_id[:12]}")' in out
    data = structured(call(server, "search_code", {"query": "return v1", "repos": ["mini"], "group_by": "file"}))
    assert data["files"][0]["commit_id"] == commit_id and data["files"][0]["ref"] == "refs/heads/v1"


def test_cli_search_lines_name_the_ref_and_commit(world, service):
    commit_id = service.reader().manifest.repo("default", "mini").refs[0].commit_id
    out = blobdex(world, "search", "return v1", "--repo", "mini", "-n", "1")
    assert out.exit_code == 0 and f"1. mini:m.py:1-2 @ refs/heads/v1 ({commit_id[:12]})" in out.output
    files = blobdex(world, "search", "return v1", "--repo", "mini", "--files")
    assert files.exit_code == 0 and f"1. mini:m.py @ refs/heads/v1 ({commit_id[:12]})" in files.output


# -- 3. every unknown filter value is refused the same way ----------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--lang", "klingon"],
            "no chunk in language 'klingon' is indexed in org 'default'; indexed languages: python",
        ),
        (["--ref", "nosuchref"], "ref 'nosuchref' is not indexed in org 'default'; indexed refs: refs/heads/v1"),
        (["--org", "nope"], "no repo is indexed in org 'nope'; orgs with indexed repos: default"),
        (["--kind", "bogus"], "unknown kind 'bogus'"),
        (["--repo", "nope"], "unknown repo 'nope' in org 'default'; indexed repos: dangling, mini"),
    ],
)
def test_cli_search_refuses_unknown_filter_values(world, args, message):
    out = blobdex(world, "search", "return", *args)
    assert out.exit_code != 0 and message in str(out.exception), (out.output, out.exception)


def test_cli_search_accepts_known_filter_values_in_any_case(world):
    out = blobdex(world, "search", "return", "--lang", "Python", "--ref", "v1", "--org", "default")
    assert out.exit_code == 0 and "mini:m.py" in out.output


@pytest.mark.parametrize(
    "tool,args,message",
    [
        ("search_code", {"query": "x", "lang": ["klingon"]}, "no chunk in language 'klingon' is indexed"),
        ("search_code", {"query": "x", "ref": "nosuchref"}, "ref 'nosuchref' is not indexed in org 'default'"),
        ("search_code", {"query": "x", "ref": "nosuchref", "group_by": "file"}, "ref 'nosuchref' is not indexed"),
        ("grep", {"pattern": "x", "ref": "nosuchref"}, "ref 'nosuchref' is not indexed in org 'default'"),
    ],
)
def test_mcp_refuses_unknown_filter_values_as_the_cli_does(service, tool, args, message):
    out = call(build(service), tool, args)
    assert out.is_error and message in text(out)


# -- 4. MCP speaks to the model: one sentence, tools not shell commands, clean descriptions --


def test_tool_descriptions_carry_no_docstring_indentation(service):
    async def go():
        async with Client(build(service)) as client:
            return await client.list_tools()

    tools = asyncio.run(go()).tools
    assert all(t.description and "\n " not in t.description for t in tools)
    assert any("\n" in t.description for t in tools)  # multi-line descriptions exist, only unindented


@pytest.mark.parametrize(
    "tool,args,message",
    [
        ("search_code", {"query": "x", "limit": 0}, "limit must be between 1 and 200; you passed 0"),
        ("search_code", {"query": "x", "limit": 201}, "limit must be between 1 and 200; you passed 201"),
        ("search_code", {"limit": 3}, "search_code needs the argument query"),
        (
            "search_code",
            {"query": "x", "group_by": "files"},
            "group_by should be 'chunk' or 'file'; you passed \"files\"",
        ),
        ("search_code", {"query": "x", "repos": "mini"}, 'repos should be a valid list; you passed "mini"'),
        ("get_chunk", {"ids": []}, "ids: list should have at least 1 item"),
        (
            "get_file",
            {"repo": "mini", "path": "m.py", "start_line": 0},
            "start_line should be greater than or equal to 1",
        ),
        # an argument the tool does not take is refused, never dropped (the SDK would drop it)
        (
            "get_file",
            {"repo": "mini", "path": "m.py", "ref": "dev"},
            "get_file: unknown argument 'ref'; accepted arguments: repo, path, ref_or_commit, start_line, end_line",
        ),
        ("search_code", {"qurey": "x"}, "search_code: unknown argument 'qurey'; did you mean 'query'?"),
    ],
)
def test_a_rejected_argument_is_one_sentence_naming_it(service, tool, args, message):
    out = call(build(service), tool, args)
    assert out.is_error and text(out).startswith(message), text(out)
    assert "pydantic" not in text(out) and "\n" not in text(out) and "validation error" not in text(out)


@pytest.mark.parametrize(
    "tool,args,advice",
    [
        ("get_file", {"repo": "mini", "path": "nope.py"}, "find it with search_code or grep or check ref_or_commit"),
        ("get_file", {"repo": "nope", "path": "m.py"}, "list_repos lists the indexed repos"),
        ("get_file", {"repo": "mini", "path": "m.py", "ref_or_commit": "nosuchref"}, "pass one as ref_or_commit"),
        ("expand_context", {"symbol": "no_such_symbol"}, "find it with search_code or grep"),
    ],
)
def test_mcp_errors_name_tools_not_shell_commands(service, tool, args, advice):
    out = call(build(service), tool, args)
    assert out.is_error and advice in text(out) and "blobdex " not in text(out), text(out)


# -- 5. serve: a bad or busy port is one sentence, before anything is announced -------------


def test_serve_refuses_a_port_out_of_range(world):
    out = blobdex(world, "serve", "--port", "99999")
    assert out.exit_code == 2 and "99999 is not in the range 1<=x<=65535" in out.output


def test_serve_on_a_busy_port_says_so_before_announcing_anything(world):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = blobdex(world, "serve", "--port", str(port))
    assert out.output == "" and str(out.exception) == f"port {port} on 127.0.0.1 is in use; pick another with --port"


# -- 6. an explicit config that does not exist -----------------------------------------------


@pytest.mark.parametrize("command", [["search", "foo"], ["get-file", "mini", "m.py"], ["status"], ["serve"]])
def test_an_explicit_config_that_does_not_exist_is_named(tmp_path, command):
    missing = tmp_path / "nonexistent" / "blobdex.toml"
    out = CliRunner().invoke(cli, ["--config", str(missing), *command])
    assert out.exit_code != 0 and str(out.exception).startswith(f"no config at {str(missing)!r}"), out.exception


def test_init_and_repo_add_may_create_the_named_config(tmp_path):
    target = tmp_path / "new.toml"
    out = CliRunner().invoke(cli, ["--config", str(target), "init", "--no-repo"])
    assert out.exit_code == 0 and target.exists(), out.output
    gitrepo.commit(gitrepo.init(tmp_path / "src"), {"a.py": b"x = 1\n"})
    other = tmp_path / "other.toml"
    out = CliRunner().invoke(cli, ["--config", str(other), "repo", "add", "src", str(tmp_path / "src")])
    assert out.exit_code == 0 and "src" in other.read_text(), (out.output, out.exception)
