#!/usr/bin/env python3
"""Include what you use, for the standard library: every kiln file that names a standard symbol
includes the header that declares it, instead of relying on another header to pull it in.

The GPU machine's g++ 13 failed on `uint8_t` in core/device.h, which g++ 12's <string> had been
including behind the file's back; compiling on one library version cannot catch that, this check
does. Usage: scripts/check-includes.py [--fix] [root]; exit status 1 lists each file and what it
lacks. --fix adds the missing headers to each file's block of standard includes instead.
"""
import pathlib
import re
import sys

# A symbol -> the headers any of which declares it (the standard's own, not a transitive one).
HEADERS = {
    "<algorithm>": "all_of any_of clamp copy copy_n count count_if equal fill fill_n find find_if "
                   "lower_bound max max_element min min_element minmax none_of remove_if "
                   "reverse reverse_copy sort stable_sort transform unique upper_bound",
    "<array>": "array",
    "<atomic>": "atomic memory_order_relaxed memory_order_acquire memory_order_release "
                "memory_order_seq_cst memory_order_acq_rel",
    "<bit>": "bit_cast endian",
    "<charconv>": "from_chars to_chars",
    "<chrono>": "chrono",
    "<condition_variable>": "condition_variable",
    "<deque>": "deque",
    "<exception>": "current_exception exception exception_ptr rethrow_exception terminate",
    "<filesystem>": "filesystem",
    "<fstream>": "ifstream ofstream fstream",
    "<functional>": "function greater less hash plus multiplies reference_wrapper",
    "<initializer_list>": "initializer_list",
    "<ios>": "ios streamsize",
    "<iostream>": "cout cerr cin clog",
    "<iterator>": "input_iterator_tag istreambuf_iterator back_inserter",
    "<limits>": "numeric_limits",
    "<map>": "map multimap",
    "<memory>": "make_shared make_unique make_unique_for_overwrite shared_ptr unique_ptr "
                "weak_ptr dynamic_pointer_cast static_pointer_cast enable_shared_from_this "
                "bad_weak_ptr",
    "<mutex>": "mutex lock_guard unique_lock scoped_lock once_flag call_once recursive_mutex",
    "<numeric>": "accumulate iota",
    "<optional>": "optional nullopt",
    "<ratio>": "milli micro nano",
    "<set>": "set multiset",
    "<sstream>": "ostringstream istringstream stringstream",
    "<stdexcept>": "runtime_error logic_error invalid_argument out_of_range length_error",
    "<string>": "string to_string stoi stol stoll stod",
    "<string_view>": "string_view",
    "<system_error>": "error_code errc generic_category system_category system_error",
    "<thread>": "thread this_thread",
    "<tuple>": "tuple make_tuple tie get_if",
    "<type_traits>": "is_same_v is_floating_point_v is_integral_v is_signed_v is_unsigned_v "
                     "conditional_t remove_pointer_t remove_cv_t decay_t enable_if_t "
                     "is_same is_floating_point is_integral",
    "<unordered_map>": "unordered_map",
    "<unordered_set>": "unordered_set",
    "<utility>": "move forward swap pair make_pair exchange index_sequence "
                 "index_sequence_for integer_sequence",
    "<variant>": "variant visit",
    "<vector>": "vector",
    "<cmath>": "abs sqrt pow exp log log1p expm1 sin cos tanh erf floor ceil round nearbyint "
               "ldexp isnan isinf isfinite signbit nan fabs fmod copysign",
    "<csignal>": "signal raise sig_atomic_t",
    "<cstdio>": "printf fprintf snprintf fopen fclose fread fwrite fflush ferror FILE puts",
    "<cstdlib>": "getenv free malloc atoi atoll strtol strtod aligned_alloc abort exit system",
    "<cstring>": "memcpy memset memmove memcmp strcmp strlen strerror",
    "<cctype>": "toupper tolower isdigit isspace isalpha",
    "<cstdint>": "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t uintptr_t "
                 "intptr_t",
    "<cstddef>": "size_t ptrdiff_t byte nullptr_t max_align_t",
}

# Other headers that the standard also makes declare a symbol (std::abs of an int: <cstdlib>).
ALSO = {
    "abs": {"<cstdlib>"},
    "size_t": {"<cstring>", "<cstdio>", "<cstdlib>", "<ctime>", "<cwchar>"},
    "swap": {"<algorithm>", "<string>", "<vector>", "<array>", "<map>", "<memory>"},
    "move": {"<algorithm>"},  # the range form
    "get_if": {"<variant>"},
    "visit": {"<variant>"},
    "streamsize": {"<iostream>", "<fstream>", "<sstream>"},
    "ios": {"<iostream>", "<fstream>", "<sstream>"},
}

