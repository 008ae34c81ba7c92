#!/usr/bin/env bash
# The main job: install dependencies, build kiln (with CUDA when nvcc is present) and train the
# default model on the best device present. Extra arguments go to the program.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_APPS=ON
cmake --build build --target kiln-demo
build/apps/kiln-demo "$@"
