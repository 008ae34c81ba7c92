#!/usr/bin/env bash
# Run on a Debian machine (the build machine), from anywhere. Makes .device-carry/ at the project
# root (ignored by git): what a bare GPU machine lacks to build and check kiln, about 35 MB, under
# the device tool's 64 MiB carry limit:
#   debs/  Debian's header-only and small packages kiln builds with (Eigen, fmt, Catch2, CLI11,
#          nlohmann-json, zlib headers, libjpeg-turbo's TurboJPEG and libpng with their shared
#          libraries), unpacked on the GPU machine by scripts/gpu-check.sh;
#   data/  the Fashion-MNIST files kiln-train's 2-epoch check trains on.
# Then one device call runs the whole check:
#   carry [".device-carry"], command  OUT_DIR=$OUT/gpu-check scripts/gpu-check.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.device-carry"
data=/usr/share/datasets/fashion-mnist
packages=(catch2 libcli11-dev libeigen3-dev libfmt-dev libfmt9 nlohmann-json3-dev zlib1g-dev
          libturbojpeg0-dev libturbojpeg0 libpng-dev libpng16-16)

rm -rf "$carry"
mkdir -p "$carry/debs" "$carry/data"
(cd "$carry/debs" && apt-get download -q -o APT::Sandbox::User=root "${packages[@]}")
if ! ls "$data"/*-ubyte.gz >/dev/null 2>&1; then
  echo "gpu-prepare-carry: no Fashion-MNIST under $data (apt-get install dataset-fashion-mnist)" >&2
  exit 1
fi
cp "$data"/*-ubyte.gz "$carry/data/"
size_mb=$(du -sm "$carry" | cut -f1)
if [ "$size_mb" -ge 64 ]; then
  echo "gpu-prepare-carry: $carry is $size_mb MB, over the 64 MiB carry limit" >&2
  exit 1
fi
echo "gpu-prepare-carry: $carry ready ($size_mb MB: ${#packages[@]} packages, $(ls "$carry/data" | wc -l) data files)"
