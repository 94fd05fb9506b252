#!/usr/bin/env python3
"""Checks the user documentation's links, the paths it names, and that it
describes the product rather than its making.

Pages (the user documentation): README.md, CHANGELOG.md, docs/**/*.md,
bench/**/README.md and examples/**/README* — or the files given on the
command line, relative to the root. The root is the repository unless
`--root DIR` names another tree. Four rules; each broken one is printed as
`page:line: what` and the exit status is 1 if there is any.

1. Links. For every inline link or image `[text](target)` and every
   reference definition `[id]: target` outside code, a relative target must
   name a file or directory that exists inside the root, and an `#anchor`
   into a Markdown page (the page itself for `#anchor` alone) must name one
   of its headings as GitHub spells anchors: lower case, punctuation other
   than `-` and `_` removed, spaces turned into `-`, and `-1`, `-2`, ...
   appended to repeated headings. Targets with a scheme (https:, mailto:)
   are not followed.

2. Paths in code spans. In the prose (outside fenced code blocks), a code
   span names a repository path when
   - it is one word that starts with one of the top-level folders
     include/ docs/ tools/ examples/ bench/ scripts/ tests/ cmake/, or
     that holds a `/` and ends in an extension (a dot, then a letter, then
     up to five letters or digits: `.hpp`, `.md`, `.py`, `.json`), or
   - it is several words (a command line) and the word starts with one of
     those top-level folders; the other words of a command (options,
     programs, output files) are not checked.
   A list in braces is expanded first (`metrics/{trace,events}.hpp` names
   two files), and a trailing `:LINE` or `:LINE-LINE` is dropped. The
   bases are the root, the page's folder, include/ (for
   `diloco/runtime/learner.hpp`) and include/diloco/ (for
   `runtime/learner.hpp`). A path that starts with a top-level folder, or
   whose first folder is a folder of one of the bases, must exist under
   one of the bases; any other (`keys/syncer.pub`: a file a recipe writes)
   names no folder of the repository and is left alone. Not checked (they are not files of the repository): words with a
   scheme or `://` (URLs), absolute paths and `~` paths, words that start
   with `build` (build folders: `build/`, `build-bench/`) or `-` (options),
   words holding a placeholder or a glob (`<dir>`, `{id}`, `*`, `?`, `[`,
   `$`, `…`, `...`, `=`, or an upper-case word such as `DIR`, `SYNCER`),
   and words holding other characters than letters, digits and `_ . / + -`
   (C++ expressions such as `a.size()/2`). CHANGELOG.md is exempt: the
   files it names may have been moved or removed since.

3. Machine paths. A path into a particular machine's home or work folders —
   `/work`, `/home` or `/root` followed by `/` or the end of the word —
   is refused anywhere on a page, code blocks included, CHANGELOG.md too:
   a reader's machine has none of them. (`/tmp/...` is allowed: recipes
   write their output there.)

4. History. `issue N`, `issue #N` and `issues N` (any case) are refused on
   every page but CHANGELOG.md, code blocks included: the documentation
   describes the product; how it came to be goes to the CHANGELOG.

Standard library only.

    python3 scripts/check_links.py                 # the default pages
    python3 scripts/check_links.py docs/x.md       # only these
    python3 scripts/check_links.py --root DIR      # another tree's pages
"""
import argparse
import re
import sys
import unicodedata
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")

