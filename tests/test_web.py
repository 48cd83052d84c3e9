"""The page for people, in a real browser: Debian's Chromium, headless, driven by Selenium through Debian's
chromedriver (.ci/run installs both). Screenshots go to tests/artifacts/ (not committed) to be looked at."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import html5lib
import httpx
import pytest
from dulwich.repo import Repo
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from indexer.build import run
from indexer.embed import HashEmbedder
from indexer.tokens import mint
from query.service import Service
from query.surfaces.app import app
from tests import gitrepo
from tests.corpus import LIB, api_files, build_corpus, tools_files
from tests.servers import Server

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# As the machine's own check starts it: no sandbox as root, no GPU, nothing fetched in the background.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A real multi-repo index served with tokens required: org default holds api and tools (tools stale, its
    source gone), org beta holds other. Yields (base url, token of default, token of beta)."""
    root = tmp_path_factory.mktemp("web")
    other = {"lib/other.py": b'def only_in_beta(x):\n    """A function of org beta."""\n    return x\n'}
    corpus = build_corpus(root, {"api": api_files(), "tools": tools_files(), "beta/other": other})
    shutil.move(root / "src" / "tools", root / "src" / "tools-gone")
    run(corpus.cfg, show_progress=False)  # tools is stale now, with the error
    default, beta = mint(corpus.cfg.data_dir, "alice", "default"), mint(corpus.cfg.data_dir, "bob", "beta")
    service = Service(corpus.cfg, embedder=HashEmbedder())
    with Server(app(service, require_token=True)) as url:
        yield url, default, beta


@contextmanager
def browser(javascript: bool = True, width: int = 1280, height: int = 900) -> Iterator[webdriver.Chrome]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    assert not missing, f"no {' or '.join(missing)}: install Debian's chromium and chromium-driver (.ci/run does)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    # Chromium leaves a directory for its singleton socket in TMPDIR after it quits: give it one that goes.
    with tempfile.TemporaryDirectory(prefix="blobdex-chromium-") as tmp:
        service = DriverService(CHROMEDRIVER, env={**os.environ, "TMPDIR": tmp})
        driver = webdriver.Chrome(service=service, options=options)
        try:
            yield driver
        finally:
            driver.quit()


@pytest.fixture
def chrome():
    with browser() as driver:
        yield driver


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def sign_in(driver, url: str, token: str) -> None:
    driver.get(f"{url}/repos")  # without the cookie: off to the form, and back here after it
    assert "/signin" in driver.current_url
    driver.find_element(By.ID, "token").send_keys(token + Keys.ENTER)
    WebDriverWait(driver, 10).until(lambda d: urlsplit(d.current_url).path == "/repos")


def wait(driver, selector: str, seconds: float = 15):
    return WebDriverWait(driver, seconds).until(seen.presence_of_element_located((By.CSS_SELECTOR, selector)))


def test_search_as_you_type_then_follow_a_hit_to_its_highlighted_lines(site, chrome):
    url, token, _ = site
    sign_in(chrome, url, token)
    chrome.get(url + "/")
    box = chrome.find_element(By.ID, "q")
    box.send_keys("renew subscription")
    first = wait(chrome, "#results a.hit")
    assert parse_qs(urlsplit(chrome.current_url).query)["q"] == ["renew subscription"]  # the URL is the search
    assert "src/billing/renew.py" in first.text
    assert chrome.find_elements(By.CSS_SELECTOR, "#results mark")  # the query's words marked in the snippets
    shot(chrome, "search")
    target = first.get_attribute("href")
    first.click()
    WebDriverWait(chrome, 10).until(lambda d: "/file/api/src/billing/renew.py" in d.current_url)
    marked = chrome.find_elements(By.CSS_SELECTOR, "tr.hl")
    start, end = parse_qs(urlsplit(target).query)["hl"][0].split("-")
    assert [m.get_attribute("id") for m in marked] == [f"L{n}" for n in range(int(start), int(end) + 1)]
    assert chrome.find_elements(By.CSS_SELECTOR, "td.l code span.k")  # keywords highlighted by Pygments
    info = chrome.find_element(By.CSS_SELECTOR, ".fileinfo").text
    assert "commit" in info and "blob" in info
    shot(chrome, "file")
    definition = chrome.find_element(By.CSS_SELECTOR, "a.def")
    name = definition.text
    definition.click()
    wait(chrome, "h1")
    assert name in chrome.find_element(By.TAG_NAME, "h1").text and "Definitions" in chrome.page_source
    shot(chrome, "symbol")


