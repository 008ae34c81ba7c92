#!/usr/bin/env bash
# The main job: install dependencies, build kiln (with CUDA when nvcc is present) and train the
# default recipe (CIFAR-style ResNet-20 on Fashion-MNIST, 2 epochs, see docs/results.md) on the
# best device present. Extra arguments go to kiln-train (for example --device cpu --epochs 1).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_APPS=ON
cmake --build build --target kiln-train
# OpenMP threads that sleep instead of spinning while they wait: the DataLoader's workers share
# the cores with them, and spinning threads starve the workers (docs/results.md).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
build/apps/kiln-train --checkpoint-dir runs/default "$@"
