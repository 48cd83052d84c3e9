"""get_file reads git objects from the mirror, at any ref or commit, exactly as `git show REF:PATH`."""

import subprocess

import pytest

from query.get_file import BadRange, CredentialFile, FileTooLarge, GetFileError, blob_size, get_file, parse_lines
from tests.corpus import BIG, INVOICE_PY, INVOICE_PY_DEV, RENEW_PY


def git_show(corpus, rev, path):
    mirror = corpus.cfg.data_dir / "mirrors" / "default" / "api.git"
    return subprocess.run(
        ["git", "--git-dir", str(mirror), "show", f"{rev}:{path}"], capture_output=True, check=True
    ).stdout


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


BAD_FILE_REQUESTS = [  # what is not there is 404; what is asked wrongly, 400
    ("nope", "x.py", None, "unknown repo 'nope' in org 'default' \\(known: api, tools\\)", 404),
    ("api", "missing.py", None, "no file 'missing.py' in repo 'api' at refs/heads/main", 404),
    ("api", "src/billing/renew.py", "no-such-ref", "ref 'no-such-ref' not found in repo 'api'", 404),
    ("api", "assets/logo.png", None, "is a binary file", 400),
    ("api", "link.py", None, "is a symlink \\(to 'src/billing/renew.py'\\)", 400),
    ("api", "vendor-sub", None, "is a submodule", 400),
    ("api", "src/billing", None, "is a directory \\(entries: invoice.py, renew.py\\)", 400),
    ("api", "../etc/passwd", None, "invalid path", 400),
    ("../api", "x", None, "unknown repo", 404),
]


@pytest.mark.parametrize("repo,path,ref,message,status", BAD_FILE_REQUESTS)
def test_bad_requests_get_one_clear_sentence(corpus, repo, path, ref, message, status):
    with pytest.raises(GetFileError, match=message) as raised:
        get_file(corpus.cfg.data_dir, repo, path, ref)
    assert raised.value.status == status


def test_files_skipped_from_the_index_are_still_readable(corpus):
    # get_file is about the repo, not the index: a lockfile was never chunked but can be read.
    assert get_file(corpus.cfg.data_dir, "api", "package-lock.json").content == b'{"lockfileVersion": 3}\n'


@pytest.mark.parametrize(
    "spec,expected", [("40-90", (40, 90)), ("40-", (40, None)), ("-9", (1, 9)), ("7", (7, 7)), (None, (None, None))]
)
def test_parse_lines(spec, expected):
    assert parse_lines(spec) == expected


@pytest.mark.parametrize("spec", ["a-b", "0-3", "9-3", "-", "1-2-3"])
def test_parse_lines_rejects(spec):
    with pytest.raises(GetFileError, match="bad line range"):
        parse_lines(spec)


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        "/.env",
        ".env/",
        ".ENV",
        "deploy/server.pem",
        "deploy/SERVER.PEM",
        "vendor/.env",
        "config/id_rsa",
        "a/service-account-prod.json",
    ],
)
@pytest.mark.parametrize("ref", [None, "dev", "dev~1", "api_main"])
def test_credential_files_are_refused_by_name_at_every_ref(corpus, path, ref):
    ref = corpus.commits["api_main"] if ref == "api_main" else ref
    with pytest.raises(CredentialFile, match="is a credential file \\(by its name\\); blobdex never reads or serves"):
        get_file(corpus.cfg.data_dir, "api", path, ref)


@pytest.mark.parametrize("path", ["./.env", "a/../.env", "deploy/./server.pem", ".git/../.env", "deploy//server.pem"])
def test_path_tricks_toward_a_credential_file_read_nothing(corpus, path):
    with pytest.raises(GetFileError, match="invalid path"):
        get_file(corpus.cfg.data_dir, "api", path)


@pytest.mark.parametrize("start,end", [(-3, None), (0, 2), (1, -1), (3, 1), (None, 0)])
def test_bad_ranges_are_refused_before_reading(corpus, start, end):
    with pytest.raises(BadRange, match="bad line range"):
        get_file(corpus.cfg.data_dir, "api", "src/billing/invoice.py", start=start, end=end)


def test_blob_size_comes_from_the_header_of_loose_packed_and_delta_objects(big_mirror):
    _, repo, packed = big_mirror
    blobs = {
        name: sha
        for name, (_, sha) in (
            ("big.txt", repo[repo[b"refs/heads/main"].tree][b"big.txt"]),
            ("small.txt", repo[repo[b"refs/heads/main"].tree][b"small.txt"]),
            ("old.txt", repo[repo[b"refs/heads/packed"].tree][b"old.txt"]),
            ("new.txt", repo[repo[b"refs/heads/packed"].tree][b"new.txt"]),
        )
    }
    assert repo.object_store.contains_loose(blobs["big.txt"])
    delta_lines = [line for line in packed.splitlines() if line.startswith(blobs["old.txt"].decode())]
    assert len(delta_lines[0].split()) == 7  # `verify-pack -v`: a delta names its depth and base
    assert {name: blob_size(repo, sha) for name, sha in blobs.items()} == {
        "big.txt": BIG + 7,
        "small.txt": 6,
        "old.txt": BIG,
        "new.txt": BIG + 2,
    }


@pytest.mark.parametrize("ref,path", [("main", "big.txt"), ("packed", "old.txt"), ("packed", "new.txt")])
def test_a_blob_over_the_cap_is_refused_as_too_large(big_mirror, ref, path):
    root, _, _ = big_mirror
    with pytest.raises(FileTooLarge, match=f"'{path}' in repo 'big' is 3145\\d+ bytes, over the 26214400-byte cap"):
        get_file(root, "big", path, ref)
    assert get_file(root, "big", "small.txt", "main").content == b"hello\n"
