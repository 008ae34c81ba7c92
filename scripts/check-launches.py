#!/usr/bin/env python3
"""One launch syntax: every kernel launch is KILN_LAUNCH(grid, block, shared_bytes, stream,
kernel)(args...), which nvcc expands to <<<...>>> and kiln's CUDA simulator (docs/simulator.md)
runs on the CPU. A `<<<` written anywhere else compiles under nvcc but not in the simulator, so the
kernel would silently drop out of CI. Only the macro's own header, sim/kernel_macros.h, may hold
`<<<` in code; comments are not checked. Usage: scripts/check-launches.py [root]; exit status 1
lists each file and line.
"""
import pathlib
import re
import sys

SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc"}
ALLOWED = {pathlib.PurePosixPath("sim/kernel_macros.h")}
SKIPPED_DIRS = {".git"}
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def code_lines(text):
    """The text with comments and string literals blanked, newlines kept so lines still count."""
    def blank(match):
        return re.sub(r"[^\n]", " ", match.group(0))
    return STRING.sub(blank, COMMENT.sub(blank, text)).splitlines()


def is_build_tree(path, root):
    """A CMake build folder (build/, build-asan/, ...) holds copies and generated files."""
    top = path.relative_to(root).parts[0]
    return (root / top / "CMakeCache.txt").exists()


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = 0
    files = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        relative = pathlib.PurePosixPath(path.relative_to(root).as_posix())
        if relative.parts[0] in SKIPPED_DIRS or is_build_tree(path, root) or relative in ALLOWED:
            continue
        files += 1
        for number, line in enumerate(code_lines(path.read_text(errors="replace")), 1):
            if "<<<" in line:
                print(f"{relative}:{number}: a <<<...>>> launch; write "
                      "KILN_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...) "
                      "(sim/kernel_macros.h)")
                problems += 1
    if problems:
        print(f"check-launches: {problems} launches outside KILN_LAUNCH")
        return 1
    print(f"check-launches: {files} files, every launch is KILN_LAUNCH")
    return 0


if __name__ == "__main__":
    sys.exit(main())