TOP_FOLDERS = ("include/", "docs/", "tools/", "examples/", "bench/", "scripts/", "tests/", "cmake/")
EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")
BRACES = re.compile(r"\{([A-Za-z0-9_.+-]+(?:,[A-Za-z0-9_.+-]+)+)\}")
LINE_SUFFIX = re.compile(r":\d+(?:-\d+)?$")
PATH_CHARACTERS = re.compile(r"^[A-Za-z0-9_./+-]+$")
PLACEHOLDER = re.compile(r"[<>{}*?\[\]$…=]|\.\.\.|(?:^|/)[A-Z][A-Z0-9_]*(?:/|$|\.)")
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|home|root)(?![\w-])[^\s`'\"()\[\]<>,;]*")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
HISTORY_EXEMPT = {"CHANGELOG.md"}


def default_pages(root):
    pages = [root / "README.md", root / "CHANGELOG.md"]
    pages += sorted((root / "docs").rglob("*.md"))
    pages += sorted((root / "bench").rglob("README.md"))
    pages += sorted(p for p in (root / "examples").rglob("README*") if p.is_file())
    return [p for p in pages if p.is_file()]


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


def code_paths(text):
    """(line number, path) of every repository path named in a code span of
    the prose of `text` (rule 2 of the header)."""
    for number, line in prose_lines(text):
        for m in CODE_SPAN.finditer(line):
            words = m.group(2).split()
            command = len(words) > 1
            for word in words:
                word = word.strip("'\"")
                for path in expand_braces(word):
                    if is_repository_path(path, command):
                        yield number, LINE_SUFFIX.sub("", path)


def expand_braces(word):
    """`a/{b,c}.h` as [`a/b.h`, `a/c.h`]; a word without such a list alone."""
    m = BRACES.search(word)
    if not m:
        return [word]
    return [w for part in m.group(1).split(",")
            for w in expand_braces(word[:m.start()] + part + word[m.end():])]


def is_repository_path(word, command):
    """Whether `word`, one word of a code span (of a command line when
    `command`), names a path that rule 2 of the header checks."""
    if command and not word.startswith(TOP_FOLDERS):
        return False
    if not command and not (word.startswith(TOP_FOLDERS) or ("/" in word and EXTENSION.search(word))):
        return False
    return not ("://" in word or SCHEME.match(word) or word.startswith(("/", "~", "build", "-"))
                or PLACEHOLDER.search(word) or not PATH_CHARACTERS.match(LINE_SUFFIX.sub("", word)))


def bases_of(root, page):
    return (root, page.parent, root / "include", root / "include" / "diloco")


def checked_paths(root, page, text):
    """(line number, path) of the paths of `text`'s code spans that claim a
    folder of the repository (rule 2 of the header), `page` being its page."""
    for number, path in code_paths(text):
        first = path.split("/", 1)[0]
        if path.startswith(TOP_FOLDERS) or any((base / first).is_dir() for base in bases_of(root, page)):
            yield number, path


def check(root, page):
    problems = []
    where = page.relative_to(root)
    text = page.read_text(encoding="utf-8")
    for number, target in targets(text):
        target = target.strip("<>")
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if path:
            if not destination.exists():
                problems.append(f"{where}:{number}: {target}: no such file or directory")
                continue
            if root not in destination.parents and destination != root:
                problems.append(f"{where}:{number}: {target}: outside the repository")
                continue
        if anchor and destination.suffix == ".md" and destination.is_file():
            if anchor not in anchors_of(destination):
                problems.append(f"{where}:{number}: {target}: no heading '#{anchor}' in "
                                f"{destination.relative_to(root)}")
    history_exempt = str(where) in HISTORY_EXEMPT
    for number, path in ([] if history_exempt else checked_paths(root, page, text)):
        if not any((base / path).exists() for base in bases_of(root, page)):
            problems.append(f"{where}:{number}: `{path}`: no such file or directory in the repository")
    for number, line in enumerate(text.splitlines(), 1):
        for m in MACHINE_PATH.finditer(line):
            problems.append(f"{where}:{number}: {m.group(0)}: a path of a particular "
                            "machine (/work, /home, /root); name the file in the repository instead")
        if not history_exempt:
            for m in ISSUE.finditer(line):
                problems.append(f"{where}:{number}: '{m.group(0)}': an issue number; the documentation "
                                "describes the product, its history goes to CHANGELOG.md")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPOSITORY,
                        help="the tree whose pages are checked (default: this repository)")
    parser.add_argument("pages", nargs="*", help="pages to check, relative to the root (default: all)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not root.is_dir():
        print(f"check_links: --root {args.root}: not a directory", file=sys.stderr)
        return 2
    pages = [root / a for a in args.pages] if args.pages else default_pages(root)
    missing = [p for p in pages if not p.is_file()]
    if missing:
        for p in missing:
            print(f"check_links: {p}: no such page", file=sys.stderr)
        return 2
    problems = []
    links = paths = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        links += sum(1 for _ in targets(text))
        paths += sum(1 for _ in checked_paths(root, page, text))
        problems += check(root, page)
    for p in problems:
        print(p)
    print(f"check_links: {len(pages)} pages, {links} links, {paths} code paths, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
