"""Chunking: one table of per-language samples and the symbols they must yield."""

import pytest

from indexer import chunk as chunkmod
from indexer.chunk import MAX_CHUNK_CHARS, chunk_text
from indexer.languages import language_for

SAMPLES = [
    (
        "python",
        "class Cart:\n    def add(self, item):\n        self.items.append(item)\n\n"
        "    @staticmethod\n    def empty():\n        return Cart()\n\n\ndef checkout(cart):\n    return cart\n",
        {"Cart", "Cart.add", "Cart.empty", "checkout"},
    ),
    (
        "javascript",
        "class Cart {\n  add(item) { this.items.push(item); }\n}\n"
        "function checkout(cart) { return cart; }\nexport const total = (c) => c.sum;\n",
        {"Cart", "Cart.add", "checkout", "total"},
    ),
    (
        "typescript",
        "interface Item { id: string }\nexport class Cart {\n  add(item: Item): void { }\n}\n"
        "export function checkout(cart: Cart): Cart { return cart; }\n",
        {"Item", "Cart", "Cart.add", "checkout"},
    ),
    (
        "tsx",
        "export function Button(props: {label: string}) {\n  return <button>{props.label}</button>;\n}\n"
        "const Panel = () => <div/>;\n",
        {"Button", "Panel"},
    ),
    (
        "go",
        "package cart\n\ntype Cart struct{ items []int }\n\n"
        "func (c *Cart) Add(i int) { c.items = append(c.items, i) }\n\n"
        "func Checkout(c *Cart) *Cart { return c }\n",
        {"Cart", "Cart.Add", "Checkout"},
    ),
    (
        "rust",
        "pub struct Cart { items: Vec<u32> }\n\n"
        "impl Cart {\n    pub fn add(&mut self, i: u32) { self.items.push(i); }\n}\n\n"
        "pub fn checkout(c: Cart) -> Cart { c }\n",
        {"Cart", "Cart.add", "checkout"},
    ),
    (
        "java",
        "package shop;\n\npublic class Cart {\n    public Cart() {}\n    public void add(int item) { }\n}\n",
        {"Cart", "Cart.Cart", "Cart.add"},
    ),
    (
        "c",
        "#include <stdio.h>\n\nstruct cart { int n; };\n\n"
        "static int *cart_add(struct cart *c, int item) {\n  return 0;\n}\n",
        {"cart", "cart_add"},
    ),
    (
        "cpp",
        "namespace shop {\nclass Cart {\n public:\n  void add(int item) { n++; }\n  int n;\n};\n}\n"
        "int Cart::size() const { return n; }\n",
        {"shop", "shop.Cart", "shop.Cart.add", "Cart::size"},
    ),
    (
        "ruby",
        "module Shop\n  class Cart\n    def add(item)\n      @items << item\n    end\n  end\nend\n",
        {"Shop", "Shop.Cart", "Shop.Cart.add"},
    ),
    (
        "php",
        "<?php\nclass Cart {\n    public function add($item) { $this->items[] = $item; }\n}\n"
        "function checkout($cart) { return $cart; }\n",
        {"Cart", "Cart.add", "checkout"},
    ),
    (
        "csharp",
        "namespace Shop {\n  public class Cart {\n    public void Add(int item) { }\n  }\n}\n",
        {"Shop", "Shop.Cart", "Shop.Cart.Add"},
    ),
    (
        "kotlin",
        "class Cart {\n    fun add(item: Int) { }\n}\nfun checkout(c: Cart) = c\n",
        {"Cart", "Cart.add", "checkout"},
    ),
    ("scala", "object Shop {\n  def checkout(c: Int): Int = c\n}\n", {"Shop", "Shop.checkout"}),
    ("swift", "class Cart {\n    func add(item: Int) { }\n}\nfunc checkout() { }\n", {"Cart", "Cart.add", "checkout"}),
    ("bash", "deploy() {\n  echo hi\n}\nfunction build {\n  make\n}\n", {"deploy", "build"}),
    ("lua", "function M.add(x)\n  return x\nend\nlocal function helper()\nend\n", {"M.add", "helper"}),
    (
        "markdown",
        "Intro text.\n\n# Install\n\nRun it.\n\n## From source\n\n```\n# not a heading\n```\n\n# Usage\n\nUse it.\n",
        {"", "Install", "Install > From source", "Usage"},
    ),
]


