#!/usr/bin/env bash
# kiln's CPU training throughput against PyTorch's, run alternately so that both see the same
# machine: a shared or throttled host moves single runs by a third, so compare medians of pairs.
#
#   scripts/bench-cpu-throughput.sh [rounds] [build dir] [--amp bf16|fp16]  (defaults: 5, build, f32)
#
# --amp runs both under autocast (PyTorch's CPU autocast). KILN_CPU_ISA=avx2 (core/cpu_isa.h)
# caps kiln's kernels, to see what a machine without AVX-512 gets. Needs a release build with
# benchmarks (cmake -DCMAKE_BUILD_TYPE=Release) and Debian's python3-torch for the peer.
set -euo pipefail
positional=() amp=off
while (($#)); do
  case $1 in
    --amp) amp=${2:?--amp needs bf16 or fp16}; shift 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
rounds=${positional[0]:-5}
build=${positional[1]:-build}
cd "$(dirname "$0")/.."
kiln_bin="$build/benchmarks/train_throughput"
[[ -x "$kiln_bin" ]] || { echo "bench-cpu-throughput: no $kiln_bin; build the benchmarks first" >&2; exit 2; }

kiln=() torch=()
for ((i = 1; i <= rounds; ++i)); do
  k=$(OMP_WAIT_POLICY=PASSIVE "$kiln_bin" --threads 2 --steps 20 --amp "$amp" |
      sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
  t=$(/usr/bin/python3 benchmarks/train_throughput_torch.py --threads 2 --steps 20 --amp "$amp" |
      sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
  echo "round $i: kiln $k images/s, torch $t images/s"
  kiln+=("$k") torch+=("$t")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
km=$(median "${kiln[@]}") tm=$(median "${torch[@]}")
echo "median ($amp): kiln $km images/s, torch $tm images/s, ratio $(awk -v k="$km" -v t="$tm" 'BEGIN {printf "%.2f", k / t}')"
