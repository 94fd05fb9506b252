#!/usr/bin/env python3
"""Tests scripts/check_links.py on small trees written to a temporary folder:
a page that names an issue, one with a path of a particular machine, one
with a code span naming a missing file and one with a broken link each make
it fail, naming the page and the line; a clean page, which names existing
files in every form the checker accepts and leaves alone what is not a
repository path, makes it pass. CTest: `docs_check_links_rules`, label docs.
Standard library only.

    python3 scripts/test_check_links.py
"""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CHECKER = Path(__file__).resolve().parent / "check_links.py"

CLEAN = """\
# A clean page

The learner is in `include/diloco/runtime/learner.hpp`, also known as
`diloco/runtime/learner.hpp` or `runtime/learner.hpp`; its tests are under
`tests/runtime/` and the two headers `include/diloco/metrics/{trace,events}.hpp`
sit side by side ([the other page](other.md#second-heading), [here](#a-clean-page)).
Run `python3 scripts/tool.py --out /tmp/run build/x/y.json` after
`cmake --build build`; the binary is `build/tools/diloco_syncer`, one file
per `<dir>/*.hpp`, keys in `DIR/checkpoint-<n>.bin`, a ratio `M/2`, the
expression `a.size()/2`, `https://example.org/a/b.html`, `tcp://HOST:5555`,
lines 1-2 of `docs/sibling.md:1-2` and
`../scripts/tool.py` from here; a recipe writes `keys/syncer.pub`. An issue of the previous run is not an issue
number; `/tmp/diloco/run.json` is where a recipe writes.

```sh
python3 scripts/tool.py build/missing/in/a/fence.txt
```
"""

OTHER = """\
# Other

## Second heading
"""


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def tree(root):
    """The files every case's pages may name."""
    write(root, {
        "include/diloco/runtime/learner.hpp": "",
        "include/diloco/metrics/trace.hpp": "",
        "include/diloco/metrics/events.hpp": "",
        "tests/runtime/learner.cpp": "",
        "scripts/tool.py": "",
        "docs/other.md": OTHER,
        "docs/sibling.md": "# Sibling\n",
    })


def check(root, *pages):
    run = subprocess.run([sys.executable, str(CHECKER), "--root", str(root), *pages],
                         capture_output=True, text=True, timeout=60)
    return run.returncode, run.stdout + run.stderr


class rules(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory(prefix="check_links_")
        self.root = Path(self.folder.name)
        tree(self.root)

    def tearDown(self):
        self.folder.cleanup()

    def assert_fails(self, page, text, line, words):
        write(self.root, {page: text})
        status, output = check(self.root, page)
        self.assertEqual(status, 1, output)
        self.assertIn(f"{page}:{line}:", output)
        for word in words:
            self.assertIn(word, output)
        self.assertIn("1 problems", output)

    def test_clean_page_passes(self):
        write(self.root, {"docs/clean.md": CLEAN})
        status, output = check(self.root, "docs/clean.md")
        self.assertEqual(status, 0, output)
        # learner.hpp three ways, tests/runtime/, trace.hpp, events.hpp,
        # scripts/tool.py, docs/sibling.md, ../scripts/tool.py; two links.
        self.assertIn("1 pages, 2 links, 9 code paths, 0 problems", output)

    def test_issue_number_fails(self):
        self.assert_fails("README.md", "# Title\n\nThe retry rule\ncame with issue 8.\n", 4, ["issue 8"])
        self.assert_fails("docs/hash.md", "# Title\n\nSee Issue #12.\n", 3, ["Issue #12"])

    def test_history_is_allowed_in_the_changelog(self):
        write(self.root, {"CHANGELOG.md": "# Changes\n\n- The retry rule (issue 8).\n"
                                          "- `docs/concepts.md` is gone.\n"})
        status, output = check(self.root, "CHANGELOG.md")
        self.assertEqual(status, 0, output)

    def test_machine_path_fails(self):
        self.assert_fails("bench/wan/README.md", "# WAN\n\nThe kernel (/work/shared/MACHINE.md) has no netem.\n",
                          3, ["/work/shared/MACHINE.md"])
        self.assert_fails("docs/fence.md", "# Fence\n\n```sh\ncd /home/someone/diloco\n```\n",
                          4, ["/home/someone/diloco"])
        self.assert_fails("CHANGELOG.md", "# Changes\n\n- Built in /root/diloco.\n", 3, ["/root/diloco"])

    def test_missing_code_path_fails(self):
        self.assert_fails("docs/missing.md", "# Missing\n\nThe syncer is in `include/diloco/runtime/syncer.hpp`.\n",
                          3, ["include/diloco/runtime/syncer.hpp"])
        self.assert_fails("docs/command.md", "# Command\n\nRun `python3 scripts/gone.py --all`.\n",
                          3, ["scripts/gone.py"])
        self.assert_fails("docs/brace.md", "# Brace\n\nBoth of `diloco/metrics/{trace,counters}.hpp`.\n",
                          3, ["diloco/metrics/counters.hpp"])
        self.assert_fails("docs/short.md", "# Short\n\nThe format is in `runtime/learner_state.hpp`.\n",
                          3, ["runtime/learner_state.hpp"])

    def test_broken_link_fails(self):
        self.assert_fails("docs/link.md", "# Link\n\nSee [other](other.md#no-such-heading).\n", 3, ["no-such-heading"])

    def test_every_page_is_checked_by_default(self):
        write(self.root, {"README.md": "# Title\n\nFine.\n",
                          "docs/clean.md": CLEAN,
                          "bench/wan/README.md": "# WAN\n\nSee issue 3.\n",
                          "examples/00_x/README.md": "# X\n\nIn `examples/00_x/main.cpp`.\n"})
        status, output = check(self.root)
        self.assertEqual(status, 1, output)
        self.assertIn("bench/wan/README.md:3:", output)
        self.assertIn("examples/00_x/README.md:3:", output)
        self.assertIn("2 problems", output)

    def test_bad_root_is_refused(self):
        status, output = check(self.root / "no-such-folder")
        self.assertEqual(status, 2)
        self.assertIn("not a directory", output)


if __name__ == "__main__":
    unittest.main()
