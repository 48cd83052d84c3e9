"""Bearer tokens at rest: ids that say nothing of the token, a store replaced whole, and a damaged store said in one
sentence wherever it is read (review 2: token ids carried six characters of the secret, and a truncated tokens.json
made every authenticated request a plain-text 500 and `token list` exit 70)."""

from __future__ import annotations

import stat

import httpx

from indexer.build import run
from indexer.embed import HashEmbedder
from indexer.operate.app import app as webhooks_app
from indexer.tokens import ADMIN, TOKENS_FILE, listing, mint, revoke
from query.service import Service
from query.surfaces.app import app
from tests.servers import Server


def test_a_token_id_is_random_and_no_part_of_the_token(tmp_path):
    tokens = [mint(tmp_path, f"t{i}", "default") for i in range(5)]
    ids = [row["id"] for row in listing(tmp_path)]
    assert len(set(ids)) == 5 and all(i.startswith("tok_") and len(i) == 12 for i in ids)
    assert not any(i[4:] in t for i in ids for t in tokens)
    assert revoke(tmp_path, ids[0]) and [r["id"] for r in listing(tmp_path)] == ids[1:]
    assert stat.S_IMODE((tmp_path / TOKENS_FILE).stat().st_mode) == 0o600  # replaced whole, still owner-only


def test_revoking_an_unknown_id_is_one_sentence_and_exit_2(two_repos, blobdex):
    cfg, _, _ = two_repos
    said = blobdex("--config", cfg.path, "token", "revoke", "nope")
    assert said.code == 2
    assert said.err == "blobdex: error: no token with id 'nope'; 'blobdex token list' shows the ids\n"


def test_a_damaged_token_store_is_one_sentence_at_start_and_a_503_while_serving(two_repos, blobdex):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    token = mint(cfg.data_dir, "alice", "default")
    store = cfg.data_dir / TOKENS_FILE
    store.write_text(store.read_text()[:40])  # cut mid-row, as a full disk or a crash leaves it
    for args in (("serve", "--port", "1"), ("token", "list"), ("token", "mint", "--name", "x")):
        said = blobdex("--config", cfg.path, *args)
        assert said.code == 2 and "token store" in said.err and "is damaged" in said.err, (args, said)
        assert said.err.count("\n") == 1 and "Traceback" not in said.err
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url:
        answer = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"})
        page = httpx.post(f"{url}/signin", data={"token": token}, headers={"Origin": url})
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "token_store"
    assert "is damaged" in answer.json()["error"]["message"]
    assert page.status_code == 503 and "is damaged" in page.text


def test_the_control_api_says_a_damaged_token_store_in_one_sentence(forge):
    cfg, _ = forge
    admin = mint(cfg.data_dir, "ops", "default", ADMIN)
    (cfg.data_dir / TOKENS_FILE).write_text("{not json")
    with Server(webhooks_app(cfg.path, control=True)) as url:
        answer = httpx.get(f"{url}/admin/v1/repos", headers={"Authorization": f"Bearer {admin}"})
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "token_store"
