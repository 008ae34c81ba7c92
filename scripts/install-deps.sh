#!/usr/bin/env bash
# Installs the Debian packages kiln builds with (scripts/run.sh and scripts/test.sh call it: the
# README's two commands). Skips apt entirely when everything is already there, so it also works
# offline on a prepared machine.
set -euo pipefail

packages=(cmake ninja-build g++ libeigen3-dev catch2 libfmt-dev zlib1g-dev nlohmann-json3-dev
          libcli11-dev libopenmpi-dev openmpi-bin libgloo-dev dataset-fashion-mnist python3
          libboost-context-dev libturbojpeg0-dev libpng-dev libdnnl-dev ccache)
# The test job also builds the library with clang and LLVM's libc++ (scripts/test.sh), and draws
# kiln-train's curves with gnuplot (its tests check that no directory name reaches a shell), and
# compares the image transforms with torchvision's on the same files (tests/torchvision); its
# ~100 programs link with LLVM's lld (cmake/KilnLinker.cmake), and its first stage checks the
# formatting with clang-format 14 (scripts/check-format.sh). ccache, for both commands, compiles
# each source once per machine (cmake/KilnCcache.cmake). PyTorch, the peer of the comparisons,
# does its f32 matrix products through the system's BLAS: OpenBLAS, not the reference BLAS that
# python3-torch alone brings (1024^3 in 65 ms instead of 800 on the dev VM, docs/results.md).
if [ "${KILN_DEPS:-run}" = test ]; then
  packages+=(clang lld libc++-dev libc++abi-dev libomp-dev gnuplot-nox python3-torchvision
             clang-format libopenblas0-openmp)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
