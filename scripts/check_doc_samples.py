#!/usr/bin/env python3
"""Checks that the code the documentation shows is the code CTest builds.

A Markdown page includes a source file verbatim between two markers:

    <!-- sample: docs/samples/NAME.cpp -->
    ```cpp
    ...the file, byte for byte...
    ```
    <!-- end sample -->

(the path is relative to the repository root). This fails, showing a diff,
when a page's copy differs from the file, when a marker is unterminated or
names a missing file, and when a file of docs/samples/ is shown on no page.
`--fix` rewrites the pages' copies from the files instead. Pages:
README.md and every docs/**/*.md (docs/concepts/ has one page per concept).
Standard library only.

    python3 scripts/check_doc_samples.py [--fix]
"""
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- sample: (\S+) -->\n(.*?)<!-- end sample -->", re.DOTALL)
LANGUAGES = {".cpp": "cpp", ".hpp": "cpp", ".py": "python", ".sh": "sh", ".txt": "cmake"}


def fenced(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    return f"```{LANGUAGES.get(Path(path).suffix, '')}\n{text}```\n"


def main(argv):
    fix = "--fix" in argv
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    problems, shown = [], set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(ROOT)
        if text.count("<!-- sample: ") != len(BLOCK.findall(text)):
            problems.append(f"{where}: a '<!-- sample: PATH -->' marker without its '<!-- end sample -->'")
            continue

        def replace(m):
            path = m.group(1)
            if not (ROOT / path).is_file():
                problems.append(f"{where}: sample {path}: no such file")
                return m.group(0)
            shown.add(Path(path).as_posix())
            want = fenced(path)
            if m.group(2) != want and not fix:
                diff = difflib.unified_diff(m.group(2).splitlines(), want.splitlines(), f"{where} (copy)", path,
                                            lineterm="", n=1)
                problems.append(f"{where}: the copy of {path} differs from the file "
                                f"(python3 scripts/check_doc_samples.py --fix):\n" + "\n".join(diff))
            return f"<!-- sample: {path} -->\n{want}<!-- end sample -->"

        fixed = BLOCK.sub(replace, text)
        if fix and fixed != text:
            page.write_text(fixed, encoding="utf-8")
            print(f"check_doc_samples: rewrote the samples of {where}")
    for sample in sorted((ROOT / "docs" / "samples").glob("*.cpp")):
        if sample.relative_to(ROOT).as_posix() not in shown:
            problems.append(f"{sample.relative_to(ROOT)} is shown on no page")
    for p in problems:
        print(p)
    print(f"check_doc_samples: {len(shown)} samples shown, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