# The header --fix adds for a symbol that several headers declare.
PRIMARY = {"size_t": "<cstddef>", "abs": "<cmath>", "swap": "<utility>", "move": "<utility>",
           "streamsize": "<ios>", "ios": "<ios>", "get_if": "<variant>", "visit": "<variant>"}

# Names that are written without std:: (the C types every file uses).
BARE = {"int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
        "uintptr_t", "intptr_t", "size_t", "ptrdiff_t"}

SYMBOL_HEADERS = {}
for header, names in HEADERS.items():
    for name in names.split():
        SYMBOL_HEADERS.setdefault(name, set()).add(header)
for name, extra in ALSO.items():
    SYMBOL_HEADERS.setdefault(name, set()).update(extra)

SOURCE_DIRS = ["sim", "core", "kernels", "ops", "nn", "optim", "data", "train", "dist", "apps",
               "benchmarks", "tests"]
SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}

CODE_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"][^>"]+[>"])', re.M)
STD_NAME = re.compile(r"\bstd::(?:chrono::|filesystem::)?([A-Za-z_][A-Za-z_0-9]*)")
BARE_NAME = re.compile(r"(?<![:\w])(" + "|".join(sorted(BARE)) + r")\b")


def missing_headers(text):
    included = {m.group(1) for m in INCLUDE.finditer(text)}
    included |= {h.replace('"', "<", 1)[:-1] + ">" for h in included if h.startswith('"')}
    code = CODE_NOISE.sub(" ", text)
    code = re.sub(r"^\s*#\s*include[^\n]*", " ", code, flags=re.M)
    used = {m.group(1) for m in STD_NAME.finditer(code)} | set(BARE_NAME.findall(code))
    lacking = {}
    for name in sorted(used):
        headers = SYMBOL_HEADERS.get(name)
        if headers and not headers & included:
            lacking.setdefault(" or ".join(sorted(headers)), []).append(name)
    return lacking


def primary_header(name):
    if name in PRIMARY:
        return PRIMARY[name]
    (header,) = SYMBOL_HEADERS[name]
    return header


ANGLE_INCLUDE = re.compile(r"\s*#\s*include\s*<")
STD_INCLUDE = re.compile(r"\s*#\s*include\s*<[a-z_]+>")
QUOTED_INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')


def add_includes(path, text, headers):
    """The text with `headers` added where clang-format (Google style) would keep them: in the
    block of angle-bracket includes holding the most standard headers, sorted; else in a new block
    after the file's own header (first in a .cpp), before the other kiln includes, or at the top."""
    lines = text.split("\n")
    added = [f"#include {h}" for h in headers]
    angle = [i for i, line in enumerate(lines) if ANGLE_INCLUDE.match(line)]
    if angle:
        blocks = []
        for i in angle:
            if blocks and blocks[-1][1] == i - 1:
                blocks[-1][1] = i
            else:
                blocks.append([i, i])
        start, end = max(blocks, key=lambda b: sum(1 for line in lines[b[0]:b[1] + 1]
                                                   if STD_INCLUDE.match(line)))
        block = sorted(set(lines[start:end + 1] + added),
                       key=lambda line: line.split("include", 1)[1].strip())
        lines[start:end + 1] = block
        return "\n".join(lines)
    quoted = [i for i, line in enumerate(lines) if QUOTED_INCLUDE.match(line)]
    if quoted:
        first = quoted[0]
        own = pathlib.Path(QUOTED_INCLUDE.match(lines[first]).group(1)).stem == path.stem
        if own and path.suffix in (".cpp", ".cu"):
            lines[first + 1:first + 1] = [""] + added
        else:
            lines[first:first] = added + [""]
        return "\n".join(lines)
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("#pragma once")), 0)
    lines[at:at] = [""] + added
    return "\n".join(lines)


def main():
    args = sys.argv[1:]
    fix = "--fix" in args
    args = [a for a in args if a != "--fix"]
    root = pathlib.Path(args[0] if args else ".")
    problems = 0
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            text = path.read_text()
            lacking = missing_headers(text)
            for header, names in lacking.items():
                print(f"{path.relative_to(root)}: uses {', '.join(names)} without #include {header}")
                problems += 1
            if fix and lacking:
                headers = sorted({primary_header(n) for names in lacking.values() for n in names})
                path.write_text(add_includes(path, text, headers))
    if problems and not fix:
        print(f"check-includes: {problems} missing standard includes (--fix adds them)")
        return 1
    if problems:
        print(f"check-includes: added {problems} missing standard includes")
        return 0
    print("check-includes: every file includes the standard headers it uses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
