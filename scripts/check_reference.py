#!/usr/bin/env python3
"""Checks the API reference pages against the headers.

A page lists the public members of a class (or the declarations of a
namespace) between two markers:

    <!-- reference: learner -->
    - `bool poll(time_point now)`: one line on what it does.
    ...
    <!-- end reference -->

The first code span of each list item is a declaration; the name it declares
is the identifier before its first parenthesis (a function, a constructor) or,
without one, the name it introduces (`using scalar_type = ...`, a data member
`std::uint32_t id = 1`). `<!-- reference: namespace presets -->` stands for
the declarations directly inside `namespace diloco::presets`.

The class (or namespace) is looked for in every header under
include/diloco/runtime/, whatever the file, so that moving code between
headers changes nothing here. This fails when a name on the page is not a
public member there (or no such class is found), and when a public member
(constructors included; destructors, copy and move operators and
static_asserts excepted) is missing from the page. The public members of a
public base class count as the class's own (its constructors do not).

    python3 scripts/check_reference.py [--list CLASS]

`--list CLASS` prints the public members the script finds, one per line.
Pages: docs/reference.md. Standard library only.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ROOT / "include" / "diloco" / "runtime"
PAGES = [ROOT / "docs" / "reference.md"]
SECTION = re.compile(r"<!-- reference: (namespace )?(\w+) -->\n(.*?)<!-- end reference -->", re.DOTALL)
ITEM = re.compile(r"^- `([^`]+)`", re.MULTILINE)
KEYWORDS = {"requires", "noexcept", "decltype", "sizeof", "alignas", "alignof", "static_assert", "explicit",
            "operator", "return", "if", "for", "while", "switch", "typename", "template"}
IDENT = re.compile(r"[A-Za-z_~][A-Za-z_0-9]*")
PUBLIC_BASE = re.compile(r"\bpublic\s+(?:\w+::)*(\w+)")


def strip_comments_and_strings(text):
    """The text with comments removed and string/char literals emptied."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, i, open_c, close_c):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"unbalanced {open_c}{close_c}")


def statements(body):
    """The declarations at the top level of a class or namespace body, each
    as (access, text without its body or initializer braces), where access is
    the access specifier in force ('' in a namespace)."""
    access, current, i, n = None, [], 0, len(body)
    while i < n:
        c = body[i]
        if c == "(":
            j = matching(body, i, "(", ")")
            current.append(body[i:j])
            i = j
        elif c == "{":
            j = matching(body, i, "{", "}")
            head = "".join(current).strip()
            k = j
            while k < n and body[k].isspace():
                k += 1
            if k < n and body[k] in ";,":  # a brace initializer: the statement goes on
                current.append("{}")
                i = j
            else:  # a function or class body ends the declaration
                if head:
                    yield access, head
                current, i = [], j
        elif c == ";":
            head = "".join(current).strip()
            if head:
                yield access, head
            current, i = [], i + 1
        elif c == ":" and re.fullmatch(r"\s*(public|private|protected)\s*", "".join(current)):
            access, current, i = "".join(current).strip(), [], i + 1
        else:
            current.append(c)
            i += 1


def strip_template_heads(decl):
    """`decl` without its leading `template <...>` heads and requires clause."""
    while True:
        m = re.match(r"template ?<", decl)
        if m:
            decl = decl[matching(decl, m.end() - 1, "<", ">"):].lstrip()
            continue
        m = re.match(r"requires ?\(", decl)
        if m:
            decl = decl[matching(decl, m.end() - 1, "(", ")"):].lstrip()
            continue
        return decl


