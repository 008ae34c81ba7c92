#!/usr/bin/env python3
"""Writes each ```cpp block of the user guide to its own source file, so the tests can compile and
run every example the guide shows (tests/guide/CMakeLists.txt calls this at configure time).

Usage: scripts/extract-guide-snippets.py GUIDE OUTDIR

Block N (counting from 1, in order) goes to OUTDIR/guide_snippet_NN.cpp. A file is rewritten only
when its content changes, so that editing one block rebuilds one program; guide_snippet_*.cpp
files beyond the guide's count are deleted. Prints the path of every snippet, one per line.
Fails (exit 1) on a block that is not a whole program: it must include <kiln/kiln.h> and define
`int main(`. Other blocks (sh, cmake, text) are left alone.
"""
import pathlib
import re
import sys

# A fence opens with three or more backticks or tildes, indented by at most three spaces (as
# CommonMark), followed by the block's language; it closes with a run of the same character at
# least as long, and nothing else on the line.
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
SNIPPET_NAME = re.compile(r"^guide_snippet_\d+\.cpp$")
KILN_INCLUDE = "#include <kiln/kiln.h>"


class GuideError(Exception):
    pass


def cpp_blocks(guide, text):
    """[(line number of the opening fence, block text)] for every ```cpp block of `text`."""
    blocks = []
    fence = None  # (fence characters, language, opening line number, lines) while inside a block
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is None:
            opening = FENCE.match(line)
            if opening:
                fence = (opening.group(1), opening.group(2).lower(), number, [])
            continue
        marker, language, start, lines = fence
        closing = FENCE.match(line)
        if (closing and not closing.group(2) and closing.group(1)[0] == marker[0]
                and len(closing.group(1)) >= len(marker)):
            if language == "cpp":
                blocks.append((start, "\n".join(lines) + "\n"))
            fence = None
        else:
            lines.append(line)
    if fence is not None:
        raise GuideError(f"{guide}:{fence[2]}: the ```{fence[1]} block opened here is never closed")
    return blocks


def check_program(guide, index, start, code):
    where = f"{guide}:{start}: C++ block {index}"
    if KILN_INCLUDE not in (line.strip() for line in code.splitlines()):
        raise GuideError(f"{where} lacks `{KILN_INCLUDE}`: every C++ block of the guide is a whole "
                         "program that the tests compile and run")
    if "int main(" not in code:
        raise GuideError(f"{where} lacks `int main(`: every C++ block of the guide is a whole "
                         "program that the tests compile and run (show a fragment as ```text)")


def write_if_changed(path, content):
    if path.exists() and path.read_text() == content:
        return
    path.write_text(content)


def main():
    if len(sys.argv) != 3:
        print("usage: extract-guide-snippets.py GUIDE OUTDIR", file=sys.stderr)
        return 1
    guide, outdir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    try:
        text = guide.read_text()
    except OSError as error:
        print(f"extract-guide-snippets: cannot read {guide}: {error.strerror}", file=sys.stderr)
        return 1
    try:
        blocks = cpp_blocks(guide, text)
        for index, (start, code) in enumerate(blocks, start=1):
            check_program(guide, index, start, code)
    except GuideError as error:
        print(f"extract-guide-snippets: {error}", file=sys.stderr)
        return 1

    outdir.mkdir(parents=True, exist_ok=True)
    wanted = []
    for index, (start, code) in enumerate(blocks, start=1):
        path = outdir / f"guide_snippet_{index:02d}.cpp"
        # The header names the block, not its line, so that editing the prose above a block
        # leaves its file, and its object file, untouched.
        header = (f"// C++ block {index} of {guide.name} (scripts/extract-guide-snippets.py): edit "
                  "the guide, not this file.\n")
        write_if_changed(path, header + code)
        wanted.append(path)
    for stale in sorted(outdir.iterdir()):
        if SNIPPET_NAME.match(stale.name) and stale not in wanted:
            stale.unlink()
    for path in wanted:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
