#!/usr/bin/env python3
"""Checks that the per-instruction-set kernel files of libkiln.a define nothing outside their own
namespace (kiln::cpu::avx2, kiln::cpu::avx512, ...).

Those files are compiled with -mavx2 or -mavx512f. An inline function or template they
instantiate outside that namespace (a std::vector method, std::min at -O1, an Eigen kernel) is a
weak symbol that other files define too, compiled for plain x86-64; the linker keeps one copy for
every caller, and if it keeps the AVX-512 one, a machine without AVX-512 dies of an illegal
instruction in code that was meant to be portable. So each such file may only define symbols
whose names carry its namespace, or the tables that name it (direct_conv_tiles_avx512, ...).

    scripts/check-isa-symbols.py build/libkiln.a
"""
import re
import subprocess
import sys

VARIANT = re.compile(r"_(avx2|avx512|avx512_bf16)\.cpp\.o$")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check-isa-symbols.py LIBKILN.a")
    nm = subprocess.run(["nm", "-A", "-C", "--defined-only", "--extern-only", sys.argv[1]],
                        capture_output=True, text=True, check=True)
    members, bad = set(), []
    for line in nm.stdout.splitlines():
        # "lib.a:member.o:0000 T name"
        location, _, rest = line.partition(" ")
        member = location.split(":")[1] if location.count(":") >= 2 else ""
        found = VARIANT.search(member)
        if not found:
            continue
        isa = found.group(1)
        members.add(member)
        name = rest.split(" ", 1)[1] if " " in rest else rest
        # AddressSanitizer's one-byte ODR indicators (__odr_asan.<mangled name>) are not code.
        if name.startswith("__odr_asan"):
            continue
        if f"kiln::cpu::{isa}::" in name or name.endswith(f"_{isa}"):
            continue
        bad.append(f"{member}: {name}")
    if not members:
        sys.exit(f"check-isa-symbols: no *_avx2/_avx512 object in {sys.argv[1]}")
    if bad:
        print("check-isa-symbols: these instruction-set files define symbols outside their "
              "namespace, which the linker may hand to portable code:")
        print("\n".join("  " + b for b in bad))
        sys.exit(1)
    print(f"check-isa-symbols: {len(members)} files, every symbol in its own namespace")


if __name__ == "__main__":
    main()
