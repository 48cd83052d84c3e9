"""What a query or task text says, read once for every signal: its title and body, the passages the model reads,
the definition names it spells as code; and how much of it is read (MAX_QUERY_CHARS). Every pattern here scans
request text: RE2's (linear time), or bounded to a window."""

from __future__ import annotations

import functools
import re

import re2

from indexer.tokenize import WORD_RE

# A query or task text is read up to MAX_QUERY_CHARS characters: room for a long bug report with its stack trace
# and logs, while what ranking costs grows with the text (an embedding per PASSAGE_CHARS, a BM25 term per distinct
# word, a scan per rule in file localization). A longer text is cut, and the native answers say so (cut_note).
MAX_QUERY_CHARS = 32_000


def cut(text: str) -> tuple[str, int]:
    """`text` as it is read, its first MAX_QUERY_CHARS characters, and its length when it was longer (else 0)."""
    return (text[:MAX_QUERY_CHARS], len(text)) if len(text) > MAX_QUERY_CHARS else (text, 0)


def cut_note(length: int) -> str | None:
    """What an answer says about a query or task text of `length` characters: None when it was read whole."""
    if length <= MAX_QUERY_CHARS:
        return None
    return f"the text was cut to its first {MAX_QUERY_CHARS:,} characters of {length:,}; the rest was not read"


# Question words carry no evidence in code; the vector side still sees the whole query.
STOPWORDS = frozenset(
    "a an and are as at be by do does for from how i in is it of on or the this to was "
    "what when where which who why with".split()
)
CODE_WORD_RE = re.compile(r"[_.$0-9]|[a-z][A-Z]")  # snake_case, dotted, $jquery, v2, camelCase
FRAME_FUNCTION_RE = re.compile(r"line \d+, in $")  # a Python traceback frame names its function
# A task text longer than the model reads (the bundled one reads 256 word pieces: about 1,000 characters
# of prose, far fewer of logs or code) is asked as passages that each fit, cut at paragraphs and fenced
# code blocks (a block that does not fit, at line ends), each under the text's title; a
# chunk's vector score is its best cosine over them. The best, not the mean: a report whose problem is
# stated after a pasted `pip freeze` is found only by its best passage (tests/test_meaning.py). On the
# `eval issues` texts, which mostly fit the model (medians near 420 characters), it changes nothing.
PASSAGE_CHARS = 1000
# RE2 (linear time) for the patterns that scan a whole request text: with Python's engine a lazy fence search
# restarts at every unclosed fence, and a run of blank lines rescans its tail at each line.
FENCE_RE = re2.compile(r"(?ms)^```[^\n]*\n.*?^```[ \t]*$")
PARAGRAPH_BREAK_RE = re2.compile(r"\n\s*\n")


def title_and_body(text: str) -> tuple[str, str]:
    """A task text's title (its first non-blank line) and body (the rest, empty for a one-line query): a text
    with a body is a report, and its title is where it says what it asks."""
    title, _, body = text.strip().partition("\n")
    return title.strip(), body.strip()


def passages(text: str, fits=None) -> list[str]:
    """A task text as the model should read it: whole when it fits (`fits(text)`, by default at most
    PASSAGE_CHARS characters), else its paragraphs and fenced code blocks (a block that does not fit, line
    by line; a line that does not fit, in pieces) packed into passages that fit, each under the title."""
    fits = fits or (lambda t: len(t) <= PASSAGE_CHARS)
    text = text.strip()
    if fits(text):
        return [text]
    title, body = title_and_body(text)
    title = title[: PASSAGE_CHARS // 4]
    blocks, at = [], 0
    for fence in FENCE_RE.finditer(body):  # a code block stays whole, blank lines and all
        blocks += PARAGRAPH_BREAK_RE.split(body[at : fence.start()]) + [fence.group()]
        at = fence.end()
    blocks += PARAGRAPH_BREAK_RE.split(body[at:])
    units = []  # (text, the separator before it)
    for block in (b.strip() for b in blocks if b.strip()):
        if fits(f"{title}\n{block}"):
            units.append((block, "\n\n"))
            continue
        for i, line in enumerate(block.split("\n")):
            step = PASSAGE_CHARS // 4
            cuts = [line] if fits(f"{title}\n{line}") else [line[c : c + step] for c in range(0, len(line), step)]
            units += [(cut, "\n\n" if i == 0 and j == 0 else "\n") for j, cut in enumerate(cuts)]
    out, current = [], ""
    for unit, sep in units:
        joined = f"{current}{sep}{unit}" if current else unit
        if current and not fits(f"{title}\n{joined}"):
            out.append(current)
            joined = unit
        current = joined
    out.append(current)
    return [f"{title}\n{p}" if p else title for p in out]


@functools.lru_cache(maxsize=32)  # ranking and file ranking both ask, and a pasted stack trace is long
def named_definitions(text: str) -> frozenset[str]:
    """The lower-cased definition names a text spells as code, each whole and by its last dotted part.

    A word counts when it looks like code: a compound (`make_context`, `getUserId`, `Command.parse`),
    a call (`render(`), `backticked`, a traceback's function (`in render`), or a capitalised word
    inside a sentence (`Option`). Prose words do not: "fix the help for options" must not pull in
    `class Help`. Measured with `blobdex eval commits` (hybrid file MRR, every lower-case word counting
    -> this rule): commander.js 0.779 -> 0.812, itsdangerous 0.873 -> 0.878, blinker and markupsafe
    unchanged; CodeSearchNet NDCG 0.788 -> 0.796.
    """
    names = set()
    # A report's prose capitalises people, products and places: there only code-like spellings count
    # (pytest's `eval issues`, hybrid MRR on the tune half 0.758 -> 0.773).
    report = bool(title_and_body(text)[1])
    for m in WORD_RE.finditer(text):
        word, start, after = m.group(), m.start(), text[m.end() : m.end() + 1]
        if word.isdigit():
            continue
        i = start - 1
        while i >= 0 and text[i] in " \t":
            i -= 1
        before = text[i] if i >= 0 else "\n"  # the character before the word's blank, if any
        sentence_start = before in "\r\n.!?:#>-*"  # a line's first word, or a sentence's
        if (
            CODE_WORD_RE.search(word)
            or after == "("
            or (after == "`" and text[start - 1 : start] == "`")
            or FRAME_FUNCTION_RE.search(text, max(0, start - 32), start)
            or (word[0].isupper() and not sentence_start and not report)
        ):
            names.update(
                n for n in (word.lower(), word.lower().rsplit(".", 1)[-1]) if len(n) >= 3 and n not in STOPWORDS
            )
    return frozenset(names)
