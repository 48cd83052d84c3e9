"""get_file reads git objects from the mirror, at any ref or commit, exactly as `git show REF:PATH`."""

import subprocess

import pytest

from query.get_file import GetFileError, get_file, parse_lines
from tests.conftest import INVOICE_PY, INVOICE_PY_DEV, RENEW_PY


def git_show(corpus, rev, path):
    mirror = corpus.cfg.data_dir / "mirrors" / "default" / "api.git"
    return subprocess.run(["git", "--git-dir", str(mirror), "show", f"{rev}:{path}"],
                          capture_output=True, check=True).stdout


def test_whole_file_at_default_branch_matches_git_show(corpus):
    got = get_file(corpus.cfg.data_dir, "api", "src/billing/renew.py")
    assert got.content == RENEW_PY == git_show(corpus, "main", "src/billing/renew.py")
    assert got.ref == "refs/heads/main" and got.commit_id == corpus.commits["api_main"]
    assert got.total_lines == RENEW_PY.count(b"\n")


def test_line_range_at_branch_tag_and_commit(corpus):
    dev = get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", "dev", start=9, end=10)
    assert dev.content == b"".join(INVOICE_PY_DEV.splitlines(keepends=True)[8:10])
    old = get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", corpus.commits["api_main"])
    assert old.content == INVOICE_PY
    short = get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", corpus.commits["api_dev"][:10])
    assert short.content == INVOICE_PY_DEV
    parent = get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", "dev~1")
    assert parent.content == INVOICE_PY


def test_end_past_eof_is_clamped_start_past_eof_is_an_error(corpus):
    got = get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", start=6, end=999)
    assert got.line_end == 7 and got.content.count(b"\n") == 2
    with pytest.raises(GetFileError, match="line 50 is past the end of 'src/billing/invoice.py', which has 7 lines"):
        get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", start=50)


@pytest.mark.parametrize("repo,path,ref,message", [
    ("nope", "x.py", None, "unknown repo 'nope' in org 'default' \\(known: api, tools\\)"),
    ("api", "missing.py", None, "no file 'missing.py' in repo 'api' at refs/heads/main"),
    ("api", "src/billing/renew.py", "no-such-ref", "ref 'no-such-ref' not found in repo 'api'"),
    ("api", "assets/logo.png", None, "is a binary file"),
    ("api", "link.py", None, "is a symlink \\(to 'src/billing/renew.py'\\)"),
    ("api", "vendor-sub", None, "is a submodule"),
    ("api", "src/billing", None, "is a directory \\(entries: invoice.py, renew.py\\)"),
    ("api", "../etc/passwd", None, "invalid path"),
    ("../api", "x", None, "unknown repo"),
])
def test_bad_requests_get_one_clear_sentence(corpus, repo, path, ref, message):
    with pytest.raises(GetFileError, match=message):
        get_file(corpus.cfg.data_dir, repo, path, ref)


def test_files_skipped_from_the_index_are_still_readable(corpus):
    # get_file is about the repo, not the index: a lockfile was never chunked but can be read.
    assert get_file(corpus.cfg.data_dir, "api", "package-lock.json").content == b'{"lockfileVersion": 3}\n'


@pytest.mark.parametrize("spec,expected", [("40-90", (40, 90)), ("40-", (40, None)), ("-9", (1, 9)),
                                           ("7", (7, 7)), (None, (None, None))])
def test_parse_lines(spec, expected):
    assert parse_lines(spec) == expected


@pytest.mark.parametrize("spec", ["a-b", "0-3", "9-3", "-", "1-2-3"])
def test_parse_lines_rejects(spec):
    with pytest.raises(GetFileError, match="bad line range"):
        parse_lines(spec)
