#!/usr/bin/env python3
"""Each CUDA kernel's registers and static shared memory against what one block may use, read from
the cubins nvcc embedded in the build's objects (no cuobjdump needed: it is not installed here).

A kernel whose registers times its block's threads pass the multiprocessor's register file does
not launch at all (cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
and nothing but a GPU shows it: the simulator does not allocate registers. The same for static
shared memory past the 48 KiB a block gets without opting in.

Usage: scripts/check-kernel-resources.py [--max-block N] OBJECT... (CMake's ctest passes
$<TARGET_OBJECTS:kiln>, a ;-separated list in one argument, which is split; objects without
device code are skipped). Exit status 1 lists each kernel
past a limit; 2, an object it cannot read.

Per kernel, for each cubin (one per architecture in CMAKE_CUDA_ARCHITECTURES):
- registers: the EIATTR_REGCOUNT record of the cubin's `.nv.info` (what ptxas -v prints as
  "Used N registers"), or where there is none the `.text.<kernel>` section header's sh_info, high
  byte, where older toolkits put it (CUDA 13's leaves that byte 0; where both are set they must
  agree);
- static shared memory: the size of `.nv.shared.<kernel>`, less the 1 KiB the system reserves
  at its start from compute capability 8.0 on (what ptxas -v prints as "bytes smem");
- the largest block: __launch_bounds__'s maximum (EIATTR_MAX_THREADS in `.nv.info.<kernel>`)
  where the kernel declares one, otherwise --max-block (default 1024, the most CUDA allows): the
  launch sites are not read, so a kernel without __launch_bounds__ is held to a block of 1024
  threads even if it is only ever launched with 256.

Limits (compute capability 7.5 to 9.0 alike): at most 255 registers a thread; registers are
allocated per warp in units of 256 (a warp of 65 registers a thread takes 2304), and a block's
warps must fit the 65536 registers of a multiprocessor; 48 KiB of static shared memory a block.
A block with dynamic shared memory may opt in to more (227 KiB on sm_90) with
cudaFuncSetAttribute; dynamic sizes are chosen at launch and are not in the cubin, so not checked.
"""
import argparse
import struct
import sys

REGISTERS_PER_SM = 65536
REGISTERS_PER_THREAD = 255
REGISTER_ALLOCATION_UNIT = 256  # registers, per warp
WARP = 32
STATIC_SHARED_BYTES = 48 * 1024
# Compute capability 8.0 and newer reserve 1 KiB of shared memory a block for the system
# (cudaDevAttrReservedSharedMemoryPerBlock), and such a cubin has a `.nv.shared.reserved.0`
# section: each kernel's `.nv.shared.<kernel>` then counts it before the kernel's own (ptxas -v's
# "4000 bytes smem" is a section of 5024 bytes on sm_90, and of 4000 on sm_75).
RESERVED_SHARED_BYTES = 1024
MAX_BLOCK = 1024

FATBIN_MAGIC = 0xBA55ED50
FATBIN_ELF = 2
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ELF_MAGIC = b"\x7fELF"

# .nv.info records: a format byte, an attribute byte, then a 16-bit value or, for EIFMT_SVAL, the
# byte count of the data that follows.
EIFMT_SVAL = 0x04
EIATTR_MAX_THREADS = 0x05  # __launch_bounds__'s first argument, as x, y, z
EIATTR_REQNTID = 0x10  # a required block shape (__cluster_dims__ / reqntid), as x, y, z
EIATTR_REGCOUNT = 0x2F  # (symbol index, registers), in the cubin's .nv.info


class ObjectError(Exception):
    pass


def elf_sections(data, what):
    """[(name, type, offset, size, info)] of a little-endian ELF64 file's sections, and the names
    of its symbols by index."""
    if data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
        raise ObjectError(f"{what}: expected a little-endian ELF64 file, got bytes {data[:6]!r}")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]

    def name_at(table_offset, offset):
        end = data.index(b"\0", table_offset + offset)
        return data[table_offset + offset:end].decode("utf-8", "replace")

    sections = [(name_at(names_offset, h[0]), h[1], h[4], h[5], h[7]) for h in headers]
    symbols = []
    for header in headers:
        if header[1] == 2:  # SHT_SYMTAB
            strings = headers[header[6]][4]
            for offset in range(header[4], header[4] + header[5], 24):
                st_name = struct.unpack_from("<I", data, offset)[0]
                symbols.append(name_at(strings, st_name))
    return sections, symbols


def fatbin_cubins(data, what):
    """The ELF (cubin) entries of every fatbinary in `data` (an .nv_fatbin section)."""
    cubins = []
    offset = 0
    while offset + 16 <= len(data):
        magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != FATBIN_MAGIC:
            break
        entry = offset + header_size
        end = entry + fat_size
        while entry < end:
            kind, _, entry_header, payload_size = struct.unpack_from("<HHIQ", data, entry)
            payload = data[entry + entry_header:entry + entry_header + payload_size]
            if kind == FATBIN_ELF:
                if payload.startswith(ZSTD_MAGIC):
                    raise ObjectError(
                        f"{what}: a compressed cubin in the fatbinary (zstd); expected nvcc's "
                        "uncompressed sm_XX code: build with CMAKE_CUDA_FLAGS=--no-compress")
                if not payload.startswith(ELF_MAGIC):
                    raise ObjectError(f"{what}: a fatbinary ELF entry that is not ELF nor zstd "
                                      f"(first bytes {payload[:4]!r}); compressed another way?")
                cubins.append(payload)
            entry += entry_header + payload_size
        offset = (end + 7) // 8 * 8
    return cubins