@pytest.mark.parametrize("lang,source,expected", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_chunker_names_symbols_per_language(lang, source, expected):
    chunks, fallback = chunk_text(source, lang)
    assert fallback is None
    assert {c.symbol for c in chunks} >= expected
    for c in chunks:  # every chunk's lines are exactly its text
        assert "\n".join(source.split("\n")[c.line_start - 1 : c.line_end]) == c.text
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_method_kind_and_file_header():
    chunks, _ = chunk_text("import os\n\nclass A:\n    def f(self):\n        return os.sep\n", "python")
    by_symbol = {c.symbol: c for c in chunks}
    assert by_symbol["A.f"].kind == "method"
    assert by_symbol[""].kind == "module" and by_symbol[""].text == "import os"


def test_decorator_belongs_to_its_function():
    chunks, _ = chunk_text("@app.route('/x')\ndef handler():\n    return 1\n", "python")
    assert chunks[0].symbol == "handler" and chunks[0].text.startswith("@app.route")


@pytest.mark.parametrize(
    "lang,source,symbol,first_line",
    [
        (
            "javascript",
            "let n = 0;  // counter\n/**\n * Parse the argv.\n */\nfunction parse(argv) { return argv; }\n",
            "parse",
            "/**",
        ),
        ("go", "package p\n\n// Add appends i.\n// It never fails.\nfunc Add(i int) {}\n", "Add", "// Add appends i."),
        ("rust", "/// A cart.\n#[derive(Debug)]\npub struct Cart { n: u32 }\n", "Cart", "/// A cart."),
        (
            "java",
            "class A {\n    /** Adds one. */\n    @Override\n    void add() {}\n}\n",
            "A.add",
            "    /** Adds one. */",
        ),
        (
            "typescript",
            "/** Items by id. */\nexport interface Store {\n  get(id: string): Item;\n}\n",
            "Store",
            "/** Items by id. */",
        ),
    ],
)
def test_doc_comments_belong_to_the_definition_below(lang, source, symbol, first_line):
    chunks, _ = chunk_text(source, lang)
    chunk = next(c for c in chunks if c.symbol == symbol)
    assert chunk.text.split("\n")[0] == first_line


def test_a_trailing_comment_stays_with_its_own_line():
    chunks, _ = chunk_text("const a = 1; // one\nfunction f() {}\n", "javascript")
    assert [c.text for c in chunks if c.symbol == "f"] == ["function f() {}"]


def test_a_class_header_is_one_chunk_with_its_fields():
    chunks, _ = chunk_text("class B {\n  x = 1;\n  f() { return 1; }\n}\n", "javascript")
    assert [(c.symbol, c.line_start, c.line_end) for c in chunks] == [("B", 1, 2), ("B.f", 3, 3)]


def test_long_function_is_split_into_windows_with_the_same_symbol():
    body = "".join(f"    value_{i} = compute({i})\n" for i in range(200))
    chunks, _ = chunk_text(f"def big():\n{body}", "python")
    assert len(chunks) > 3
    assert {c.symbol for c in chunks} == {"big"}
    assert all(len(c.text) <= MAX_CHUNK_CHARS + 100 for c in chunks)
    assert chunks[-1].line_end == 201


def test_parse_timeout_falls_back_to_line_windows(monkeypatch):
    monkeypatch.setattr(chunkmod, "PARSE_TIMEOUT_SECONDS", 0.0)
    source = "x = [" + "1, " * 200_000 + "]\n"
    chunks, fallback = chunk_text(source, "python")
    assert fallback == "parse_timeout"
    assert chunks and all(c.kind == "text" for c in chunks)


def test_unparseable_source_keeps_what_it_can():
    chunks, fallback = chunk_text("def ok():\n    return 1\n\ndef broken(:\n    pass\n", "python")
    assert fallback is None
    assert "ok" in {c.symbol for c in chunks}
    assert "".join(c.text for c in chunks).count("broken") == 1


@pytest.mark.parametrize(
    "path,lang",
    [
        ("a/b.py", "python"),
        ("x.tsx", "tsx"),
        ("x.jsx", "javascript"),
        ("Makefile", "make"),
        ("README", "text"),
        ("notes.MD", "markdown"),
        ("noext", "text"),
        ("Dockerfile.prod", "dockerfile"),
    ],
)
def test_language_for_path(path, lang):
    assert language_for(path) == lang
