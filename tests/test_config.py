"""blobdex.toml and the commands that edit it: one checked parser, a writer that keeps the file, `repo add` checks."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import socket
from pathlib import Path

import pytest

from indexer import config as configmod
from indexer.embed import HASH_MODEL
from tests import gitrepo
from tests.checks import assert_one_sentence_error
from tests.servers import TOKEN

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def source(tmp_path) -> Path:
    """A git repo whose default branch is `trunk` (HEAD names it), with a `dev` branch and a `v1` tag."""
    repo = gitrepo.init(tmp_path / "source")
    tip = gitrepo.commit(repo, {"app.py": b"def trunk_only():\n    return 1\n"}, "trunk")
    gitrepo.commit(repo, {"app.py": b"def dev_only():\n    return 2\n"}, "dev")
    repo.refs[b"refs/tags/v1"] = tip.encode()
    repo.refs.set_symbolic_ref(b"HEAD", b"refs/heads/trunk")
    return tmp_path / "source"


@pytest.mark.parametrize(
    "body, fragments",
    [
        ('modle = "x"\n', ["unknown key `modle`", "did you mean `model`?"]),
        ("max_blob_byte = 5\n", ["unknown key `max_blob_byte`", "did you mean `max_blob_bytes`?"]),
        (
            '[[repo]]\nname = "a"\nurl = "/x"\nref = "main"\n',
            ["[[repo]] number 1 ('a')", "unknown key `ref`", "did you mean `refs`?"],
        ),
        ('[repo]\nname = "a"\nurl = "/x"\n', ["`[repo]` is a single table", "`[[repo]]` (two brackets)"]),
        ('repo = "x"\n', ["`repo` is a string", "`[[repo]]` section"]),
        ('[[repo]]\nname = "a"\nurl = "/x"\nrefs = 5\n', ["`refs` is a whole number", 'refs = ["main"]']),
        (
            'max_blob_bytes = "big"\n',
            ["`max_blob_bytes` is a string", "must be a whole number", "max_blob_bytes = 1048576"],
        ),
        ('keep_snapshots = "three"\n', ["`keep_snapshots` is a string", "keep_snapshots = 3"]),
        ("keep_snapshots = 0\n", ["`keep_snapshots` is 0; it must be at least 1"]),
        ('[[repo]]\nname = "a"\n', ["lacks `url`"]),
        (f'github_client_secret = "{SECRET}"\n', ["read only from the environment", "BLOBDEX_GITHUB_CLIENT_SECRET"]),
        (f'jwt_secret = ["{SECRET}"]\n', ["`jwt_secret` is a list, but it must be a string"]),
        ('cluster = "http://head:8265"\n', ["`cluster` is 'http://head:8265'", '"ray://HOST:PORT"']),
        ("cluster_workers = -1\n", ["`cluster_workers` is -1", "0 (every CPU) or more"]),
        ('store = "bucket"\n', ["`store` is 'bucket'", "s3://BUCKET/PREFIX"]),
        (
            f'store = "s3://AKIA:{SECRET}@bucket/p"\n',
            ["`store` has an '@'", "carries credentials or a signature (not shown)"],
        ),
        ('server = "127.0.0.1:8765"\n', ["`server` is '127.0.0.1:8765'", "like http://127.0.0.1:8765"]),
        (f'server = "https://u:{SECRET}@host"\n', ["`server` has credentials", "the token in BLOBDEX_TOKEN"]),
    ],
)
def test_config_mistakes_are_one_sentence_naming_the_key_and_the_fix(tmp_path, blobdex, body, fragments):
    path = tmp_path / "blobdex.toml"
    path.write_text(body)
    run = blobdex("--config", path, "repo", "list")
    assert_one_sentence_error(run, f"config '{path}'", *fragments)
    assert SECRET not in run.err  # a value of the wrong type may be a secret: it is named by key, never shown


def test_every_key_the_auth_settings_read_from_the_file_is_known():
    from query.surfaces.cip_auth import AuthSettings

    read = set(re.findall(r'raw\.get\("(\w+)"', inspect.getsource(AuthSettings.from_env)))
    assert read and read <= set(configmod.KNOWN_KEYS)


def test_a_file_with_every_known_setting_loads(tmp_path):
    path = tmp_path / "blobdex.toml"
    path.write_text(
        'data_dir = "d"\nmodel = "m"\nmax_blob_bytes = 10\nkeep_snapshots = 2\nsession_idle_hours = 1\n'
        'reranker = "r"\njwt_secret = "env:JWT"\njwt_users = ["alice"]\njwt_org = "acme"\n'
        'github_client_id = "c"\ngithub_authorize_url = "https://a"\ngithub_token_url = "https://t"\n'
        'github_user_url = "https://u"\n\n[[repo]]\nname = "a"\nurl = "/x"\nrefs = "main"\n'
        'org = "acme"\ncredential = "env:T"\nusername = "bob"\n'
    )
    cfg = configmod.load(path)
    assert (cfg.data_dir, cfg.model, cfg.max_blob_bytes, cfg.keep_snapshots, cfg.session_idle_hours, cfg.reranker) == (
        (tmp_path / "d").resolve(),
        "m",
        10,
        2,
        1.0,
        "r",
    )
    assert cfg.repos == (
        configmod.RepoSpec(name="a", url="/x", org="acme", refs=("main",), credential="env:T", username="bob"),
    )


KEPT = f'''# Our index. Ask #platform before changing the model.
data_dir = "data"  # beside this file
model = "{HASH_MODEL}"
jwt_secret = "file:/etc/blobdex/jwt.key"
jwt_users = ["alice", "bob"]
github_client_id = "Iv1.abc"

# The service itself.
[[repo]]
name = "api"   # kept as written
url = "/src/api"
refs = ["main"]
'''


def test_repo_add_and_remove_keep_the_rest_of_the_file_byte_for_byte(tmp_path, blobdex, source):
    path = tmp_path / "blobdex.toml"
    path.write_text(KEPT)
    run = blobdex("--config", path, "repo", "add", "extra", source)
    assert run.code == 0, run
    added = f'\n[[repo]]\norg = "default"\nname = "extra"\nurl = "{source}"\nrefs = ["trunk"]\n'
    assert path.read_text() == KEPT + added
    assert blobdex("--config", path, "repo", "remove", "extra").code == 0
    assert path.read_text() == KEPT
    # A name that exists is refused without --replace; replacing edits its table where it stands (comments stay).
    refused = blobdex("--config", path, "repo", "add", "api", source, "--ref", "dev")
    assert refused.code == 2 and "has a repo 'api' already (/src/api); pass --replace" in refused.err
    assert path.read_text() == KEPT
    replaced = blobdex("--config", path, "repo", "add", "api", source, "--ref", "dev", "--replace")
    assert (
        replaced.code == 0
        and "replaced repo default/api" in replaced.out
        and "(was /src/api refs main)" in replaced.out
    )
    assert path.read_text() == KEPT.replace('url = "/src/api"\nrefs = ["main"]', f'url = "{source}"\nrefs = ["dev"]')
    assert blobdex("--config", path, "repo", "remove", "api").code == 0
    assert path.read_text() == KEPT[: KEPT.index("[[repo]]")]  # the comment above the table stays
    assert configmod.load(path).repos == ()


def test_repo_add_refuses_a_url_that_carries_a_token_and_never_shows_it(tmp_path, blobdex, source):
    path = tmp_path / "blobdex.toml"
    path.write_text(KEPT)
    for extra in ([], ["--no-check"]):
        run = blobdex("--config", path, "repo", "add", "priv", f"https://bob:{SECRET}@127.0.0.1:9/x.git", *extra)
        assert_one_sentence_error(
            run,
            "carries a password or token",
            "'blobdex repo add priv https://127.0.0.1:9/x.git --credential env:VAR --username bob'",
        )
        assert SECRET not in run.err
    run = blobdex("--config", path, "repo", "add", "priv", source, "--credential", SECRET)
    assert_one_sentence_error(run, "is not a reference", "env:NAME or file:PATH")
    assert SECRET not in run.err
    assert path.read_text() == KEPT


def test_a_config_that_already_has_a_token_in_a_url_keeps_working_and_never_prints_it(tmp_path, blobdex, source):
    path = tmp_path / "blobdex.toml"
    path.write_text(f'[[repo]]\nname = "old"\nurl = "https://bob:{SECRET}@git.example.com/old.git"\n')
    run = blobdex("--config", path, "repo", "list")
    assert run.code == 0 and "https://git.example.com/old.git" in run.out and SECRET not in run.out + run.err
    run = blobdex("--config", path, "repo", "add", "new", source)
    assert run.code == 0 and SECRET not in run.out + run.err
    assert [r.name for r in configmod.load(path).repos] == ["old", "new"]


def test_repo_add_stores_the_default_branch_by_name_for_head_or_no_ref(tmp_path, blobdex, source):
    path = tmp_path / "blobdex.toml"
    for name, extra in [
        ("plain", []),
        ("head", ["--ref", "HEAD"]),
        ("both", ["--ref", "HEAD", "--ref", "trunk", "--ref", "v1"]),
    ]:
        run = blobdex("--config", path, "repo", "add", name, source, *extra)
        assert run.code == 0, run
    assert path.read_text().startswith('[[repo]]\norg = "default"\nname = "plain"\n')  # a new file, no blank line
    refs = {r.name: r.refs for r in configmod.load(path).repos}
    assert refs == {"plain": ("trunk",), "head": ("trunk",), "both": ("trunk", "v1")}
    # A bare repo whose HEAD names a branch never pushed (`git init --bare`, then a push of main): its one branch.
    bare = gitrepo.init(tmp_path / "bare.git", bare=True)
    gitrepo.commit(bare, {"a.py": b"x = 1\n"}, "main")
    bare.refs.set_symbolic_ref(b"HEAD", b"refs/heads/master")
    assert blobdex("--config", path, "repo", "add", "bare", tmp_path / "bare.git").code == 0
    assert configmod.load(path).repo("bare").refs == ("main",)
    # Offline, HEAD alone means the default branch as the index run finds it.
    assert blobdex("--config", path, "repo", "add", "off", source, "--ref", "HEAD", "--no-check").code == 0
    assert configmod.load(path).repo("off").refs == ()


def test_repo_add_refuses_a_missing_ref_a_dangling_head_a_non_git_dir_and_an_unreachable_url(
    tmp_path, blobdex, source, caplog
):
    path = tmp_path / "blobdex.toml"
    run = blobdex("--config", path, "repo", "add", "a", source, "--ref", "nope")
    assert_one_sentence_error(run, "has no ref 'nope'", "branches: dev, trunk; tags: v1", "--no-check")
    dangling = gitrepo.init(tmp_path / "dangling", bare=True)
    gitrepo.commit(dangling, {"a.py": b"x = 1\n"}, "work")
    gitrepo.commit(dangling, {"a.py": b"x = 2\n"}, "play")
    dangling.refs.set_symbolic_ref(b"HEAD", b"refs/heads/gone")
    run = blobdex("--config", path, "repo", "add", "d", tmp_path / "dangling")
    assert_one_sentence_error(run, "HEAD names no existing branch", "branches: play, work", "--ref BRANCH")
    plain = tmp_path / "plain"
    plain.mkdir()
    run = blobdex("--config", path, "repo", "add", "p", plain)
    assert_one_sentence_error(run, "is not a git repository", "--no-check")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.git"
    run = blobdex("--config", path, "repo", "add", "u", url)
    assert_one_sentence_error(run, "cannot be reached (the connection was refused)", "--no-check")
    assert "Retrying" not in caplog.text  # urllib3's own retry warnings would add lines above the sentence
    assert not path.exists()  # nothing was written
    for name, where in [("p", plain), ("u", url), ("a", source)]:
        run = blobdex("--config", path, "repo", "add", name, where, "--no-check", *(["--ref", "nope"] * (name == "a")))
        assert run.code == 0, run
    assert [(r.name, r.refs) for r in configmod.load(path).repos] == [("p", ()), ("u", ()), ("a", ("nope",))]


def test_repo_add_checks_an_https_source_with_a_credential_reference(tmp_path, blobdex, monkeypatch, http_remote):
    _, url = http_remote
    path = tmp_path / "blobdex.toml"
    monkeypatch.delenv("GIT_TOKEN", raising=False)
    run = blobdex("--config", path, "repo", "add", "svc", url, "--credential", "env:GIT_TOKEN", "--ref", "main")
    assert_one_sentence_error(run, "'GIT_TOKEN', which is unset or empty", "--no-check")
    monkeypatch.setenv("GIT_TOKEN", "wrong")
    run = blobdex("--config", path, "repo", "add", "svc", url, "--credential", "env:GIT_TOKEN", "--ref", "main")
    assert_one_sentence_error(run, "refused the credentials", "'env:GIT_TOKEN'")
    monkeypatch.setenv("GIT_TOKEN", TOKEN)
    run = blobdex("--config", path, "repo", "add", "svc", url, "--credential", "env:GIT_TOKEN", "--ref", "feature")
    assert run.code == 0, run
    assert TOKEN not in path.read_text() + run.out + run.err
    assert configmod.load(path).repo("svc").credential == "env:GIT_TOKEN"


def test_index_quiet_prints_nothing_on_success_and_json_still_prints(tmp_path, blobdex, source, caplog):
    path = tmp_path / "blobdex.toml"
    path.write_text(f'model = "{HASH_MODEL}"\n')
    assert blobdex("--config", path, "repo", "add", "app", source, "--ref", "HEAD").code == 0
    for _ in range(2):  # the first run indexes, the second finds nothing changed
        run = blobdex("--config", path, "index", "--quiet")
        assert (run.code, run.out) == (0, ""), run
    run = blobdex("--config", path, "index", "--quiet", "--json")
    assert run.code == 0 and json.loads(run.out)["unchanged"]
    run = blobdex("--config", path, "index")
    assert run.code == 0 and "app" in run.out  # without --quiet the report is printed
    # A failure still says so (the log goes to stderr) and exits 1, with nothing on stdout.
    run = blobdex("--config", path, "repo", "add", "gone", source, "--ref", "dev")
    assert run.code == 0
    shutil.rmtree(source)
    run = blobdex("--config", path, "index", "--quiet")
    assert (run.code, run.out) == (1, "") and "does not exist" in caplog.text


@pytest.mark.parametrize("query", ["", "   ", "/* only a comment */", ";"])
def test_sql_with_no_statement_is_one_sentence(corpus, blobdex, query):
    run = blobdex("--config", corpus.cfg.path, "sql", query)
    assert_one_sentence_error(run, "the SQL query is empty")


def test_a_repo_name_with_a_slash_points_at_org(tmp_path, blobdex, source):
    run = blobdex("--config", tmp_path / "blobdex.toml", "repo", "add", "acme/api", source)
    assert_one_sentence_error(run, "invalid repo name 'acme/api'", "pass --org ORG and the repo name alone")


def test_the_protocol_auth_keys_are_read_through_the_one_config_parser(tmp_path, monkeypatch):
    from query.surfaces.cip_auth import load_settings

    monkeypatch.delenv("BLOBDEX_JWT_SECRET", raising=False)
    monkeypatch.setenv("TEST_JWT_KEY", "from-the-file-0123456789abcdef0123")
    path = tmp_path / "blobdex.toml"
    path.write_text(
        'jwt_secret = "env:TEST_JWT_KEY"\njwt_users = ["alice"]\ngithub_client_id = "cid"\n',
        encoding="utf-8",
    )
    settings = load_settings(configmod.load(path))
    assert settings.secret == "from-the-file-0123456789abcdef0123" and settings.allowed_users == {"alice"}
    assert settings.github_client_id == "cid"
    path.write_text('jwt_users = "alice"\n', encoding="utf-8")
    with pytest.raises(configmod.ConfigError, match="jwt_users"):
        configmod.load(path)


def test_a_local_model_directory_is_relative_to_the_file_and_has_one_id(tmp_path, monkeypatch):
    """Like data_dir, a model directory is found beside the file wherever blobdex runs (cron, CI), and its id
    is its absolute path however it is spelled, so a server and an eval agree on which vectors are its."""
    from indexer.embed import model_id_for

    (tmp_path / "models" / "tuned").mkdir(parents=True)
    path = tmp_path / "blobdex.toml"
    path.write_text('model = "models/tuned"\n', encoding="utf-8")
    monkeypatch.chdir("/")
    cfg = configmod.load(path)
    assert cfg.model == str(tmp_path / "models" / "tuned")
    path.write_text('model = "all-MiniLM-L6-v2+int8"\n', encoding="utf-8")
    assert configmod.load(path).model == "all-MiniLM-L6-v2+int8"  # a name stays a name
    monkeypatch.chdir(tmp_path)
    assert model_id_for("models/tuned") == model_id_for("./models/tuned/") == str(tmp_path / "models" / "tuned")
    assert model_id_for("models/tuned+int8") == str(tmp_path / "models" / "tuned") + "+int8@1"


# Every command that reads the config, with arguments enough to reach that point.
NEEDS_CONFIG = [
    ("search", "x"),
    ("status",),
    ("repo", "list"),
    ("index",),
    ("verify",),
    ("runs",),
    ("secrets",),
    ("get-file", "a", "b"),
    ("files", "a"),
    ("outline", "a", "b"),
    ("route", "x"),
    ("context", "x"),
    ("chunk", "1"),
    ("sql", "select 1"),
    ("token", "list"),
    ("serve", "--port", "1"),
    ("webhooks", "--port", "1"),
    ("mcp",),
]


def test_the_config_is_found_in_a_folder_above_as_git_finds_its_repository(tmp_path, blobdex, monkeypatch, source):
    monkeypatch.delenv("BLOBDEX_CONFIG", raising=False)
    monkeypatch.delenv("BLOBDEX_DATA_DIR", raising=False)
    (tmp_path / "project" / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "project")
    assert blobdex("init", "--no-repo").code == 0
    assert blobdex("repo", "add", "src", source).code == 0
    monkeypatch.chdir(tmp_path / "project" / "deep" / "er")
    listed = blobdex("repo", "list", "--json")
    assert listed.code == 0 and [r["name"] for r in json.loads(listed.out)["repos"]] == ["src"]
    indexed = blobdex("index", "--quiet")
    assert indexed.code == 0 and (tmp_path / "project" / ".blobdex" / "CURRENT").exists()  # beside the file


@pytest.mark.parametrize("args", NEEDS_CONFIG, ids=lambda a: " ".join(a))
def test_without_a_config_every_command_says_so_first_in_one_sentence(tmp_path, blobdex, monkeypatch, args):
    monkeypatch.delenv("BLOBDEX_CONFIG", raising=False)
    monkeypatch.delenv("BLOBDEX_DATA_DIR", raising=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    said = blobdex(*args)
    expected = f"no blobdex.toml in '{tmp_path / 'elsewhere'}' or any folder above it: run 'blobdex init'"
    assert said.code == 2 and said.err.startswith(f"blobdex: error: {expected}") and said.err.count("\n") == 1


def test_help_works_whatever_state_the_config_is_in(tmp_path, blobdex, monkeypatch):
    from query.cli import cli

    monkeypatch.setenv("BLOBDEX_CONFIG", str(tmp_path / "missing.toml"))
    names = [[]] + [[name] for name in cli.commands] + [["eval", n] for n in cli.commands["eval"].commands]
    for name in names:
        shown = blobdex(*name, "--help")
        assert shown.code == 0 and shown.out.startswith("Usage: "), (name, shown)
    (tmp_path / "missing.toml").write_text("modle = 1\n")  # a broken one: help still works
    assert blobdex("index", "--help").code == 0
