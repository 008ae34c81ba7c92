#!/usr/bin/env bash
# kiln's CPU attention (fused, and composed in the same run) against PyTorch 1.13's
# MultiheadAttention internals, forward + backward, run alternately so that both see the same
# machine; medians of the rounds.
#
#   scripts/bench-cpu-attention.sh [rounds] [build dir] [-- extra flags for both, e.g. --causal]
#   (defaults: 5, build; 2 x 4 heads of 64, L = S = 1024, 2 threads, the minimum of 5 calls each)
set -euo pipefail
rounds=${1:-5}
build=${2:-build}
shift $(($# > 2 ? 2 : $#))
[[ ${1:-} == -- ]] && shift
cd "$(dirname "$0")/.."
kiln_bin="$build/benchmarks/attention_cpu"
[[ -x "$kiln_bin" ]] || { echo "bench-cpu-attention: no $kiln_bin; build the benchmarks first" >&2; exit 2; }
fused=() composed=() torch=()
for ((i = 1; i <= rounds; ++i)); do
  k=$("$kiln_bin" "$@")
  t=$(/usr/bin/python3 benchmarks/attention_cpu_torch.py "$@")
  f=$(sed -n 's/.*fused \([0-9.]*\) ms.*/\1/p' <<< "$k")
  c=$(sed -n 's/.*composed \([0-9.]*\) ms.*/\1/p' <<< "$k")
  p=$(sed -n 's/.*: \([0-9.]*\) ms.*/\1/p' <<< "$t")
  echo "round $i: kiln fused $f ms, kiln composed $c ms, torch $p ms"
  fused+=("$f") composed+=("$c") torch+=("$p")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
fm=$(median "${fused[@]}") cm=$(median "${composed[@]}") tm=$(median "${torch[@]}")
echo "median: kiln fused $fm ms, kiln composed $cm ms, torch $tm ms; torch / fused $(awk -v f="$fm" -v t="$tm" 'BEGIN {printf "%.2f", t / f}')"
