#!/usr/bin/env python3
"""Checks that DILOCO_SEPARATE_COMPILATION keeps the compiled-once code out of
a user's object files: each USER (a translation unit that makes a learner and
a preset's syncer) must define no member of `detail::syncer_core` and no
fused codec pass, yet call both; SEPARATE (the file that includes
diloco/separate_compilation.hpp) must define what each USER calls.

    python3 tests/headers/check_separate_compilation.py SEPARATE.o USER.o...

Exit status 0 when it holds; otherwise each missing or misplaced symbol on
one line. Needs nm (binutils).
"""
import subprocess
import sys

COMPILED_ONCE = ("diloco::detail::syncer_core<", "diloco::detail::encode_fragment_delta(",
                 "diloco::detail::decode_accumulate(", "diloco::codec::encode_delta", "diloco::codec::decode_accumulate")


def symbols(path, which):
    """The demangled names nm lists for `path` (`which`: --defined-only or -u)."""
    out = subprocess.run(["nm", "-C", which, "--format=just-symbols", path], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return set(out.splitlines())


def compiled_once(names):
    return {n for n in names if any(n.startswith(p) or (" " + p) in n for p in COMPILED_ONCE)}


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    separate, users = argv[0], argv[1:]
    defined_there = symbols(separate, "--defined-only")
    problems, count = [], 0
    for user in users:
        called = compiled_once(symbols(user, "-u"))
        count += len(called)
        problems += [f"{user} defines {n}" for n in sorted(compiled_once(symbols(user, "--defined-only")))]
        if not any("syncer_core<" in n for n in called):
            problems.append(f"{user} calls no member of detail::syncer_core: the check has nothing to check")
        if not any("encode_fragment_delta" in n for n in called):
            problems.append(f"{user} calls no fused codec pass: the check has nothing to check")
        problems += [f"{separate} does not define {n}, which {user} calls" for n in sorted(called - defined_there)]
    for p in problems:
        print(p)
    print(f"check_separate_compilation: {len(users)} files, {count} compiled-once functions called, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
