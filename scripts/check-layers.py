#!/usr/bin/env python3
"""The floors of kiln's library and programs, and the check that no file includes a floor above
its own. Floors, from the bottom:

 -1 sim       the CUDA simulator (KILN_CUDA=SIM): the device shim, the scheduler and the simulated
              CUDA runtime; it includes nothing of kiln's, so core and kernels may include it
  0 core      the data model and the runtime: devices, dtypes, shapes, errors, storage and
              allocators, Tensor's fields and accessors, generators, the CUDA runtime, autograd's
              nodes and grad mode
  1 kernels   device code: the device-neutral family headers (kernels/*.h: descriptors and the
              table of each family's kernels), then kernels/cpu and kernels/cuda
  2 ops       op entry points: argument checks, the one device switch, backward nodes, the
              autograd engine, Tensor's computing methods
  3 nn, optim layers, models, losses; optimizers and schedules
  4 data, train, dist
  5 apps, benchmarks, tests, docs snippets (programs: anything below them)

Within kernels, cpu and cuda include the family headers and core, never each other. Folders that
share a floor above ops are siblings and do not include each other (nn does not need optim, nor
data train). A file may include its own floor and the floors below. Usage: scripts/check-layers.py [root]; exit status 1
lists every upward include.
"""
import pathlib
import re
import sys

FLOORS = [
    ("sim", -1),
    ("core", 0),
    ("kernels", 1),
    ("ops", 2),
    ("nn", 3),
    ("optim", 3),
    ("data", 4),
    ("train", 4),
    ("dist", 4),
    ("apps", 5),
    ("benchmarks", 5),
    ("tests", 5),
]
FLOOR_OF = dict(FLOORS)
NAMES = {-1: "sim", 0: "core", 1: "kernels", 2: "ops", 3: "nn/optim", 4: "data/train/dist", 5: "programs"}
SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"kiln/([^"]+)"', re.M)


def floor(path):
    top = path.split("/", 1)[0]
    if path == "kiln.h":
        return 5  # the umbrella header includes every floor: only programs may use it
    return FLOOR_OF.get(top)


def top_folder(path):
    return path.split("/", 1)[0]


def device_side(path):
    parts = path.split("/")
    return parts[1] if parts[0] == "kernels" and len(parts) > 2 else None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    files = 0
    for top, _ in FLOORS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            files += 1
            rel = path.relative_to(root).as_posix()
            mine = floor(rel)
            for target in INCLUDE.findall(path.read_text()):
                theirs = floor(target)
                if theirs is None:
                    problems.append(f"{rel}: includes kiln/{target}, which is on no floor")
                elif theirs > mine:
                    problems.append(f"{rel} ({NAMES[mine]}) includes kiln/{target} "
                                    f"({NAMES[theirs]}): an upward include")
                elif theirs == mine and mine in (3, 4) and top_folder(rel) != top_folder(target):
                    problems.append(f"{rel} includes kiln/{target}: {top_folder(rel)} and "
                                    f"{top_folder(target)} are siblings on one floor")
                elif device_side(rel) and device_side(target) and \
                        device_side(rel) != device_side(target):
                    problems.append(f"{rel} includes kiln/{target}: one device's kernels reach "
                                    f"into the other's; share through kernels/*.h")
    for line in problems:
        print(line)
    if problems:
        print(f"check-layers: {len(problems)} includes break the floors ({files} files)")
        return 1
    print(f"check-layers: {files} files, no include reaches a floor above its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