def declared_name(decl):
    """The name a declaration introduces, or None for what the reference
    leaves out (static_assert, friend, destructors, operators)."""
    decl = strip_template_heads(re.sub(r"\s+", " ", decl).strip())
    if re.match(r"(static_assert|friend)\b", decl) or re.search(r"\boperator\b", decl):
        return None
    m = re.match(r"using (\w+) ?=", decl)
    if m:
        return m.group(1)
    m = re.match(r"(?:enum )?(?:class|struct|enum) (\w+)", decl)
    if m:
        return m.group(1)
    i, angles = 0, 0
    while i < len(decl):
        c = decl[i]
        if c == "<" and re.search(r"[\w:] ?$", decl[:i]):
            angles += 1
        elif c == ">" and angles and decl[i - 1] != "-":
            angles -= 1
        elif c == "(":
            before = IDENT.findall(decl[:i])
            name = before[-1] if before else None
            if angles or name in KEYWORDS or name is None:
                i = matching(decl, i, "(", ")")
                continue
            if name.startswith("~"):
                return None
            return name
        elif c in "={" and not angles:
            break
        i += 1
    head = re.split(r"[={]", decl[:i] if i < len(decl) else decl, maxsplit=1)[0]
    names = IDENT.findall(head)
    return names[-1] if names else None


def bodies(kind, name):
    """The bodies of every definition of class/struct `name` (kind 'class'),
    or of namespace diloco::`name` (kind 'namespace'), under HEADERS."""
    if kind == "namespace":
        pattern = re.compile(r"\bnamespace diloco::" + name + r"\s*\{")
    else:
        pattern = re.compile(r"\b(class|struct)\s+" + name + r"\b(\s*final)?(\s*:[^;{]*)?\s*\{")
    for path in sorted(HEADERS.rglob("*.hpp")):
        text = strip_comments_and_strings(path.read_text(encoding="utf-8"))
        for m in pattern.finditer(text):
            start = m.end() - 1
            end = matching(text, start, "{", "}")
            default = "public" if kind == "namespace" or (m.group(1) == "struct") else "private"
            bases = [] if kind == "namespace" else PUBLIC_BASE.findall(m.group(3) or "")
            yield path, default, text[start + 1:end - 1], bases


def public_members(kind, name):
    """{member name: declaration} of the public members, those of public
    base classes included (but their constructors), and the files."""
    members, files, bases = {}, [], []
    for path, default, body, public_bases in bodies(kind, name):
        files.append(path.relative_to(ROOT).as_posix())
        bases += public_bases
        for access, decl in statements(body):
            if (access or default) != "public":
                continue
            member = declared_name(decl)
            if member:
                members.setdefault(member, decl)
    for base in bases:
        inherited, base_files = public_members("class", base)
        files += base_files
        for member, decl in inherited.items():
            if member != base:
                members.setdefault(member, decl)
    return members, files


def main(argv):
    if argv[:1] == ["--list"] and len(argv) == 2:
        kind, name = ("namespace", argv[1].split(" ")[-1]) if " " in argv[1] else ("class", argv[1])
        members, files = public_members(kind, name)
        for member, decl in members.items():
            print(f"{member}\t{re.sub(r'[ ]+', ' ', decl.replace(chr(10), ' '))}")
        print(f"({len(members)} in {', '.join(files) or 'no file'})", file=sys.stderr)
        return 0
    problems, count = [], 0
    for page in PAGES:
        where = page.relative_to(ROOT)
        text = page.read_text(encoding="utf-8")
        if text.count("<!-- reference: ") != len(SECTION.findall(text)):
            problems.append(f"{where}: a '<!-- reference: NAME -->' marker without its '<!-- end reference -->'")
        for m in SECTION.finditer(text):
            kind, name = ("namespace" if m.group(1) else "class"), m.group(2)
            members, files = public_members(kind, name)
            if not files:
                problems.append(f"{where}: {kind} {name}: not found under {HEADERS.relative_to(ROOT)}/")
                continue
            shown = set()
            for item in ITEM.findall(m.group(3)):
                member = declared_name(item)
                count += 1
                if member is None:
                    problems.append(f"{where}: {name}: '{item}' declares no name")
                elif member not in members:
                    problems.append(f"{where}: {name}: '{member}' (from '{item}') is not a public member "
                                    f"in {', '.join(files)}")
                shown.add(member)
            for member in members:
                if member not in shown:
                    problems.append(f"{where}: {name}: the public member '{member}' is missing from the page "
                                    f"(declared as: {' '.join(members[member].split())})")
    for p in problems:
        print(p)
    print(f"check_reference: {count} members checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
