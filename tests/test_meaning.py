"""Retrieval by meaning, with the real bundled model: the expected hit shares no word with the query."""

import numpy as np
import pytest

from indexer.build import run
from indexer.config import RepoSpec
from indexer.embed import load_embedder
from indexer.tokenize import tokens
from query.history import search_commits
from query.reader import SnapshotReader
from query.query_text import STOPWORDS
from query.search import SearchRequest, search
from query.service import Service
from tests import gitrepo
from tests.corpus import build_corpus, write_config

FILES = {
    "mail/welcome.py": b'''import smtplib


def send_welcome_email(user):
    """Say hello to a newly registered user."""
    with smtplib.SMTP("localhost") as smtp:
        smtp.sendmail("noreply@shop.example", user.address, "Welcome aboard!")
''',
    "geo/shapes.py": b'''def polygon_area(points):
    """Shoelace formula."""
    total = 0.0
    for (x1, y1), (x2, y2) in zip(points, points[1:] + points[:1]):
        total += x1 * y2 - x2 * y1
    return abs(total) / 2
''',
    "net/resilience.py": b"""import time


def call_with_backoff(fn, tries=5):
    delay = 0.1
    for _ in range(tries):
        try:
            return fn()
        except ConnectionError:
            time.sleep(delay)
            delay *= 2
    raise TimeoutError("gave up")
""",
    "auth/passwords.py": b"""import hashlib
import os


def hash_password(plain):
    salt = os.urandom(16)
    return salt + hashlib.scrypt(plain.encode(), salt=salt, n=2**14, r=8, p=1)
""",
    "export/sheets.py": b"""import csv


def write_report(rows, path):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["name", "total"])
        writer.writerows(rows)
""",
}

QUERIES = [
    ("compute how much surface a closed figure covers", "geo/shapes.py"),
    ("message new members when they join", "mail/welcome.py"),
    ("wait longer and longer between attempts when the network is flaky", "net/resilience.py"),
    ("keep login secrets unreadable if the database leaks", "auth/passwords.py"),
]


@pytest.fixture(scope="module")
def meaning_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("meaning")
    embedder = load_embedder("all-MiniLM-L6-v2")
    built = build_corpus(root, {"shop": FILES}, model="all-MiniLM-L6-v2", embedder=embedder)
    assert built.report.model == "all-MiniLM-L6-v2" and built.report.chunks_embedded > 0
    return SnapshotReader(built.cfg.data_dir), embedder


@pytest.mark.parametrize("query,expected", QUERIES, ids=[q[1] for q in QUERIES])
def test_top_hit_depends_on_meaning(meaning_index, query, expected):
    reader, embedder = meaning_index
    reader.check_model(embedder.model_id)
    hits = search(reader, embedder, SearchRequest(query=query, limit=3))
    assert hits[0].path == expected
    assert hits[0].signals.vector_rank == 1


def test_meaning_queries_share_no_words_with_their_targets():
    # Guards the test above: its hits cannot come from lexical overlap.
    for query, expected in QUERIES:
        words = set(tokens(query)) - STOPWORDS
        assert not words & set(tokens(FILES[expected].decode())), (query, words & set(tokens(FILES[expected].decode())))


def test_real_model_vectors_are_unit_length_384(meaning_index):
    reader, _ = meaning_index
    vectors = reader.vectors[np.arange(len(reader.vectors))]
    assert reader.manifest.dim == 384 and vectors.shape[1] == 384
    norms = (vectors**2).sum(axis=1) ** 0.5
    assert abs(norms - 1).max() < 1e-3


ENVIRONMENT = "\n".join(
    f"{name}=={major}.{minor}.{patch}"
    for name, major, minor, patch in [
        ("attrs", 23, 1, 0),
        ("certifi", 2024, 2, 2),
        ("charset-normalizer", 3, 3, 2),
        ("idna", 3, 6, 0),
        ("iniconfig", 2, 0, 0),
        ("packaging", 24, 0, 0),
        ("pluggy", 1, 4, 0),
        ("pyparsing", 3, 1, 2),
        ("python-dateutil", 2, 9, 0),
        ("pytz", 2024, 1, 0),
        ("six", 1, 16, 0),
        ("tomli", 2, 0, 1),
        ("typing-extensions", 4, 10, 0),
        ("tzdata", 2024, 1, 0),
        ("urllib3", 2, 2, 1),
        ("wheel", 0, 43, 0),
    ]
)
LONG_REPORT = (
    "Problem seen on the staging cluster\n\n"
    "Environment: Ubuntu 22.04.4 LTS, kernel 5.15.0-97-generic x86_64, CPython 3.11.8 built with GCC 11.4.0, "
    "running in a container image rebuilt on 2024-03-01 from the base image of the platform team.\n\n"
    f"Installed distributions (pip freeze):\n\n{ENVIRONMENT}\n\n{ENVIRONMENT}\n\n"
    "What goes wrong: when the network is flaky we want to wait longer and longer between attempts, "
    "but every attempt fires at once."
)


def test_a_long_report_is_read_past_the_models_window(meaning_index):
    """The model reads about 256 word pieces: asked whole, the report's last paragraph is never seen; asked
    as passages, the one that says what is wrong finds the code."""
    reader, embedder = meaning_index
    whole = reader.vectors.cosines(embedder.embed([LONG_REPORT]))
    assert reader.col["path"][int(whole.argmax())] != "net/resilience.py"  # guards the assertion below
    hits = search(reader, embedder, SearchRequest(query=LONG_REPORT, limit=3, mode="vector"))
    assert hits[0].path == "net/resilience.py"
    words = {w for w in tokens(LONG_REPORT) if not w.isdigit()} - STOPWORDS
    assert not words & set(tokens(FILES["net/resilience.py"].decode()))  # found by meaning, not by a shared word


COMMITS = [
    "Add the shoelace formula for polygons",
    "Retry flaky network calls with exponential backoff",
    "Store passwords as bcrypt hashes",
]


def test_search_commits_finds_a_commit_by_meaning(meaning_index, tmp_path):
    """The commit's message shares no word with the query: words alone find nothing, its vector finds it."""
    _, embedder = meaning_index
    repo = gitrepo.init(tmp_path / "src")
    for n, message in enumerate(COMMITS):
        gitrepo.commit(repo, {"notes.txt": f"step {n}\n".encode()}, message=message)
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src"))], model="all-MiniLM-L6-v2")
    run(cfg, embedder=embedder, show_progress=False)
    query = "wait longer and longer between attempts when the connection drops"
    assert not (set(tokens(query)) - STOPWORDS) & set(tokens(COMMITS[1]))
    service = Service(cfg, embedder=embedder)
    found = service.search_commits("default", query).commits
    assert [c["subject"] for c in found] == [COMMITS[1]]
    assert search_commits(service.reader(), "default", query).commits == []  # by words alone