def test_a_shared_link_to_a_range_past_the_file_marks_the_lines_shown_without_freezing_the_tab(site, chrome):
    """The script walked every number of `#L1-L300000000` and held the tab for over 30 s (review 2, B13); it now
    walks the rows the page has. A page that does not finish loading within the timeout fails the test."""
    url, token, _ = site
    sign_in(chrome, url, token)
    chrome.set_page_load_timeout(20)
    chrome.get(url + "/file/api/src/billing/renew.py#L2-L300000000")
    rows = [r.get_attribute("id") for r in chrome.find_elements(By.CSS_SELECTOR, "tr[id^='L']")]
    marked = [r.get_attribute("id") for r in chrome.find_elements(By.CSS_SELECTOR, "tr.hl")]
    assert len(rows) > 3 and marked == rows[1:]


def test_the_repos_page_shows_a_stale_repo_with_its_error_and_the_last_run(site, chrome):
    url, token, _ = site
    sign_in(chrome, url, token)
    rows = {
        r.find_element(By.TAG_NAME, "th").text: r for r in chrome.find_elements(By.CSS_SELECTOR, "table.repos tbody tr")
    }
    assert set(rows) == {"api", "tools"}
    assert "stale" in rows["tools"].get_attribute("class") and "does not exist" in rows["tools"].text
    assert "ok" in rows["api"].text and "Last index run" in chrome.page_source
    shot(chrome, "repos")


def test_another_token_is_another_org(site, chrome):
    url, _, beta = site
    sign_in(chrome, url, beta)
    names = [r.text for r in chrome.find_elements(By.CSS_SELECTOR, "table.repos tbody th")]
    assert names == ["other"]
    chrome.get(url + "/?q=renew+subscription")
    wait(chrome, "a.hit")
    hits = [h.text for h in chrome.find_elements(By.CSS_SELECTOR, "a.hit")]
    assert all(h.startswith("other:") for h in hits)  # the nearest of beta's chunks, never api's
    chrome.get(url + "/?q=only_in_beta")
    assert "other:lib/other.py" in wait(chrome, "a.hit").text
    chrome.find_element(By.CSS_SELECTOR, ".signout button").click()
    # The POST's answer (which drops the cookie) must land before the next page is asked for, or that request
    # aborts it and the cookie stays.
    WebDriverWait(chrome, 10).until(lambda d: urlsplit(d.current_url).path == "/signin")
    chrome.get(url + "/repos")
    assert "/signin" in chrome.current_url  # signed out: the cookie is gone


def test_keyboard_route_and_symbol_pages(site, chrome):
    url, token, _ = site
    sign_in(chrome, url, token)
    chrome.get(url + "/?q=refund+an+invoice")
    wait(chrome, "a.hit")
    chrome.find_element(By.TAG_NAME, "body").click()
    chrome.find_element(By.TAG_NAME, "body").send_keys("/")
    assert chrome.switch_to.active_element.get_attribute("id") == "q"
    chrome.switch_to.active_element.send_keys(Keys.ARROW_DOWN)
    selected = chrome.find_element(By.CSS_SELECTOR, "a.hit.selected")
    assert selected == chrome.switch_to.active_element
    chrome.get(url + "/route")
    chrome.find_element(By.ID, "task").send_keys("renew a customer's subscription")
    chrome.find_element(By.CSS_SELECTOR, "form.search button").click()
    first = wait(chrome, "ol.routes h2 a")
    assert first.text == "api" and "git sparse-checkout" in chrome.page_source
    shot(chrome, "route")


def test_search_and_the_file_view_work_without_javascript(site):
    url, token, _ = site
    with browser(javascript=False) as driver:
        sign_in(driver, url, token)
        driver.get(url + "/")
        driver.find_element(By.ID, "q").send_keys("drain_queue" + Keys.ENTER)  # the form itself is submitted
        hit = wait(driver, "a.hit")
        assert "tools:queue/src/lib.rs" in hit.text  # stale, but its content keeps serving
        hit.click()
        assert wait(driver, "tr.hl") and "/file/tools/queue/src/lib.rs" in driver.current_url