def nv_info_records(data, offset, size):
    """(attribute, bytes) of each record of a .nv.info section."""
    records = []
    end = offset + size
    while offset + 4 <= end:
        fmt, attribute, value = struct.unpack_from("<BBH", data, offset)
        offset += 4
        if fmt == EIFMT_SVAL:
            records.append((attribute, data[offset:offset + value]))
            offset += value
        else:
            records.append((attribute, struct.pack("<H", value)))
    return records


def kernels_of_cubin(cubin, what):
    """{kernel: (registers, static shared bytes, launch-bound threads or None)} of one cubin."""
    sections, symbols = elf_sections(cubin, what)
    e_flags = struct.unpack_from("<I", cubin, 0x30)[0]
    arch = f"sm_{(e_flags >> 8) & 0xFF}"
    by_name = {s[0]: s for s in sections}
    regcount = {}
    if ".nv.info" in by_name:
        _, _, offset, size, _ = by_name[".nv.info"]
        for attribute, value in nv_info_records(cubin, offset, size):
            if attribute == EIATTR_REGCOUNT and len(value) == 8:
                symbol, registers = struct.unpack("<II", value)
                if symbol < len(symbols):
                    regcount[symbols[symbol]] = registers
    reserved = RESERVED_SHARED_BYTES if ".nv.shared.reserved.0" in by_name else 0
    kernels = {}
    for name, _, offset, size, _ in sections:
        if not name.startswith(".nv.info."):
            continue
        kernel = name[len(".nv.info."):]
        text = by_name.get(".text." + kernel)
        if text is None:
            raise ObjectError(f"{what} ({arch}): {name} but no .text.{kernel}")
        # CUDA 13's ptxas leaves the header's byte 0; older ones fill both.
        header_registers = text[4] >> 24
        registers = regcount.get(kernel, header_registers)
        if kernel not in regcount and header_registers == 0:
            raise ObjectError(f"{what} ({arch}): {kernel}: expected its register count in "
                              ".nv.info (EIATTR_REGCOUNT) or .text's sh_info, found neither")
        if header_registers not in (0, registers):
            raise ObjectError(f"{what} ({arch}): {kernel}: .text's header says "
                              f"{header_registers} registers, .nv.info's EIATTR_REGCOUNT "
                              f"{registers}")
        shared = by_name.get(".nv.shared." + kernel)
        bound = None
        for attribute, value in nv_info_records(cubin, offset, size):
            if attribute in (EIATTR_MAX_THREADS, EIATTR_REQNTID) and len(value) == 12:
                x, y, z = struct.unpack("<III", value)
                threads = x * max(y, 1) * max(z, 1)
                bound = threads if bound is None else min(bound, threads)
        static_shared = max(shared[3] - reserved, 0) if shared else 0
        kernels[kernel] = (arch, registers, static_shared, bound)
    return kernels


def object_kernels(path):
    with open(path, "rb") as file:
        data = file.read()
    sections, _ = elf_sections(data, path)
    found = []
    for name, _, offset, size, _ in sections:
        if name == ".nv_fatbin":
            for index, cubin in enumerate(fatbin_cubins(data[offset:offset + size], path)):
                found.extend(kernels_of_cubin(cubin, f"{path} cubin {index}").items())
    return found


def block_registers(registers, threads):
    """Registers a block of `threads` takes: per warp, rounded up to the allocation unit."""
    per_warp = -(-registers * WARP // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    return per_warp * -(-threads // WARP)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-block", type=int, default=MAX_BLOCK,
                        help="threads a block may have where a kernel has no __launch_bounds__")
    parser.add_argument("objects", nargs="+")
    args = parser.parse_args()

    kernels = 0
    problems = []
    tightest = None
    paths = [path for argument in args.objects for path in argument.split(";") if path]
    for path in paths:
        try:
            found = object_kernels(path)
        except (ObjectError, OSError, struct.error, ValueError, IndexError) as error:
            print(f"check-kernel-resources: cannot read {path}: {error}")
            return 2
        for kernel, (arch, registers, shared, bound) in found:
            kernels += 1
            threads = bound if bound is not None else args.max_block
            source = "__launch_bounds__" if bound is not None else "no __launch_bounds__"
            needed = block_registers(registers, threads)
            where = f"{path}: {kernel} ({arch})"
            if registers > REGISTERS_PER_THREAD:
                problems.append(f"{where}: {registers} registers a thread, the most is "
                                f"{REGISTERS_PER_THREAD}")
            if needed > REGISTERS_PER_SM:
                fits = REGISTERS_PER_SM // block_registers(registers, WARP) * WARP
                problems.append(
                    f"{where}: {registers} registers x {threads} threads ({source}) take "
                    f"{needed} registers, expected at most {REGISTERS_PER_SM} a multiprocessor: "
                    f"launch at most {fits} threads a block and declare that in "
                    f"__launch_bounds__, or declare __launch_bounds__({threads}) for ptxas to "
                    "use fewer registers")
            if shared > STATIC_SHARED_BYTES:
                problems.append(f"{where}: {shared} bytes of static shared memory, expected at "
                                f"most {STATIC_SHARED_BYTES}")
            if tightest is None or needed > tightest[0]:
                tightest = (needed, f"{kernel} ({arch}): {registers} registers x {threads} threads")
    for problem in problems:
        print(problem)
    if problems:
        plural = "s" if len(problems) > 1 else ""
        print(f"check-kernel-resources: {len(problems)} problem{plural} in {kernels} kernels")
        return 1
    if kernels == 0:
        print("check-kernel-resources: no kernel found in the objects given; expected nvcc's")
        return 2
    print(f"check-kernel-resources: {kernels} kernels within {REGISTERS_PER_SM} registers and "
          f"{STATIC_SHARED_BYTES} bytes of static shared memory a block; the most registers a "
          f"block: {tightest[0]}, {tightest[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
