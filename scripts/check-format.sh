#!/usr/bin/env bash
# Fails when a C++ or CUDA source differs from what clang-format makes of it with the .clang-format
# at the top, and names each file and line. Pinned to clang-format 14 (Debian 12's package
# clang-format, which scripts/install-deps.sh installs for the test job): another major version
# formats some constructs differently, so its verdict would not be this tree's. All ~600 files
# take about 2 s, so it checks them all rather than the changed ones.
#   scripts/check-format.sh          check
#   scripts/check-format.sh --fix    rewrite the files in place
set -euo pipefail
cd "$(dirname "$0")/.."

tool=${CLANG_FORMAT:-clang-format}
version=$("$tool" --version 2> /dev/null || true)
if ! [[ $version =~ version\ 14\. ]]; then
  echo "check-format: needs clang-format 14 (Debian 12's clang-format package), found: ${version:-no $tool}" >&2
  exit 1
fi

files=()
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(git ls-files -z -- '*.cpp' '*.h' '*.cu' '*.cuh')
else
  while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(find . -path ./build\* -prune -o \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
fi

if [ "${1:-}" = --fix ]; then
  printf '%s\0' "${files[@]}" | xargs -0 "$tool" -i
  exit 0
fi
if ! printf '%s\0' "${files[@]}" | xargs -0 "$tool" --dry-run --Werror; then
  echo "check-format: the files above differ from clang-format's layout; scripts/check-format.sh --fix rewrites them" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says"
