#!/usr/bin/env python3
"""floors.py fails where it must: on a tree whose header includes a folder
above its own, beside it, or a header longer than the limit; and passes on
the same tree without them."""
import pathlib
import subprocess
import sys
import tempfile

FLOORS = pathlib.Path(__file__).with_name("floors.py")
PAGE = """# Architecture

| Floor | Folder | What it holds | Depends on |
|---|---|---|---|
| 0 | `include/diloco/*.hpp` | ground | - |
| 1 | `include/diloco/low/` | low | 0 |
| 1 | `include/diloco/beside/` | beside | 0 |
| 2 | `include/diloco/high/` | high | 0-1 |
"""


def run(root, *extra):
    done = subprocess.run([sys.executable, str(FLOORS), "--root", str(root), *extra], capture_output=True, text=True)
    return done.returncode, done.stdout


def tree(root, low_includes):
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "architecture.md").write_text(PAGE)
    inc = root / "include" / "diloco"
    for folder in ("low", "beside", "high"):
        (inc / folder).mkdir(parents=True)
    (inc / "ground.hpp").write_text("#pragma once\n")
    (inc / "beside" / "b.hpp").write_text('#pragma once\n#include "diloco/ground.hpp"\n')
    (inc / "high" / "h.hpp").write_text('#pragma once\n#include "diloco/low/l.hpp"\n#include "diloco/beside/b.hpp"\n')
    (inc / "low" / "l.hpp").write_text("#pragma once\n" + "".join(f'#include "diloco/{i}"\n' for i in low_includes))


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        clean = pathlib.Path(d) / "clean"
        tree(clean, ["ground.hpp", "low/l2.hpp"])
        (clean / "include/diloco/low/l2.hpp").write_text("#pragma once\n")
        code, out = run(clean)
        if code != 0:
            failures.append(f"a clean tree was refused:\n{out}")
        code, out = run(clean, "--max-lines", "2")
        if code != 1 or "include/diloco/high/h.hpp: 3 lines" not in out:
            failures.append(f"a header over --max-lines passed:\n{out}")
        for name, bad in (("up", "high/h.hpp"), ("beside", "beside/b.hpp"), ("missing", "low/none.hpp")):
            root = pathlib.Path(d) / name
            tree(root, ["ground.hpp", bad])
            code, out = run(root)
            if code != 1 or "include/diloco/low/l.hpp:3" not in out:
                failures.append(f"an include of {bad} from floor 1 passed:\n{out}")
    for f in failures:
        print("FAIL:", f)
    print("test_floors:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