def test_narrow_screens_and_the_dark_theme(site):
    url, token, _ = site
    with browser(width=390, height=844) as driver:
        sign_in(driver, url, token)
        driver.get(url + "/?q=renew+subscription")
        wait(driver, "a.hit")
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        shot(driver, "search-narrow")
        driver.execute_cdp_cmd(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
        )
        background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        shot(driver, "search-dark")


def test_sign_in_keeps_the_token_in_a_strict_cookie_and_refuses_other_sites(site):
    url, token, _ = site
    with httpx.Client(base_url=url) as client:
        assert client.get("/repos").status_code == 303
        cross = client.post("/signin", data={"token": token}, headers={"Origin": "https://evil.example"})
        assert cross.status_code == 403  # a form on another site cannot sign a browser in
        wrong = client.post("/signin", data={"token": "bdx_wrong"})
        assert wrong.status_code == 401 and "not valid" in wrong.text
        answer = client.post("/signin", data={"token": token, "next": "//evil.example/"})
        assert answer.status_code == 303 and answer.headers["location"] == "/"  # never off this server
        cookie = answer.headers["set-cookie"]
        assert all(flag in cookie for flag in ("HttpOnly", "Secure", "SameSite=strict")), cookie
        assert "default-src 'self'" in answer.headers["content-security-policy"]


def test_every_page_is_valid_html_whose_links_all_answer(site):
    """html5lib in strict mode on each page, every link on it followed (no broken link), nothing from elsewhere."""
    url, token, _ = site
    with httpx.Client(base_url=url, cookies={"blobdex_token": token}) as client:
        pages = [
            "/",
            "/?q=renew+subscription&signals=1",
            "/?q=total_with_tax&mode=files",
            "/?q=drain_&mode=grep",
            "/repos",
            "/route?task=renew+a+subscription",
            "/symbol?name=renew_subscription&repo=api",
            "/commits",
            "/commits?q=change&repo=api",
            "/tree/api",
            "/tree/api/src/billing",
            "/tree/tools",
            "/log/api",
            "/log/api/src/billing/renew.py",
            "/blame/api/src/billing/renew.py",
            "/compare/api?base=main&head=main",
        ]
        bearer = {"Authorization": f"Bearer {token}"}
        head = client.get("/v1/log", params={"repo": "api"}, headers=bearer).json()["commits"][0]["commit_id"]
        pages.append(f"/commit/api/{head}")
        seen_links, checked = set(), 0
        for path in pages:
            page = client.get(path)
            assert page.status_code == 200, path
            document = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page.text)
            for element in document.iter():
                for attribute in ("href", "src", "action"):
                    link = element.get(attribute)
                    if not link or link.startswith(("#", "data:")):
                        continue
                    assert link.startswith("/"), f"{path} links outside this server: {link}"
                    if element.tag == "form" or link in seen_links:
                        continue
                    seen_links.add(link)
                    answer = client.get(urljoin(url + path, link))
                    assert answer.status_code == 200, f"{path} -> {link}: {answer.status_code}"
                    checked += 1
        assert checked > 20


def test_a_page_that_cannot_answer_says_why_in_one_sentence_with_its_status(site):
    url, token, _ = site
    with httpx.Client(base_url=url, cookies={"blobdex_token": token}) as client:
        for path, status, words in (
            ("/file/api/no/such.py", 404, "no/such.py"),
            ("/file/api/.env", 403, "credential"),
            ("/?q=renew&repo=nope", 404, "unknown repo 'nope'"),
            ("/symbol?name=no_such_symbol", 404, "no definition of 'no_such_symbol'"),
            ("/commits?since=yesterday", 400, "is not a date"),
        ):
            page = client.get(path)
            assert page.status_code == status and page.headers["content-type"].startswith("text/html"), path
            document = html5lib.parse(page.text, namespaceHTMLElements=False)
            (message,) = [e for e in document.iter() if e.get("class") == "error"]
            assert words in message.text and "\n" not in message.text.strip() and "Traceback" not in page.text, path


