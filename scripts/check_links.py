#!/usr/bin/env python3
"""Checks every relative link of the repository's Markdown pages.

Pages: README.md, docs/**/*.md, bench/*/README.md (or the files given on
the command line, relative to the repository root). For every inline link or
image `[text](target)` and every reference definition `[id]: target` outside
code, a relative target must name a file or directory that exists, and an
`#anchor` into a Markdown page (the page itself for `#anchor` alone) must
name one of its headings as GitHub spells anchors: lower case, punctuation
other than `-` and `_` removed, spaces turned into `-`, and `-1`, `-2`, ...
appended to repeated headings. Links with a scheme (https:, mailto:) are
not followed. Prints one line per broken link and exits with status 1 if
there is any. Standard library only.

    python3 scripts/check_links.py            # the default pages
    python3 scripts/check_links.py docs/x.md  # only these
"""
import re
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def default_pages():
    pages = [ROOT / "README.md"]
    pages += sorted((ROOT / "docs").rglob("*.md"))
    pages += sorted((ROOT / "bench").glob("*/README.md"))
    return pages


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, line


def slug(heading):
    """The anchor GitHub gives a heading's text (before deduplication)."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags go
    kept = []
    for ch in text.lower():
        category = unicodedata.category(ch)
        if ch in " -" or category[0] in "LMN" or category == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


_anchors = {}


def anchors_of(page):
    if page not in _anchors:
        seen = {}
        found = set()
        text = page.read_text(encoding="utf-8")
        for _, line in prose_lines(text):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ANCHOR.findall(line))
        _anchors[page] = found
    return _anchors[page]


def targets(text):
    """(line number, target) of every link in the prose of `text`."""
    for number, line in prose_lines(text):
        bare = CODE_SPAN.sub("", line)
        for m in INLINE_LINK.finditer(bare):
            yield number, m.group(1)
        m = REFERENCE.match(bare)
        if m:
            yield number, m.group(1)


def check(page):
    problems = []
    where = page.relative_to(ROOT)
    for number, target in targets(page.read_text(encoding="utf-8")):
        target = target.strip("<>")
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if path:
            if not destination.exists():
                problems.append(f"{where}:{number}: {target}: no such file or directory")
                continue
            if ROOT not in destination.parents and destination != ROOT:
                problems.append(f"{where}:{number}: {target}: outside the repository")
                continue
        if anchor and destination.suffix == ".md" and destination.is_file():
            if anchor not in anchors_of(destination):
                problems.append(f"{where}:{number}: {target}: no heading '#{anchor}' in "
                                f"{destination.relative_to(ROOT)}")
    return problems


def main(argv):
    pages = [ROOT / a for a in argv] if argv else default_pages()
    problems = []
    links = 0
    for page in pages:
        links += sum(1 for _ in targets(page.read_text(encoding="utf-8")))
        problems += check(page)
    for p in problems:
        print(p)
    print(f"check_links: {len(pages)} pages, {links} links, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
