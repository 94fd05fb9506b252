#!/usr/bin/env python3
"""Checks that include/diloco is stacked in the floors docs/architecture.md
documents: every `#include "diloco/..."` of a header names a header of its own
folder or of a lower floor, never a folder beside it or above it; and that no
header is longer than --max-lines.

The floors are read from the table of docs/architecture.md (its rows
`| N | \`include/diloco/FOLDER/\` | ...` and `| N | \`include/diloco/*.hpp\` |`,
`| N | \`include/diloco/FILE.hpp\` |`), so the page and the check cannot
disagree. A header in a sub-folder (transport/zeromq/detail/) belongs to its
top folder (transport/).

  python3 tests/headers/floors.py [--root DIR] [--max-lines N]

Exit status 0 when every include goes down, 1 otherwise (each offence on
one line: the file, its line, the include and both floors).
"""
import argparse
import pathlib
import re
import sys

ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`include/diloco/([^`]*)`\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](diloco/[^">]+)[">]')


def read_floors(page):
    folders, files, loose = {}, {}, None
    for line in page.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if not m:
            continue
        floor, where = int(m.group(1)), m.group(2)
        if where == "*.hpp":
            loose = floor
        elif where.endswith("/"):
            folders[where.rstrip("/")] = floor
        else:
            files[where] = floor
    return folders, files, loose


def unit_of(relative):
    """The folder (or, for a header directly in include/diloco, the file) a
    header belongs to, relative to include/diloco."""
    parts = relative.split("/")
    return parts[0] if len(parts) > 1 else relative


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = pathlib.Path(__file__).resolve().parents[2]
    parser.add_argument("--root", type=pathlib.Path, default=here, help="the repository (default: this one)")
    parser.add_argument("--max-lines", type=int, default=0, help="the longest a header may be (0: no limit)")
    args = parser.parse_args()

    folders, files, loose = read_floors(args.root / "docs" / "architecture.md")
    if not folders or loose is None:
        print("floors: docs/architecture.md has no floor table", file=sys.stderr)
        return 1
    include = args.root / "include" / "diloco"

    def floor_of(relative):
        unit = unit_of(relative)
        if unit in files:
            return files[unit]
        if "/" not in relative:
            return loose
        return folders.get(unit)

    problems = []
    headers = sorted(p for p in include.rglob("*") if p.suffix in (".hpp", ".cuh"))
    for header in headers:
        relative = header.relative_to(include).as_posix()
        own = floor_of(relative)
        if own is None:
            problems.append(f"include/diloco/{relative}: its folder has no floor in docs/architecture.md")
            continue
        lines = header.read_text(encoding="utf-8").splitlines()
        if args.max_lines and len(lines) > args.max_lines:
            problems.append(f"include/diloco/{relative}: {len(lines)} lines, more than {args.max_lines}")
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)[len("diloco/"):]
            if not (include / target).exists():
                problems.append(f"include/diloco/{relative}:{number}: includes {m.group(1)}, which does not exist")
                continue
            if unit_of(target) == unit_of(relative):
                continue
            theirs = floor_of(target)
            if theirs is None or theirs >= own:
                problems.append(f"include/diloco/{relative}:{number}: includes {m.group(1)} "
                                f"(floor {theirs}) from floor {own}: includes must go down")
    for p in problems:
        print(p)
    print(f"floors: {len(headers)} headers, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