def test_the_commits_page_searches_history_and_links_each_changed_file_at_its_commit(site):
    url, token, _ = site
    with httpx.Client(base_url=url, cookies={"blobdex_token": token}) as client:
        newest = client.get("/commits")  # no words: the newest commits of the org
        found = client.get("/commits", params={"q": "change", "repo": "api"})
    assert newest.status_code == found.status_code == 200
    document = html5lib.parse(found.text, namespaceHTMLElements=False)
    (listed,) = [e for e in document.iter("ol") if e.get("class") == "commits"]
    items = [li for li in listed if li.tag == "li"]
    assert len(items) == 1 and "".join(items[0].find("h2").itertext()) == "change"  # a link to the commit
    links = [a.get("href") for a in items[0].iter("a")]
    assert links[0].startswith("/commit/api/" + items[0].find("p").find("code").text)  # the commit's page
    links = links[1:]
    assert links and all(h.startswith("/file/api/") and "?ref=" in h for h in links)
    # the commit added a credential file: listed, never a link (the snapshot does not index it)
    assert ".env" in "".join(items[0].itertext()) and not any("/.env" in h for h in links)


def test_a_repo_opens_at_its_root_and_its_folders_walk_down_to_a_file_and_back(site, chrome):
    url, token, _ = site
    sign_in(chrome, url, token)
    chrome.get(url + "/repos")
    chrome.find_element(By.LINK_TEXT, "api").click()
    readme = wait(chrome, "section.readme")
    assert urlsplit(chrome.current_url).path == "/tree/api" and "Billing and carts for the Acme shop." in readme.text
    rows = {r.find_element(By.CSS_SELECTOR, "td").text: r for r in chrome.find_elements(By.CSS_SELECTOR, "tr")[1:]}
    assert {"src/", "web/", "assets/", "README.md", ".env"} <= set(rows)
    assert not rows[".env"].find_elements(By.TAG_NAME, "a") and "credentials" in rows[".env"].text  # listed, not read
    shot(chrome, "tree-root")
    for name in ("src/", "billing/", "renew.py"):  # each swaps the page in place: wait for the next link
        WebDriverWait(chrome, 10).until(seen.element_to_be_clickable((By.LINK_TEXT, name))).click()
    wait(chrome, "tr#L1")
    crumbs = [a.text for a in chrome.find_elements(By.CSS_SELECTOR, "nav.crumbs a")]
    assert crumbs == ["api", "src", "billing"] and "/file/api/src/billing/renew.py" in chrome.current_url
    outline = [a.text for a in chrome.find_elements(By.CSS_SELECTOR, "details.outline a")]
    assert outline == ["Billing", "renew_subscription", "cancel"]  # the file's definitions, each to its lines
    shot(chrome, "tree-file")
    chrome.find_element(By.CSS_SELECTOR, "nav.crumbs").find_element(By.LINK_TEXT, "billing").click()
    wait(chrome, "table.tree")
    assert urlsplit(chrome.current_url).path == "/tree/api/src/billing"
    chrome.back()
    assert wait(chrome, "tr#L1") and "/file/api/src/billing/renew.py" in chrome.current_url


def test_a_folder_named_as_a_file_opens_as_a_folder_and_unknown_pages_are_pages(site):
    url, token, _ = site
    html = {"Accept": "text/html"}
    with httpx.Client(base_url=url, cookies={"blobdex_token": token}) as client:
        folder = client.get("/file/api/src/billing", headers=html)
        assert folder.status_code == 303 and folder.headers["location"] == "/tree/api/src/billing"
        missing = client.get("/tree/api/no/such", headers=html)
        assert missing.status_code == 404 and "no folder &#39;no/such&#39;" in missing.text
        for method, path, status in (("GET", "/no-such-page", 404), ("POST", "/repos", 405)):
            page = client.request(method, path, headers=html)  # signed in by the cookie, as a browser is
            assert page.status_code == status and page.headers["content-type"].startswith("text/html"), path
            document = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page.text)
            (message,) = [e for e in document.iter() if e.get("class") == "error"]
            assert message.text.strip() and 'href="/"' in page.text  # one sentence, and a way back
        assert client.request("POST", "/repos", headers=html).headers["allow"] == "GET, HEAD"
        bearer = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        program = client.get("/no-such-page", headers=bearer)
        assert program.status_code == 404 and program.json()["error"]["code"] == "not_found"
        api = client.get("/v1/no-such", headers=html)  # the API answers JSON whatever a browser asks
        assert api.headers["content-type"].startswith("application/json")
    with httpx.Client(base_url=url) as stranger:  # no cookie, no token: a browser is sent to sign in, a program not
        assert stranger.get("/no-such-page", headers=html).headers["location"].startswith("/signin?next=")
        assert stranger.get("/no-such-page").status_code == 401


