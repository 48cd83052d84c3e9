"""A README on the tree page is repo content, hostile until rendered safe: raw HTML shows as text, nothing is
loaded from another host, only http(s) and mailto links leave the server, and a relative link opens the file or
folder it names in the same repo at the same commit (never one outside it)."""

from query.surfaces import readme

COMMIT = "a" * 40


def test_markdown_is_rendered_without_raw_html_images_or_script_links():
    text = (
        "# Title\n\n<script>alert(1)</script> <img src=x onerror=alert(1)>\n\n"
        "![logo](https://elsewhere.example/logo.png) [bad](javascript:alert(1)) [site](https://example.com)\n\n"
        "[guide](guide.md) [up](../README.md) [top](../../../etc/passwd) [folder](lib/) [part](#usage)\n"
    )
    html = str(readme.render(text, "README.md", "api", "docs", COMMIT))
    assert "<h1>Title</h1>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html and "<img" not in html
    assert 'href="https://elsewhere.example/logo.png"' in html and ' src="' not in html  # a link, never loaded
    assert "javascript:" not in html.replace("[bad](javascript:alert(1))", "")
    assert f'href="/file/api/docs/guide.md?ref={COMMIT}"' in html
    assert f'href="/file/api/README.md?ref={COMMIT}"' in html
    assert f'href="/tree/api/docs/lib?ref={COMMIT}"' in html
    assert 'href="#">top</a>' in html and 'href="#usage"' in html  # out of the repo: nowhere
    assert 'href="https://example.com" rel="nofollow noopener"' in html


def test_other_readmes_are_text_and_the_markdown_one_is_preferred():
    assert readme.pick(["setup.py", "README.rst", "Readme.md"]) == "Readme.md"
    assert readme.pick(["README", "x.py"]) == "README" and readme.pick(["x.py"]) is None
    html = str(readme.render("Title\n=====\n\n<b>x</b>", "README.rst", "api", "", COMMIT))
    assert html.startswith('<pre class="readme-text">') and "&lt;b&gt;" in html
