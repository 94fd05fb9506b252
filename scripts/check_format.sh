#!/usr/bin/env bash
# Every C++ and CUDA source of the repository is formatted as .clang-format
# says (clang-format 14, Debian: clang-format-14). Prints the files that are
# not, with the lines clang-format would change, and exits 1; `--fix`
# reformats them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$format" >/dev/null; then
  echo "check_format: $format not found (Debian: apt-get install clang-format-14, or set CLANG_FORMAT)" >&2
  exit 2
fi
mapfile -d '' files < <(find include tests tools examples bench docs/samples \
  \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
if [[ ${1:-} == --fix ]]; then
  "$format" -i "${files[@]}"
  exit 0
fi
if ! "$format" --dry-run -Werror "${files[@]}"; then
  echo "check_format: the files above are not formatted; run bash scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