APP = {  # a repo of org default calling another repo's package: an import, a receiver's method, a guess
    "app/__init__.py": b"",
    "app/main.py": b"from lib import Session\n\n\ndef go(x):\n    s = Session()\n    x.request('get', 'u')\n"
    b"    return s.request('get', 'u')\n",
}


@pytest.fixture(scope="module")
def two_repos(tmp_path_factory):
    """A Python org of two repos, app calling lib, served without tokens."""
    corpus = build_corpus(tmp_path_factory.mktemp("navigate"), {"lib": LIB, "app": APP})
    changed = APP["app/main.py"].replace(b"return s.request", b"return s.send")  # a second commit, to blame
    gitrepo.commit(Repo(str(corpus.root / "src" / "app")), {**APP, "app/main.py": changed}, message="Send directly")
    run(corpus.cfg, show_progress=False)
    with Server(app(Service(corpus.cfg, embedder=HashEmbedder()))) as url:
        yield url


@pytest.mark.parametrize("javascript", [True, False], ids=["javascript", "no-javascript"])
def test_follow_a_call_into_another_repo_list_its_references_and_go_back(two_repos, javascript):
    """By keyboard (Enter on each link): a call opens its definition in the other repo, the definition lists its
    callers in every repo, and Back returns; a call resolved only by name is no link."""
    with browser(javascript=javascript) as driver:
        driver.get(two_repos + "/file/app/app/main.py")
        calls = {a.text: a for a in driver.find_elements(By.CSS_SELECTOR, "a.call")}
        line6 = driver.find_element(By.ID, "L6")
        assert not line6.find_elements(By.CSS_SELECTOR, "a.call")  # x.request: x could be anything
        request = driver.find_element(By.ID, "L7").find_element(By.CSS_SELECTOR, "a.call")  # s.send, s a Session
        said = request.get_attribute("title")
        assert "receiver" in request.get_attribute("class") and "def send(self, m) (lib:src/lib/sessions.py" in said
        shot(driver, f"navigate-call-{'js' if javascript else 'nojs'}")
        driver.execute_script("window.stayed = true")  # gone after a page load, kept by navigation in place
        calls["Session"].send_keys(Keys.ENTER)
        wait(driver, "tr.hl")
        assert "/file/lib/src/lib/sessions.py" in driver.current_url
        marked = driver.find_element(By.CSS_SELECTOR, "tr.hl")
        definition = marked.find_element(By.CSS_SELECTOR, "a.def")
        assert "class Session" in marked.text and definition.text == "Session"
        definition.send_keys(Keys.ENTER)
        wait(driver, "ul.evidence")
        headings = [h.text for h in driver.find_elements(By.TAG_NAME, "h2")]
        assert "/symbol" in driver.current_url and "Callers (3: lib 2, app 1)" in headings, headings
        assert "app:app/main.py:5 in go import" in driver.find_element(By.TAG_NAME, "main").text
        by_repo = [h.text.split()[0] for h in driver.find_elements(By.CSS_SELECTOR, "h3.repo-callers")]
        assert by_repo == ["lib", "app"]  # grouped by repo, the most callers first
        # with JavaScript the walk so far loaded no page; without it, each step was a load
        assert driver.execute_script("return window.stayed === true") is javascript
        shot(driver, f"navigate-references-{'js' if javascript else 'nojs'}")
        driver.back()
        driver.back()
        assert wait(driver, "tr#L7") and "/file/app/app/main.py" in driver.current_url


def test_blame_a_file_open_the_commit_and_compare_two_refs(two_repos):
    with browser() as driver:
        driver.get(two_repos + "/file/app/app/main.py")
        driver.find_element(By.LINK_TEXT, "blame").click()
        line7 = wait(driver, "tr#L7")
        assert "Test" in line7.text and "return s.send" in line7.text
        first = driver.find_element(By.CSS_SELECTOR, "tr#L1 td.who a").text
        changed = line7.find_element(By.CSS_SELECTOR, "td.who a")
        assert changed.text != first  # line 7 changed in the second commit, line 1 did not
        shot(driver, "blame")
        changed.click()
        assert wait(driver, "section.diff") and driver.find_element(By.TAG_NAME, "h1").text == "Send directly"
        removed = [s.text for s in driver.find_elements(By.CSS_SELECTOR, ".hunks .del")]
        added = [s.text for s in driver.find_elements(By.CSS_SELECTOR, ".hunks .add")]
        assert removed == ["-    return s.request('get', 'u')"] and added == ["+    return s.send('get', 'u')"]
        shot(driver, "commit")
        driver.get(two_repos + "/compare/app")
        driver.find_element(By.NAME, "base").send_keys("main~1")
        driver.find_element(By.NAME, "head").send_keys("main" + Keys.ENTER)
        wait(driver, "section.diff")
        assert "1 file(s) changed" in driver.find_element(By.CSS_SELECTOR, "p.fileinfo").text
        driver.get(two_repos + "/log/app/app/main.py")
        subjects = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "ol.commits h2")]
        assert subjects[0] == "Send directly" and len(subjects) == 2


def test_results_read_like_the_file_view_and_filters_come_off_one_at_a_time(site):
    url, token, _ = site
    with httpx.Client(base_url=url, cookies={"blobdex_token": token}) as client:
        found = client.get("/", params={"q": "renew subscription", "repo": "api", "kind": "method", "limit": 50})
        route = client.get("/route", params={"task": "renew a subscription"})
        many = client.get("/", params={"q": "renew subscription", "limit": 50})  # files with several hits
    document = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(found.text)
    snippet = next(e for e in document.iter("pre") if e.get("class") == "snippet")
    classes = {e.get("class") for e in snippet.iter("span")}
    assert {"k", "nf"} <= classes  # the file view's highlighter: a keyword, a function's name
    assert any(e.tag == "mark" for e in snippet.iter())  # and the query's words marked inside its tokens
    chips = {e.text.strip(): e.get("href") for e in document.iter("a") if e.get("class") == "chip"}
    assert set(chips) == {"repo: api", "kind: method"}
    assert "repo=" not in chips["repo: api"] and "kind=method" in chips["repo: api"] and "q=renew" in chips["repo: api"]
    unfiltered = html5lib.parse(many.text, namespaceHTMLElements=False)
    folds = [e for e in unfiltered.iter("details") if e.get("class") == "more-here"]
    summaries = ["".join(f.find("summary").itertext()) for f in folds]
    assert folds and all(s.endswith("more in this file") for s in summaries)  # past a file's two best hits
    assert any(e.get("class") == "syntax" for e in document.iter("details"))  # the query syntax, on the page
    words = [
        li.text
        for ul in html5lib.parse(route.text, namespaceHTMLElements=False).iter("ul")
        if ul.get("class") == "signals"
        for li in ul.iter("li")
    ]
    assert words[0].startswith("its best chunk matches the task") and not any(w.startswith("peak") for w in words)


def tab_to(driver, selector: str, text: str, presses: int = 120) -> None:
    """Press Tab, as a person without a mouse does, until the focused element is `selector` reading `text`."""
    for _ in range(presses):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        found = (
            "const e = document.activeElement; return e.matches(arguments[0]) && e.textContent.trim() === arguments[1]"
        )
        if driver.execute_script(found, selector, text):
            return
    raise AssertionError(f"{presses} presses of Tab never reached {selector} {text!r}")


def test_the_same_walk_by_keyboard_alone(two_repos):
    """Tab to the file, Enter; Tab to the call, Enter; Tab to the definition, Enter; its callers; then the
    browser's Back twice (WebDriver's: headless Chromium takes no Alt+Left from synthetic keys)."""
    with browser() as driver:
        driver.get(two_repos + "/tree/app/app")
        tab_to(driver, "table.tree a", "main.py")
        ActionChains(driver).send_keys(Keys.ENTER).perform()
        wait(driver, "tr#L7")
        tab_to(driver, "a.call", "Session")
        card = driver.execute_script("return getComputedStyle(document.activeElement, '::after').content")
        assert "class Session" in card and "resolved by import" in card  # focus shows what it calls, as hover does
        shot(driver, "keyboard-focus-card")
        ActionChains(driver).send_keys(Keys.ENTER).perform()
        WebDriverWait(driver, 10).until(lambda d: "/file/lib/src/lib/sessions.py" in d.current_url)
        tab_to(driver, "a.def", "Session")
        ActionChains(driver).send_keys(Keys.ENTER).perform()
        wait(driver, "h3.repo-callers")
        assert "/symbol?name=Session" in driver.current_url
        driver.back()
        driver.back()
        WebDriverWait(driver, 10).until(lambda d: "/file/app/app/main.py" in d.current_url)
        shot(driver, "keyboard-walk")
